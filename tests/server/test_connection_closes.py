"""Each connection the worker closes is counted once, for the reason it was closed
(service/server/worker.py's waits, which feed service/server/connection_metrics.py). In process, under
gevent, with waits that stand for a connection's: what the worker's ``IdleConnections`` reports is what
``/metrics`` shows (tests/deploy/test_connection_metrics_gunicorn.py reads it there, the worker's own choice
of each wait's reason included)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import gevent
import gevent.event
import pytest

from service.server import worker
from service.server.connection_metrics import CloseReason
from service.server.worker import IdleConnections
from service.web.connection import WaitEnd

HELD_SECONDS = 5.0  # how long a wait lasts unless it is ended (every test ends its waits well before)


@pytest.fixture
def counted() -> list[CloseReason]:
    return []


@pytest.fixture
def idle(counted: list[CloseReason]) -> IdleConnections:
    return IdleConnections(count_close=counted.append)


@contextmanager
def waiting(waits: list[Callable[[], AbstractContextManager[Any]]]) -> Iterator[list[gevent.Greenlet]]:
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


def test_a_heads_own_deadline_counts_it_once_under_its_deadlines_reason(
    idle: IdleConnections, counted: list[CloseReason]
) -> None:
    waits = [
        lambda: idle.wait(0.05, kept_alive=False),
        lambda: idle.wait(0.05, kept_alive=True),
        lambda: idle.wait(0.05, kept_alive=False, deadline_reason="tls_handshake_timeout"),
        lambda: idle.wait(HELD_SECONDS, kept_alive=False),  # answered in time: released, not counted
    ]
    with waiting(waits) as greenlets:
        gevent.joinall(greenlets[:3], timeout=HELD_SECONDS)
    assert sorted(counted) == ["head_timeout", "idle_timeout", "tls_handshake_timeout"]


@pytest.mark.parametrize(
    ("keep_alive_seconds", "head_seconds"),
    [(HELD_SECONDS, 0.05), (0.05, HELD_SECONDS)],
    ids=["the head deadline is sooner", "the keep-alive one is"],
)
def test_a_kept_alive_head_that_starts_is_a_head_timeout_if_it_never_ends(
    idle: IdleConnections, counted: list[CloseReason], keep_alive_seconds: float, head_seconds: float
) -> None:
    """Once its head starts, a kept-alive connection is no longer idle: closed at either deadline, it is
    counted as a head that did not end."""

    def next_head_started() -> None:
        with idle.wait(keep_alive_seconds, kept_alive=True, head_seconds=head_seconds) as wait:
            wait.head_started()  # as its socket calls it, in its greenlet, when the head's first bytes come
            gevent.sleep(HELD_SECONDS)

    gevent.spawn(next_head_started).join(timeout=HELD_SECONDS)
    assert counted == ["head_timeout"]


def test_waits_ended_for_room_count_once_as_crowded(
    idle: IdleConnections, counted: list[CloseReason], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A head's wait ends by its timeout, thrown in as if it had fired: the end for room is counted, the
    timeout the head's wait then swallows is not counted again as its own deadline."""
    monkeypatch.setattr(worker, "MIN_IDLE_SECONDS", 0.0)  # any head may be closed for room at once
    ended: list[WaitEnd] = []
    with waiting([lambda: idle.wait(HELD_SECONDS, kept_alive=False), lambda: idle.room(ended.append)]):
        assert idle.close_longest_idle(2) == 2
        assert idle.close_longest_idle(2) == 0  # both are ending: neither is chosen again
        gevent.sleep(0)  # the loop runs the ends
    assert counted == ["crowded", "crowded"]
    assert ended == [WaitEnd.CROWDED]


def test_a_wait_ended_because_its_client_left_is_not_the_servers_close(
    idle: IdleConnections, counted: list[CloseReason]
) -> None:
    ended: list[WaitEnd] = []
    with waiting([lambda: idle.room(ended.append)]) as greenlets:
        assert idle.end_waits_for_room_of_clients_gone(lambda connection: connection is greenlets[0]) == 1
        gevent.sleep(0)
    assert ended == [WaitEnd.CLIENT_LEFT]
    assert counted == []


def test_kept_alive_connections_closed_as_the_worker_stops_count_as_stopping_and_only_once(
    idle: IdleConnections, counted: list[CloseReason], monkeypatch: pytest.MonkeyPatch
) -> None:
    """(That the worker gives a kept-alive connection this wait as it stops is tested against gunicorn.)"""
    monkeypatch.setattr(worker, "MIN_IDLE_SECONDS", 0.0)
    waits = [
        lambda: idle.wait(HELD_SECONDS, kept_alive=True),  # ending for room as the stop begins: "crowded"
        lambda: idle.wait(HELD_SECONDS, kept_alive=True),
        lambda: idle.wait(HELD_SECONDS, kept_alive=False),  # a new connection's first head: left to it
    ]
    with waiting(waits) as greenlets:
        assert idle.close_longest_idle(1) == 1  # the oldest
        assert idle.end_kept_alive_waits() == 1
        gevent.joinall(greenlets[:2], timeout=HELD_SECONDS)
        assert not greenlets[2].dead
    assert counted == ["crowded", "stopping"]
