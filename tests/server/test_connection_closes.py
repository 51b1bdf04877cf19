"""Each connection the worker closes is counted once, for the reason it was closed
(service/server/worker.py's waits, which feed service/server/connection_metrics.py). In process, under
gevent, with waits that stand for a connection's: what the worker's ``IdleConnections`` reports is what
``/metrics`` shows (tests/deploy/test_connection_metrics_gunicorn.py reads it there)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import gevent
import gevent.event

from service.server import worker
from service.server.connection_metrics import CLOSE_REASONS
from service.server.worker import MIN_IDLE_SECONDS, IdleConnections

HELD_SECONDS = 5.0  # how long a wait lasts unless it is ended (every test ends its waits well before)


@contextmanager
def waiting(
    idle: IdleConnections, waits: list[Callable[[], AbstractContextManager[Any]]]
) -> Iterator[list[gevent.Greenlet]]:
    """A greenlet per wait, each inside its wait until it is ended or released at the end of the ``with``."""
    release = gevent.event.Event()

    def hold(wait: Callable[[], AbstractContextManager[Any]]) -> None:
        with wait():
            release.wait(HELD_SECONDS)

    greenlets = [gevent.spawn(hold, wait) for wait in waits]
    gevent.sleep(0)  # each is inside its wait
    try:
        yield greenlets
    finally:
        release.set()
        gevent.joinall(greenlets, timeout=HELD_SECONDS)


def test_a_heads_own_deadline_counts_it_once_under_its_expiry() -> None:
    closed: list[str] = []
    idle = IdleConnections(closed_by_server=closed.append)
    waits = [
        lambda: idle.wait(0.05, kept_alive=False),
        lambda: idle.wait(0.05, kept_alive=True),
        lambda: idle.wait(0.05, kept_alive=False, expiry="tls_handshake_timeout"),
        lambda: idle.wait(HELD_SECONDS, kept_alive=False),  # answered in time: released, not counted
    ]
    with waiting(idle, waits) as greenlets:
        gevent.joinall(greenlets[:3], timeout=HELD_SECONDS)
        gevent.sleep(0.1)
    assert sorted(closed) == ["head_timeout", "idle_timeout", "tls_handshake_timeout"]


def test_a_kept_alive_head_that_starts_is_a_head_timeout_if_it_never_ends() -> None:
    closed: list[str] = []
    idle = IdleConnections(closed_by_server=closed.append)

    def next_head_started() -> None:
        with idle.wait(HELD_SECONDS, kept_alive=True, head_seconds=0.05) as wait:
            wait.head_started()  # as its socket calls it, in its greenlet, when the head's first bytes come
            gevent.sleep(HELD_SECONDS)

    gevent.spawn(next_head_started).join(timeout=HELD_SECONDS)
    assert closed == ["head_timeout"]


def test_waits_ended_for_room_count_as_crowded_and_not_again_at_their_deadline() -> None:
    closed: list[str] = []
    ended: list[object] = []
    idle = IdleConnections(closed_by_server=closed.append)
    waits = [
        lambda: idle.wait(MIN_IDLE_SECONDS + 0.2, kept_alive=False),  # its deadline would come soon after
        lambda: idle.room(ended.append),
    ]
    with waiting(idle, waits):
        gevent.sleep(MIN_IDLE_SECONDS)  # the head has waited long enough to be closed for room
        assert idle.close_longest_idle(2) == 2
        gevent.sleep(0.5)  # past the head's own deadline
    assert closed == ["crowded", "crowded"]
    assert len(ended) == 1


def test_a_wait_ended_because_its_client_left_is_not_the_servers_close() -> None:
    closed: list[str] = []
    idle = IdleConnections(closed_by_server=closed.append)
    with waiting(idle, [lambda: idle.room(lambda why: None)]) as greenlets:
        assert idle.end_waits_for_room_of_clients_gone(lambda connection: connection is greenlets[0]) == 1
        gevent.sleep(0)
    assert closed == []


def test_kept_alive_connections_closed_as_the_worker_stops_count_as_stopping() -> None:
    closed: list[str] = []
    idle = IdleConnections(closed_by_server=closed.append)
    waits = [
        lambda: idle.wait(HELD_SECONDS, kept_alive=True),
        lambda: idle.wait(HELD_SECONDS, kept_alive=False),  # a new connection's first head: left to it
        lambda: idle.wait(0.0, kept_alive=True, expiry="stopping"),  # as timeout_ctx() gives while stopping
    ]
    with waiting(idle, waits) as greenlets:
        gevent.sleep(0.05)  # the third's deadline has come
        assert idle.end_kept_alive_waits() == 1
        gevent.joinall([greenlets[0], greenlets[2]], timeout=HELD_SECONDS)
        assert not greenlets[1].dead
    assert closed == ["stopping", "stopping"]


def test_every_reason_the_worker_names_is_one_the_metrics_count() -> None:
    """A reason the metrics do not know would be a KeyError in the worker, at the moment it closes a
    connection: every one written in the worker's source is among :data:`CLOSE_REASONS`."""
    source = inspect.getsource(worker)
    named = set(re.findall(r'(?:expiry=|_closed_by_server\(|WaitEnd\.\w+, )"(\w+)"', source))
    named |= set(re.findall(r'"(\w+_timeout)"', source))
    assert len(named) >= 8
    assert named <= set(CLOSE_REASONS)
