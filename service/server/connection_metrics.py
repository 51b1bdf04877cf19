"""What the worker does with connections, on ``/metrics``: how many are open, and which it closed and why.

The HTTP metrics (service/web/metrics.py) count answers. The worker's own decisions about connections have
none to count: a head that never came, a crowd closed to make room, a TLS handshake that failed, a client
that stopped reading. Under hostile traffic those are what an operator needs to see (docs/operations.md,
"Connection metrics"), so the worker counts them here.

Every series is made when the worker starts, at 0, so that a rate or an alert on any of them has a series to
read before the first event. The one label, ``reason``, takes its values from :data:`CLOSE_REASONS` only.
Under gunicorn the samples go to the multiprocess files as the HTTP metrics' do (gunicorn_settings.py), and
the open connections and capacity are summed over the live workers.
"""

from __future__ import annotations

import functools
from typing import Literal, get_args

from prometheus_client import Counter, Gauge

# Why the server closed a connection before its client did (docs/operations.md, "Connection metrics", says
# what each means; a test holds the two to the same names).
CloseReason = Literal[
    "idle_timeout",  # GUNICORN_KEEPALIVE
    "head_timeout",  # HEADER_TIMEOUT_SECONDS
    "crowded",  # closed to make room
    "answer_stalled",  # ANSWER_TIMEOUT_SECONDS
    "answer_too_slow",  # ANSWER_MIN_BYTES_PER_SECOND
    "stopping",
    "tls_handshake_timeout",
    "tls_handshake_failed",
    "plain_http",  # to a TLS port
]
CLOSE_REASONS: tuple[CloseReason, ...] = get_args(CloseReason)
PREFIX = "attention_connections_"  # every series' name starts so
CLOSED = PREFIX + "closed_by_server"  # the counter of closes, by reason


class ConnectionMetrics:
    """One worker process's connection series (see the module's docstring); :func:`connection_metrics`."""

    def __init__(self) -> None:
        self._accepted = Counter(PREFIX + "accepted", "Client connections accepted.")
        self._open = Gauge(
            PREFIX + "open",
            "Client connections open now, summed over the live workers.",
            multiprocess_mode="livesum",
        )
        self._capacity = Gauge(
            PREFIX + "capacity",
            "Connections the live workers may hold (worker_connections each), summed; past 90 % of a "
            "worker's, it closes connections to make room.",
            multiprocess_mode="livesum",
        )
        closed = Counter(
            CLOSED,
            "Connections the server closed before their client did, by reason (the reasons are fixed).",
            ["reason"],
        )
        self._closed = {reason: closed.labels(reason) for reason in CLOSE_REASONS}

    def set_capacity(self, worker_connections: int) -> None:
        """This worker process may hold ``worker_connections`` connections."""
        self._capacity.set(worker_connections)

    def connection_accepted(self) -> None:
        self._accepted.inc()
        self._open.inc()

    def connection_ended(self) -> None:
        """A connection accepted is closed, by either side, for whatever reason."""
        self._open.dec()

    def count_close(self, reason: CloseReason) -> None:
        """A connection the server closed for ``reason``."""
        self._closed[reason].inc()


@functools.cache
def connection_metrics() -> ConnectionMetrics:
    """This process's connection metrics, made on first use: by a worker, once it has forked. gunicorn's
    master imports the worker's module, and metrics made there at import would give the master sample files
    of its own in the metrics directory, which nothing writes to. (The worker's ``__init__`` runs in the
    master too, so the worker looks its metrics up when it counts.)"""
    return ConnectionMetrics()
