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

from prometheus_client import Counter, Gauge

# Why the server closed a connection before its client did (docs/operations.md, "Connection metrics", says
# what each means; a test holds the two to the same names).
CLOSE_REASONS = (
    "idle_timeout",  # GUNICORN_KEEPALIVE
    "head_timeout",  # HEADER_TIMEOUT_SECONDS
    "crowded",  # closed to make room
    "answer_stalled",  # ANSWER_TIMEOUT_SECONDS
    "stopping",
    "tls_handshake_timeout",
    "tls_handshake_failed",
    "plain_http",  # to a TLS port
)


class ConnectionMetrics:
    """One worker process's connection series (see the module's docstring); :func:`connection_metrics`."""

    def __init__(self) -> None:
        self.accepted = Counter("attention_connections_accepted", "Client connections accepted.")
        self.open = Gauge(
            "attention_connections_open",
            "Client connections open now, summed over the live workers.",
            multiprocess_mode="livesum",
        )
        self.capacity = Gauge(
            "attention_connections_capacity",
            "Connections the live workers may hold (worker_connections each), summed; past 90 % of a "
            "worker's, it closes connections to make room.",
            multiprocess_mode="livesum",
        )
        closed = Counter(
            "attention_connections_closed_by_server",
            "Connections the server closed before their client did, by reason (the reasons are fixed).",
            ["reason"],
        )
        self._closed = {reason: closed.labels(reason) for reason in CLOSE_REASONS}

    def serving(self, worker_connections: int) -> None:
        """This worker process may hold ``worker_connections`` connections from now on."""
        self.capacity.set(worker_connections)

    def opened(self) -> None:
        self.accepted.inc()
        self.open.inc()

    def ended(self) -> None:
        self.open.dec()

    def closed_by_server(self, reason: str) -> None:
        """Count a connection the server closed for ``reason`` (one of :data:`CLOSE_REASONS`)."""
        self._closed[reason].inc()


@functools.cache
def connection_metrics() -> ConnectionMetrics:
    """This process's connection metrics, made on first use. The worker first uses them once it has forked:
    made in gunicorn's master (which imports the worker's module), their samples would go to files of the
    master's, which the master's start-up then deletes."""
    return ConnectionMetrics()
