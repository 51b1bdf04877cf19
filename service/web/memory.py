"""Give freed memory back to the system after a large request, so an idle worker is back near its fresh size.

glibc's malloc keeps freed memory for reuse: after one request of a few hundred MB its dynamic mmap
threshold has grown, later large arrays come from the heap, and an idle worker can keep 350 to 550 MB it no
longer uses. ``malloc_trim(0)`` returns the free pages; it costs a walk over the heap (milliseconds), so it
runs only after requests whose body or answer was large, once the answer has been sent and the request's
objects are gone, and only once the worker has had no large request for a moment (:class:`ReleaseSchedule`):
a worker busy with large requests reuses what the last one freed. Elsewhere (musl, macOS) there is no
``malloc_trim`` and this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time
from collections.abc import Callable

from flask import Flask, Response
from flask.wrappers import Request

from service.web.body import body_size_of
from service.web.hooks import RequestGlobals, request_steps

# Bodies at least this large leave enough behind to be worth a trim (the seed request is 100 bytes).
LARGE_BODY_BYTES = 1024 * 1024
# Trimming after every large request made the next one fault every page back in: 512 × 512 attention with
# weights (1.9 MB of JSON in, 5 MB out) took 3,600 page faults and about 3 ms more CPU per request, a tenth of
# its cost (docs/performance.md). So the worker trims once it has had no large request for QUIET_SECONDS, and,
# while they keep coming, at most LONGEST_DELAY_SECONDS after the first one it has not trimmed for.
QUIET_SECONDS = 1.0
LONGEST_DELAY_SECONDS = 10.0


def _glibc_function(name: str, argtypes: list[type]) -> Callable[..., int] | None:
    """The C library's function ``name`` returning an int, or None where there is no such library or
    function (musl has no ``malloc_trim``)."""
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        function = getattr(ctypes.CDLL(library), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    typed: Callable[..., int] = function
    return typed


_MALLOC_TRIM: Callable[[int], int] | None = _glibc_function("malloc_trim", [ctypes.c_size_t])

# glibc's mallopt parameter (malloc.h) for the number of malloc arenas.
_M_ARENA_MAX = -8


def _one_malloc_arena() -> bool:
    """Have every thread allocate from glibc's main arena, the one ``malloc_trim`` gives back in full.

    Admission computes and decodes on threads; glibc would give each its own arena, whose heap top
    ``malloc_trim`` leaves alone and which keeps up to 64 MiB after a large request (a worker stayed 45 MiB
    above its fresh size after a body of 1.3 million unknown fields was decoded on a thread). One arena costs
    nothing measurable here: the interpreter lock already lets one thread allocate at a time.
    """
    mallopt = _glibc_function("mallopt", [ctypes.c_int, ctypes.c_int])
    return mallopt is not None and bool(mallopt(_M_ARENA_MAX, 1))


def release_freed_memory() -> bool:
    """Return free heap pages to the system; True when something was released."""
    return bool(_MALLOC_TRIM(0)) if _MALLOC_TRIM is not None else False


class ReleaseSchedule:
    """When the freed memory of large requests is due to be released, on the clock the caller reads.

    Due ``quiet_seconds`` after the last large request, or ``longest_delay_seconds`` after the first one not
    yet released, whichever comes first; nothing is due when no large request is waiting for a release.
    """

    def __init__(
        self, *, quiet_seconds: float = QUIET_SECONDS, longest_delay_seconds: float = LONGEST_DELAY_SECONDS
    ) -> None:
        self.quiet_seconds = quiet_seconds
        self.longest_delay_seconds = longest_delay_seconds
        self._first_waiting: float | None = None
        self._last: float = 0.0

    def large_request_done(self, now: float) -> None:
        if self._first_waiting is None:
            self._first_waiting = now
        self._last = now

    def seconds_until_due(self, now: float) -> float | None:
        """Seconds until the release is due (0.0 when it is), or None when nothing waits for one."""
        if self._first_waiting is None:
            return None
        due = min(self._last + self.quiet_seconds, self._first_waiting + self.longest_delay_seconds)
        return max(0.0, due - now)

    def released(self) -> None:
        self._first_waiting = None


class DeferredRelease:
    """Calls ``release`` when its :class:`ReleaseSchedule` says so, from a daemon thread of its own.

    The thread starts with the first large request of each process (a worker forks without its parent's
    threads). Under the gevent worker ``threading`` is gevent's, so the thread is a greenlet on the worker's
    loop and the release runs between requests, as it did right after each answer before.
    """

    def __init__(
        self,
        release: Callable[[], object] = release_freed_memory,
        schedule: ReleaseSchedule | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._release = release
        self._schedule = schedule or ReleaseSchedule()
        self._clock = clock
        # The process whose thread runs the releases, and the condition that wakes that thread.
        self._thread_of: tuple[int, threading.Condition] | None = None
        self._starting = threading.Lock()  # held for no more than a few statements that cannot yield

    def large_request_done(self) -> None:
        """Note a large request whose answer has been sent; its memory is released when due."""
        with self._starting:
            thread_of, start = self._thread_of, False
            if thread_of is None or thread_of[0] != os.getpid():
                # Made here rather than at import: in the worker, after gevent has patched threading.
                thread_of = self._thread_of = (os.getpid(), threading.Condition())
                start = True
        changed = thread_of[1]
        if start:
            thread = threading.Thread(target=self._run, args=(changed,), name="memory-release", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # no thread to be had now (a sync worker at its limits): release at once,
                with self._starting:  # as before the schedule, and try the thread again next time
                    self._thread_of = None
                self._release()
                return
        with changed:
            self._schedule.large_request_done(self._clock())
            changed.notify()

    def _run(self, changed: threading.Condition) -> None:
        while True:
            with changed:
                wait = self._schedule.seconds_until_due(self._clock())
                while wait is None or wait > 0:
                    changed.wait(wait)
                    wait = self._schedule.seconds_until_due(self._clock())
                self._schedule.released()
            self._release()


_DEFERRED_RELEASE = DeferredRelease()


def install_memory_release(app: Flask) -> None:
    """After a large body or a large answer (streamed, or 1 MiB or more) is sent, release what was freed once
    the worker is quiet (:class:`ReleaseSchedule`), and keep every thread's allocations in the arena that
    release reaches (:func:`_one_malloc_arena`)."""
    _one_malloc_arena()
    request_steps(app).add_after(_release_after_large_requests)


def large_request_done() -> None:
    """Schedule a release of the memory a large request freed (:class:`ReleaseSchedule` says when)."""
    _DEFERRED_RELEASE.large_request_done()


def _release_after_large_requests(request: Request, g: RequestGlobals, response: Response) -> Response:
    large_answer = response.is_streamed or (response.content_length or 0) >= LARGE_BODY_BYTES
    if large_answer or body_size_of(request) >= LARGE_BODY_BYTES:  # inflated, if it came compressed
        response.call_on_close(large_request_done)
    return response
