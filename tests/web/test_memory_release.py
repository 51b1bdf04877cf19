"""When a worker gives the memory of large requests back: once it has been quiet, not after each one.

That a forked gunicorn worker starts its own release thread and gets back near its fresh size is
tests/deploy/test_memory_budget_gunicorn.py's.
"""

from __future__ import annotations

import threading

import pytest

from service.web.memory import DeferredRelease, ReleaseSchedule


def test_nothing_is_due_before_a_large_request() -> None:
    assert ReleaseSchedule().seconds_until_due(100.0) is None


def test_a_release_is_due_once_the_worker_has_been_quiet() -> None:
    schedule = ReleaseSchedule(quiet_seconds=1.0, longest_delay_seconds=10.0)
    schedule.large_request_done(100.0)
    assert schedule.seconds_until_due(100.25) == pytest.approx(0.75)
    schedule.large_request_done(100.5)  # another one: the quiet starts again
    assert schedule.seconds_until_due(101.25) == pytest.approx(0.25)
    assert schedule.seconds_until_due(101.5) == 0.0
    assert schedule.seconds_until_due(200.0) == 0.0
    schedule.released()
    assert schedule.seconds_until_due(200.0) is None


def test_large_requests_that_keep_coming_are_released_after_the_longest_delay() -> None:
    schedule = ReleaseSchedule(quiet_seconds=1.0, longest_delay_seconds=10.0)
    for tenth in range(0, 96):  # one every 0.1 s from t = 0 to t = 9.5: never 1 s of quiet
        schedule.large_request_done(tenth / 10)
    # Due 10 s after the first, not 1 s after the last.
    assert schedule.seconds_until_due(9.5) == pytest.approx(0.5)
    assert schedule.seconds_until_due(10.0) == 0.0
    schedule.released()
    schedule.large_request_done(10.2)  # the next one waits its own quiet again
    assert schedule.seconds_until_due(10.2) == pytest.approx(1.0)


class _Clock:
    """A clock the test moves; the release thread reads it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_release_thread_releases_once_per_quiet_spell() -> None:
    clock = _Clock()
    released = threading.Semaphore(0)
    calls: list[float] = []

    def release() -> None:
        calls.append(clock.now)
        released.release()

    # The thread waits, on the real clock, as long as the test's clock says is left of the quiet spell, then
    # reads the test's clock again: it releases only once the test has moved its clock past the spell.
    deferred = DeferredRelease(release, ReleaseSchedule(quiet_seconds=0.05, longest_delay_seconds=1.0), clock)
    deferred.large_request_done()
    deferred.large_request_done()
    assert not released.acquire(timeout=0.3), "released before the worker had been quiet"
    clock.now = 0.05
    assert released.acquire(timeout=5), "no release after the quiet spell"
    assert not released.acquire(timeout=0.3), "released twice for one quiet spell"
    assert calls == [0.05]
    deferred.large_request_done()  # the same thread serves the next spell
    clock.now = 0.1
    assert released.acquire(timeout=5)
    assert calls == [0.05, 0.1]


def test_a_worker_that_cannot_start_the_thread_releases_at_once_and_tries_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    released = threading.Semaphore(0)
    start = threading.Thread.start

    def refuse(thread: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    def release() -> None:
        calls.append(threading.current_thread().name)
        released.release()

    deferred = DeferredRelease(release, ReleaseSchedule(quiet_seconds=0.0))
    monkeypatch.setattr(threading.Thread, "start", refuse)
    deferred.large_request_done()
    assert calls == [threading.current_thread().name]  # at once, on the request's own thread, as before
    assert released.acquire(timeout=0)
    monkeypatch.setattr(threading.Thread, "start", start)
    deferred.large_request_done()  # the thread starts this time, and releases when due
    assert released.acquire(timeout=5), "the thread never released"
    assert calls == [threading.current_thread().name, "memory-release"]
