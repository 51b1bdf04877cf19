"""Admission control: whether this process takes a request on, decided before the work is done.

One :class:`Admission` per app (so one per gunicorn worker process) holds:

- **One memory budget** (``MEMORY_BUDGET_BYTES``) shared by everything the process holds for its requests:
  bodies being read, computations, and answers being written reserve from it and give their share back when
  the answer has been sent; a large body's parse holds a bound of its peak while it runs
  (:func:`room_for_parsing`). A body over ``MAX_BODY_BYTES`` is refused from its headers (413); its room is
  taken as the app starts to read it, before any of its bytes are read, so a request answered without
  reading its body takes none; 503 ``overloaded`` when no room comes free for it in time. Uploads larger than
  :data:`SMALL_BODY_BYTES` may hold at most :data:`UPLOAD_SHARE` of the budget between them, and they and
  the computations leave :data:`SMALL_REQUEST_SHARE` of it to small requests, so neither a crowd of held
  uploads nor the largest computation keeps the worked example out. A body that does not fit now waits for
  room (first come first served, at most ``COMPUTE_QUEUE_LENGTH`` of them, for ``COMPUTE_QUEUE_SECONDS``)
  with none of its bytes read: what holds the budget is usually a computation or an answer that gives it
  back within moments.
- **Compute slots** (``COMPUTE_SLOTS``, one per worker by default; work estimated at most
  :data:`NO_SLOT_SECONDS` needs none and runs at once) behind a bounded queue
  (``COMPUTE_QUEUE_LENGTH``), first come first served but for memory (:meth:`Admission._turn_of`). Under
  the gevent worker a kernel runs on a real thread, so the worker's event loop goes on reading other
  connections, answering probes and beating gunicorn's heartbeat while it computes. A request that finds
  the queue full, or whose predicted wait is over ``COMPUTE_QUEUE_SECONDS``, gets a 503 ``overloaded`` with
  ``Retry-After`` at once (and when a prediction proves wrong, once that long has passed); one whose
  computation outlives ``COMPUTE_DEADLINE_SECONDS`` gets a 504, while its thread finishes on its own and only
  then frees the slot and the request's memory.
- **A minimum rate for each body**: after ``BODY_TIMEOUT_SECONDS`` of grace it must keep up with
  ``BODY_MIN_BYTES_PER_SECOND`` (so all of it arrives within the grace plus its length at that rate). A body
  that falls behind (a lying ``Content-Length``, a client that stalls) is answered 408.

Any request whose body was refused or not read to its end closes its connection after the answer (the server
is told through :func:`take_close_request`), so a refused upload is never drained.

This module knows no model: views hand :func:`run_admitted` the request's :class:`~service.requests.Work` and
the computation as a callable. Outside gevent (the test client, ``flask run``, other workers) the same
accounting runs and the kernel runs inline.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import math
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from flask import Flask, Response
from flask.wrappers import Request

from service.requests import Work
from service.settings import HELD_PER_WORK_ELEMENT, SMALL_BODY_BYTES, UPLOAD_SHARE, check_body_limit
from service.web.body import CountingInput, body_size, counting_input, framing_header, malformed_body
from service.web.connection import WaitEnd, close_connection_after_answer, room_watch, under_gevent
from service.web.garbage import collection_paused
from service.web.hooks import RequestGlobals, request_steps
from service.web.inference import Timeline, current_timeline
from service.web.limits import JSON_ANSWER, AnswerEncoding, admit_work, expected_cpu_seconds
from service.web.parse_memory import parse_bytes_bound
from service.web.problems import Problem

try:  # the default worker's; the service also runs without it (the test client, flask run)
    import gevent
    from gevent.threadpool import ThreadPool
except ImportError:  # pragma: no cover - gevent is in the locks
    gevent = None

T = TypeVar("T")
R = TypeVar("R")
T_co = TypeVar("T_co", covariant=True)

_EXTENSION = "attention_admission"
_RESERVATION_KEY = "attention.reservation"

# What computing a request holds at its peak, per byte of body and per element of the arrays it holds whole
# (its MAX_WORK_ELEMENTS bounds, or its answer): its typed request's arrays and what remains of its parse,
# and an element is 8 bytes held as the result plus temporaries (docs/operations.md, "Memory budget", has
# the measured peaks these bound). Work done in blocks of rows (output-only attention) holds only its answer
# whole. The parse itself is held before it starts, from a count of the body (room_for_parsing).
HELD_PER_BODY_BYTE = 16
# HELD_PER_WORK_ELEMENT (above), SMALL_BODY_BYTES and UPLOAD_SHARE are service/settings.py's, which checks the
# limits against them at start: bodies up to SMALL_BODY_BYTES are always small next to the budget; larger
# uploads may hold at most UPLOAD_SHARE of the budget between them while they are being read.
# Large uploads and computations (work that needs a compute slot) leave this share of the budget to small
# requests: a computation's estimate can be the whole budget (the largest the default limits accept is), and
# without this the worked example found no room for its 57-byte body while one ran.
SMALL_REQUEST_SHARE = 1 / 16
# Work expected to take at most this much CPU (the worked example: microseconds of arithmetic) is computed at
# once, without a compute slot; larger work waits for a slot.
NO_SLOT_SECONDS = 0.001
# A computation expected to take at most this long runs on the worker's loop when it has its slot: the loop
# (probes, other connections) waits that long at most, far inside /livez's 1 s, and saves the hand-over to
# the thread (measured: 512 × 512 with weights served 25 % fewer requests per second on the thread).
INLINE_SECONDS = 0.05
# The request at the head of the queue, waiting for memory, lets those queued behind it that can start go
# first (Admission._turn_of) for this share of COMPUTE_QUEUE_SECONDS; then none may, so that the memory
# drains for it: passed for its whole wait, a request at the work limit was refused 503 under a steady stream
# of smaller computations, each time it was sent.
PASSED_FOR_SHARE = 0.5
# ...unless it has waited this long, with a slot free, for memory that neither the requests queued behind it
# nor the running computations hold (answers being written, bodies being read): that may take any time (a
# slow reader), and the slot would stand idle while it does. Those behind it go first again until that
# memory is back. Longer than a small answer takes to be written, or a body being read to join the queue.
HELD_ELSEWHERE_SECONDS = 0.25
# Bodies over this size are parsed and loaded on a thread, off the worker's loop (decode_off_the_loop).
DECODE_ON_THREAD_BYTES = 1024 * 1024
# ...and over this one with the garbage collector paused (the worked example's path keeps its cost).
PAUSE_COLLECTION_BYTES = 64 * 1024
# The wait predictor's model of a computation: a fixed cost per call plus the typed request's own estimate
# of its CPU seconds (``Work.estimated_cpu_seconds``) times a speed learnt on this machine. Computations
# estimated under this teach it the fixed cost; longer ones the speed.
LEARN_SPEED_FROM_SECONDS = 0.005


def overloaded(detail: str, retry_after: float) -> Problem:
    """A 503 ``overloaded`` problem that says when to try again (in whole seconds, at least 1)."""
    return Problem(
        503,
        detail,
        slug="overloaded",
        title="Overloaded",
        headers={"Retry-After": str(max(1, math.ceil(retry_after)))},
    )


@dataclass(frozen=True)
class AdmissionLimits:
    """The settings admission works with (service/settings.py and docs/operations.md describe each)."""

    memory_budget_bytes: int
    max_body_bytes: int
    compute_slots: int
    compute_queue_length: int
    compute_queue_seconds: float
    compute_deadline_seconds: float
    body_timeout_seconds: float
    body_min_bytes_per_second: int
    header_timeout_seconds: float
    answer_timeout_seconds: float = 10.0
    answer_min_bytes_per_second: int = 256 * 1024

    def __post_init__(self) -> None:
        # Settings.from_env checked it already; a config given to create_app is checked here
        check_body_limit(self.max_body_bytes, self.memory_budget_bytes)

    @classmethod
    def from_config(cls, config: Any) -> AdmissionLimits:
        return cls(
            memory_budget_bytes=int(config["MEMORY_BUDGET_BYTES"]),
            max_body_bytes=int(config["MAX_CONTENT_LENGTH"]),
            compute_slots=int(config["COMPUTE_SLOTS"]),
            compute_queue_length=int(config["COMPUTE_QUEUE_LENGTH"]),
            compute_queue_seconds=float(config["COMPUTE_QUEUE_SECONDS"]),
            compute_deadline_seconds=float(config["COMPUTE_DEADLINE_SECONDS"]),
            body_timeout_seconds=float(config["BODY_TIMEOUT_SECONDS"]),
            body_min_bytes_per_second=int(config["BODY_MIN_BYTES_PER_SECOND"]),
            header_timeout_seconds=float(config["HEADER_TIMEOUT_SECONDS"]),
            answer_timeout_seconds=float(config["ANSWER_TIMEOUT_SECONDS"]),
            answer_min_bytes_per_second=int(config["ANSWER_MIN_BYTES_PER_SECOND"]),
        )


class Reservation:
    """What one request holds of its process's budget; all of it goes back when the answer has been sent."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self.held_bytes = 0
        self.upload_bytes = 0

    @property
    def admission(self) -> Admission:
        """The process's admission this reservation holds from (found from the request without the app)."""
        return self._admission

    def take(self, size: int, *, upload: bool = False, large: bool = False) -> bool:
        """Reserve ``size`` more bytes (an ``upload`` counts against uploads' share too; it and a ``large``
        request leave small requests their room); False if no room."""
        upload = upload and size > SMALL_BODY_BYTES
        if not self._admission.try_hold(size, upload=upload, computation=large):
            return False
        self._count(size, upload=upload)
        return True

    def take_body(self, size: int, *, framing: str = "Content-Length") -> None:
        """Reserve ``size`` bytes for the request's body (framed by its ``framing`` header), waiting for room
        as :meth:`Admission.hold_body` does (and raising its 503 when none comes)."""
        upload = size > SMALL_BODY_BYTES
        self._admission.hold_body(size, upload=upload, framing=framing)
        self._count(size, upload=upload)

    def take_for_parsing(self, size: int) -> None:
        """Reserve ``size`` bytes for parsing the request's body, waiting for room as a body does (and
        raising the same 503 when none comes)."""
        self._admission.hold_body(size, upload=False, parsing=True, holding=self.held_bytes)
        self._count(size, upload=False)

    def give_back(self, size: int) -> None:
        """Give back ``size`` of the bytes held (not of an upload's), before the answer has been sent."""
        self.held_bytes -= size
        self._admission.give_back(size)

    def _count(self, size: int, *, upload: bool) -> None:
        """Note ``size`` bytes held of the budget (and of uploads' share, for an ``upload``)."""
        self.held_bytes += size
        if upload:
            self.upload_bytes += size

    def hand_over(self) -> Reservation:
        """A new reservation holding all this one held, which is left empty (its request is done with it)."""
        heir = Reservation(self._admission)
        heir.held_bytes, heir.upload_bytes = self.held_bytes, self.upload_bytes
        self.held_bytes = self.upload_bytes = 0
        return heir

    def release(self) -> None:
        if self.held_bytes:
            self._admission.give_back(*self.empty())

    def empty(self) -> tuple[int, int]:
        """Leave this reservation empty; what it held (bytes, upload bytes), for the caller to give back."""
        held = self.held_bytes, self.upload_bytes
        self.held_bytes = self.upload_bytes = 0
        return held


def _clear_frames(error: BaseException) -> None:
    """Clear the local variables of the finished frames in ``error``'s traceback and in those of the errors
    it was raised from or while handling (``__cause__``, ``__context__``)."""
    pending, seen = [error], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        pending.extend(chained for chained in (current.__cause__, current.__context__) if chained is not None)


class _Outcome(Generic[T]):
    """What a function run on a thread gave: its value, or the exception it raised; handed over once."""

    def __init__(self, value: T | None = None, error: Exception | None = None) -> None:
        self._value = value
        self._error = error

    @property
    def failed(self) -> bool:
        """Whether the function raised (before :meth:`unwrap`)."""
        return self._error is not None

    def unwrap(self) -> T:
        """The value (or raise the exception), forgetting both: the pool may keep this object a while."""
        value, error = self._value, self._error
        self._value = self._error = None
        if error is not None:
            try:
                raise error
            finally:
                # The raised error's traceback holds this frame: with ``error`` still in it, the two formed a
                # reference cycle, and with them a large body's parsed document (marshmallow's error holds
                # it) waited for a full garbage collection: 1.5 s with the loop waiting, for 16 MiB of [].
                del error
        return value  # type: ignore[return-value]  # None only when T admits it


class _Job(Generic[T]):
    """``function`` for a thread pool: it returns its exception rather than raise it on the thread, and lets
    go of the function (and the request it holds) once it has run.

    The loop raises the exception instead, where the app's error handlers answer it. Raised on the thread,
    gevent's pool would print it as a failure (every 422 of a large body), and a pool's thread keeps its last
    task until the next one: with it the request's parsed body or arrays, hundreds of MB after a hostile
    body, beyond the request.
    """

    def __init__(self, function: Callable[[], T]) -> None:
        self._function: Callable[[], T] | None = function

    def cancel(self) -> None:
        """Let go of the function unrun: a pool that failed to start a thread for it keeps it queued, and a
        later thread would run it after its request had been answered, with its slot and memory given back."""
        self._function = None

    def __call__(self) -> _Outcome[T]:
        function, self._function = self._function, None
        if function is None:
            return _Outcome(error=RuntimeError("the job was cancelled before it ran"))
        try:
            return _Outcome(value=function())
        except Exception as error:
            _clear_frames(error)  # keep the trace, drop the frames' locals
            return _Outcome(error=error)
        finally:
            del function


@dataclass(eq=False)  # each waiter is itself: the queue removes and finds it by identity, never by value
class _Waiter:
    estimate: float
    memory_bytes: int  # what it needs to start, beyond what it holds
    held_bytes: int = 0  # what its request holds while it waits (its body), given back only once answered
    refused_for: _Waiter | None = None  # the request ahead that needs what this one holds (see _make_room)
    passed_until: float = math.inf  # time.monotonic() after which no request queued behind it goes first
    # Since when, as the head going first with a slot free, it has waited for memory held outside the queue.
    held_elsewhere_since: float | None = None
    # Since when, as the head with a slot free, it could have started had those queued behind it been refused
    # (see _make_room): they are, only once it has waited HELD_ELSEWHERE_SECONDS for the memory held outside
    # the queue, unless it could not fit even with all of that back.
    room_by_refusal_since: float | None = None


@dataclass(eq=False)  # found and removed by identity, as _Waiter
class _BodyWaiter:
    size: int
    upload: bool
    parsing: bool = False  # room for a body's parse (taken as a computation's), not for reading it
    holding: int = 0  # what its request holds while it waits (a parse's: its body)
    ended: WaitEnd | None = None  # by the server, and why (see Admission.hold_body)


class Admission:
    """One process's memory budget and compute slots (see the module's docstring)."""

    def __init__(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        # Under the gevent worker these are gevent's primitives (the standard library is patched before the
        # app is created), so a wait yields to the event loop; elsewhere they are thread locks.
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.held_bytes = 0
        self.upload_bytes = 0
        self.busy_slots = 0
        self._queue: deque[_Waiter] = deque()
        self._bodies: deque[_BodyWaiter] = deque()  # bodies waiting for room before they are read
        self._running: dict[_Waiter, tuple[float, float]] = {}  # -> (started, estimated seconds)
        # The fixed seconds per call and the ratio of measured to estimated seconds, learnt from this
        # process's own computations to predict waits (the estimates err high, so the ratio starts at 1).
        self.seconds_per_call = 0.001
        self.speed = 1.0
        self._pool: Any = None
        self._decode_pool: Any = None

    def on_decode_thread(self, decode: Callable[[], T]) -> T:
        """``decode()`` on this process's decoding thread (created on first use, after the worker forked)."""
        if self._decode_pool is None:
            self._decode_pool = ThreadPool(1)
        outcome: _Outcome[T] = self._decode_pool.spawn(_Job(decode)).get()
        return outcome.unwrap()

    # --- memory ---------------------------------------------------------------------------------------------
    def try_hold(self, size: int, *, upload: bool, computation: bool = False) -> bool:
        with self._lock:
            return self._try_hold_locked(size, upload=upload, computation=computation)

    def hold_body(
        self,
        size: int,
        *,
        upload: bool,
        framing: str = "Content-Length",
        parsing: bool = False,
        holding: int = 0,
    ) -> None:
        """Hold ``size`` bytes for a body about to be read (or, ``parsing``, about to be parsed: held as a
        computation's, leaving small requests their share), waiting for room if there is none now: first
        come first served, except that a body that does not fit lets those behind it that do go first, and a
        small body (``upload`` False) never waits behind a large one. A 503 ``overloaded`` (nothing held)
        when none came free within ``COMPUTE_QUEUE_SECONDS``, or ``COMPUTE_QUEUE_LENGTH`` bodies wait
        already. Under the gevent worker the wait is among those the server ends when it is
        crowded (:func:`~service.web.connection.room_watch`), before body reads that stall; then a 503 too.
        (Not so, a crowd of heads waiting for room kept their connections while the server cut the uploads
        being read to make room.) The server also ends the wait of a client that has left (closed its side
        before sending the body, or reset the connection): a 400 naming the body's ``framing`` header, as for
        a body that ends early, and its place in the queue is free again (it kept it for the whole wait, and
        such ghosts kept a real body out with a 503 for a full queue).

        Refused at once, a body that found the budget held by a computation and the answer before it was
        refused although that memory came back within moments: four clients sending 9 MB multi-head
        bodies to two workers, one of which took three of the connections, had three answers in seven
        refused.

        A parse (``parsing``, its request ``holding`` its body) that could start only once other bodies
        waiting to be parsed had left is refused at once, as the compute queue refuses one behind its head
        (:meth:`_make_room`): each would wait for the others, two 16 MiB bodies for two 503s after
        ``COMPUTE_QUEUE_SECONDS``.
        """
        limits = self.limits
        with self._changed:
            # Tried before the queue's length is: bodies waiting for room must not keep out one that has it (a
            # crowd of large Content-Lengths would otherwise refuse the worked example).
            hold = functools.partial(self._try_hold_locked, size, upload=upload, computation=parsing)
            if not self._bodies and not self._queue and hold():
                return  # nearly always: nothing waits
            waiter = _BodyWaiter(size, upload, parsing, holding)
            if self._body_turn_of(waiter) and hold():
                return
            if parsing:
                others = sum(queued.holding for queued in self._bodies if queued.parsing)
                if others and size + holding + others > self.large_request_budget():
                    raise overloaded(
                        f"Parsing this body may need {size:,} bytes of this worker's memory budget "
                        "(MEMORY_BUDGET_BYTES), which other requests waiting to be parsed hold; try again "
                        "shortly.",
                        1.0,
                    )
            if len(self._bodies) >= limits.compute_queue_length:
                raise overloaded(
                    f"{len(self._bodies)} request bodies are already waiting for room in this worker's "
                    f"memory budget (COMPUTE_QUEUE_LENGTH = {limits.compute_queue_length}); try again "
                    "shortly.",
                    1.0,
                )
            self._bodies.append(waiter)
            deadline = time.monotonic() + limits.compute_queue_seconds
            try:
                end = functools.partial(self._end_body_wait_soon, waiter)
                with room_watch(end):  # (a no-op outside a server that watches waits)
                    while True:
                        if waiter.ended is WaitEnd.CLIENT_LEFT:
                            raise malformed_body(
                                framing,
                                "the client closed its connection while its body was waiting for room in the "
                                "memory budget.",
                            )
                        if waiter.ended is WaitEnd.CROWDED:
                            what = "to parse its body" if parsing else "for its body"
                            raise overloaded(
                                "This worker has too many connections open, and this request was still "
                                f"waiting for room in its memory budget (MEMORY_BUDGET_BYTES) {what}: the "
                                "wait was ended to make room; try again shortly.",
                                1.0,
                            )
                        if self._body_turn_of(waiter):
                            if hold():
                                return
                            # Another took the room it was left (a computation, a body as it inflates): one
                            # behind it that fits would otherwise wait for the next change.
                            self._wake_bodies_behind(waiter)
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise _no_room_for_body(self, size, waited=True, parsing=parsing)
                        self._changed.wait(left)
            finally:
                self._bodies.remove(waiter)
                self._wake_waiters()

    def _end_body_wait_soon(self, waiter: _BodyWaiter, why: WaitEnd) -> None:
        """From the server's event loop (which must not wait for the lock): end ``waiter``'s wait."""
        gevent.spawn(self._end_body_wait, waiter, why)

    def _end_body_wait(self, waiter: _BodyWaiter, why: WaitEnd) -> None:
        with self._changed:
            waiter.ended = why
            self._changed.notify_all()

    def _body_turn_of(self, waiter: _BodyWaiter) -> bool:
        """With the lock held: whether ``waiter`` may take its room now. Not while a large body waiting ahead
        of it fits (it goes first), nor while the head of the compute queue, with a slot free, fits and
        would not with ``waiter`` held: its body is read already, and the room may be what a request
        refused for it has just given back (taken by a body instead, the head was refused at its deadline)."""
        if waiter.upload:
            for ahead in self._bodies:
                if ahead is waiter:
                    break
                if self.fits(ahead.size, upload=ahead.upload, computation=ahead.parsing):
                    return False
        if self._queue and self.has_free_slot():
            head = self._queue[0]
            needs = head.memory_bytes
            if head.refused_for is None and self.fits(needs, upload=False, computation=True):
                return self.fits(needs + waiter.size, upload=False, computation=True)
        return True

    def _wake_bodies_behind(self, waiter: _BodyWaiter) -> None:
        """With the lock held: wake the bodies waiting if one behind ``waiter``, which has no room, fits."""
        behind = itertools.dropwhile(lambda queued: queued is not waiter, self._bodies)
        if any(
            self.fits(queued.size, upload=queued.upload, computation=queued.parsing)
            for queued in behind
            if queued is not waiter
        ):
            self._changed.notify_all()

    def large_request_budget(self) -> int:
        """What large uploads and computations may hold between them: the budget less small requests' room."""
        budget = self.limits.memory_budget_bytes
        return budget - int(SMALL_REQUEST_SHARE * budget)

    def fits(self, size: int, *, upload: bool, computation: bool = False) -> bool:
        """Whether ``size`` more bytes fit the budget now: the whole of it for a small request's, all but
        small requests' room for a large upload's or a computation's, and an upload within uploads' share."""
        budget = self.large_request_budget() if upload or computation else self.limits.memory_budget_bytes
        if self.held_bytes + size > budget:
            return False
        return not (upload and self.upload_bytes + size > UPLOAD_SHARE * self.limits.memory_budget_bytes)

    def _try_hold_locked(self, size: int, *, upload: bool, computation: bool = False) -> bool:
        if not self.fits(size, upload=upload, computation=computation):
            return False
        self.held_bytes += size
        if upload:
            self.upload_bytes += size
        return True

    def give_back(self, size: int, upload_size: int = 0) -> None:
        with self._changed:
            self._give_back_locked(size, upload_size)

    def _give_back_locked(self, size: int, upload_size: int = 0) -> None:
        self.held_bytes -= size
        self.upload_bytes -= upload_size
        self._wake_waiters()

    # --- compute --------------------------------------------------------------------------------------------
    def has_free_slot(self) -> bool:
        return self.busy_slots < self.limits.compute_slots

    @property
    def queued(self) -> int:
        """Requests waiting for a compute slot now."""
        return len(self._queue)

    @property
    def bodies_waiting(self) -> int:
        """Bodies waiting for room in the budget before they are read (or parsed)."""
        return len(self._bodies)

    def estimate_seconds(self, estimated_cpu_seconds: float) -> float:
        """How long this process expects a computation to take, from the request's own estimate."""
        return self.seconds_per_call + estimated_cpu_seconds * self.speed

    def runs_on_the_loop(self, estimated_cpu_seconds: float) -> bool:
        """Whether a computation is short enough to run on the worker's loop (:data:`INLINE_SECONDS`).

        Judged by the request's own estimate, which the learnt speed may raise but never lower: the speed is
        one average over every endpoint: 15 layer norms (whose estimates err high, about ten times) taught
        it 0.08, after which an attention request it put at 50 ms ran 0.8 s on the loop, and 17 requests
        that failed at once (since no longer learnt from) taught it 0.016, after which the attention worst
        case ran 2.7 s there, ``/livez`` waiting.
        """
        return self.seconds_per_call + estimated_cpu_seconds * max(1.0, self.speed) <= INLINE_SECONDS

    def predicted_wait(self, now: float) -> float:
        """Seconds until a slot frees for a request arriving now: what runs and what queues ahead of it."""
        running = sorted(max(0.0, started + estimate - now) for started, estimate in self._running.values())
        first_free = running[0] if len(running) >= self.limits.compute_slots and running else 0.0
        queued = sum(waiter.estimate for waiter in self._queue) / self.limits.compute_slots
        return first_free + queued

    def run(
        self, compute: Callable[[], T], *, cpu_seconds: float, memory_bytes: int, reservation: Reservation
    ) -> T:
        """Run ``compute`` in a compute slot, holding ``memory_bytes`` of the budget from the start.

        The memory stays reserved (in ``reservation``) until the answer has been sent; raises the 503 and 504
        problems described in the module's docstring.
        """
        estimate = self.estimate_seconds(cpu_seconds)
        # What the request already holds (its body) is part of what it needs to compute.
        memory_bytes = max(0, min(memory_bytes, self.large_request_budget()) - reservation.held_bytes)
        token = self._enter(estimate, memory_bytes, reservation)
        started = time.monotonic()
        with self._lock:
            self._running[token] = (started, estimate)
        reservation.held_bytes += memory_bytes
        if self.runs_on_the_loop(cpu_seconds) or not under_gevent():
            # Short enough to run on the loop itself (it holds its slot all the same): handing it to a thread
            # would cost more, in switches between the loop and the thread, than the loop waits for it.
            try:
                result = compute()
            except BaseException:
                self._leave(token, started, cpu_seconds, learn=False)
                raise
            self._leave(token, started, cpu_seconds)
            return result
        job = _Job(compute)
        try:
            if self._pool is None:
                self._pool = ThreadPool(self.limits.compute_slots)
            result = self._pool.spawn(job)
        except BaseException:
            # No thread to run it (e.g. "can't start new thread" under a pids or address-space limit): the
            # slot goes back, or every later computation would wait for it until the worker is recycled;
            # the job, which the pool may keep queued for a later thread, will not run; nothing is learnt.
            job.cancel()
            self._leave(token, started, cpu_seconds, learn=False)
            raise
        try:
            outcome: _Outcome[T] = result.get(timeout=self.limits.compute_deadline_seconds)
        except BaseException as error:
            timed_out = isinstance(error, gevent.Timeout)
            # The thread cannot be stopped: it finishes on its own, still holding the inputs and arrays it
            # computes with, so it keeps the request's share of the budget (not just its slot) until then,
            # although the request is answered now.
            abandoned = reservation.hand_over()
            gevent.spawn(self._leave_when_done, result, token, started, cpu_seconds, abandoned)
            if not timed_out:
                raise  # the request's greenlet was killed while it waited (a worker shutting down)
            raise Problem(
                504,
                f"The computation took longer than {self.limits.compute_deadline_seconds:g} s "
                "(COMPUTE_DEADLINE_SECONDS) and was abandoned; ask for less work.",
                slug="deadline-exceeded",
                title="Deadline exceeded",
            ) from None
        self._leave(token, started, cpu_seconds, learn=not outcome.failed)
        return outcome.unwrap()

    def _enter(self, estimate: float, memory_bytes: int, reservation: Reservation) -> _Waiter:
        """Wait for a slot and the memory, first come first served (see :meth:`_turn_of`); a 503 when that
        cannot be soon enough. ``reservation``: what the request holds already while it waits."""
        limits = self.limits
        with self._changed:
            now = time.monotonic()
            waiter = _Waiter(
                estimate,
                memory_bytes,
                reservation.held_bytes,
                passed_until=now + PASSED_FOR_SHARE * limits.compute_queue_seconds,
            )
            wait = self.predicted_wait(now)
            if len(self._queue) >= limits.compute_queue_length:
                raise overloaded(
                    f"{len(self._queue)} requests are already waiting for this worker's compute slots "
                    f"(COMPUTE_QUEUE_LENGTH = {limits.compute_queue_length}); try again shortly.",
                    wait,
                )
            if wait > limits.compute_queue_seconds:
                raise overloaded(
                    f"This worker's computations would keep this request waiting about {wait:.1f} s, longer "
                    f"than COMPUTE_QUEUE_SECONDS ({limits.compute_queue_seconds:g} s); try again later.",
                    wait,
                )
            self._queue.append(waiter)
            # What this request holds now counts as held by the queue: a head waiting for memory may make
            # room from it (see _make_room), so it looks again.
            self._wake_waiters()
            deadline = now + limits.compute_queue_seconds
            try:
                while not self._turn_of(waiter):
                    if waiter.refused_for is not None:
                        # Its body goes back now, under the lock, as it leaves the queue: the request ahead
                        # counted on it, and would otherwise refuse one more while this 503 is written.
                        self._give_back_locked(*reservation.empty())
                        raise overloaded(
                            f"The request ahead of this one on this worker needs the {memory_bytes:,} bytes "
                            "of the memory budget that this one holds while it waits (MEMORY_BUDGET_BYTES), "
                            "and nothing else would give them back; try again once it has run.",
                            waiter.refused_for.estimate,
                        )
                    now = time.monotonic()
                    left = deadline - now
                    if left <= 0:
                        raise overloaded(
                            f"No compute slot and {memory_bytes:,} bytes of this worker's memory budget "
                            f"came free within COMPUTE_QUEUE_SECONDS ({limits.compute_queue_seconds:g} s); "
                            "try again later.",
                            self.predicted_wait(time.monotonic()) or limits.compute_queue_seconds,
                        )
                    # Woken by every change, and at the times its standing in the queue changes with
                    # nothing else changed (see _make_room).
                    self._changed.wait(min(left, self._next_change(waiter, now)))
            finally:
                if waiter in self._queue:
                    self._queue.remove(waiter)
                self._wake_waiters()
            self.busy_slots += 1
        return waiter

    def _turn_of(self, waiter: _Waiter) -> bool:
        """With the lock held: whether ``waiter`` starts now, its memory then held. A slot must be free, and
        the requests queued ahead of it must all be waiting for memory that is not free: one whose memory
        is goes first. So the order is first come first served, except that a request waiting for memory
        lets those behind it that can run go ahead, rather than wait for memory they hold: the bodies of the
        requests queued behind it count against the budget, and a request at the work limit needs nearly
        all of it (two of them queued on one worker refused the first with a 503 while nothing ran). The
        head of the queue lets them for a while only (:meth:`_goes_first`)."""
        if self.busy_slots >= self.limits.compute_slots or waiter.refused_for is not None:
            waiter.room_by_refusal_since = None  # counted with a slot free only
            return False
        now = time.monotonic()
        for ahead in self._queue:
            if ahead is waiter:
                if self._try_hold_locked(waiter.memory_bytes, upload=False, computation=True):
                    waiter.held_elsewhere_since = waiter.room_by_refusal_since = None
                    return True
                if self._queue[0] is waiter:
                    self._make_room(waiter, now)
                return False
            if self.fits(ahead.memory_bytes, upload=False, computation=True):
                return False
            if ahead is self._queue[0] and self._goes_first(ahead, now):
                return False
        return False

    @staticmethod
    def _goes_first(head: _Waiter, now: float) -> bool:
        """Whether no request queued behind ``head`` may start before it: it has been passed for
        :data:`PASSED_FOR_SHARE` of its wait, and has not waited :data:`HELD_ELSEWHERE_SECONDS` for memory
        held outside the queue."""
        if now < head.passed_until:
            return False
        since = head.held_elsewhere_since
        return since is None or now - since < HELD_ELSEWHERE_SECONDS

    @staticmethod
    def _next_change(waiter: _Waiter, now: float) -> float:
        """Seconds until :meth:`_goes_first`, or whether those behind ``waiter`` are refused for it
        (:meth:`_make_room`), may change, nothing else changing (inf: never)."""
        changes = [math.inf]
        if now < waiter.passed_until:
            changes.append(waiter.passed_until - now)
        for since in (waiter.held_elsewhere_since, waiter.room_by_refusal_since):
            if since is not None and now - since < HELD_ELSEWHERE_SECONDS:
                changes.append(since + HELD_ELSEWHERE_SECONDS - now)
        return min(changes)

    def _make_room(self, head: _Waiter, now: float) -> None:
        """With the lock held, a slot free and ``head`` not fitting: when ``head`` would fit but for what the
        requests queued behind it hold (their bodies, given back only once they are answered), and none of
        them can start now or ``head`` goes first, refuse them, the latest first, until it would, rather than
        let every one wait out its deadline. Two requests at the work limit need nearly the whole budget
        each: queued together, neither fitted while the other held its body, and the first was refused after
        COMPUTE_QUEUE_SECONDS with nothing running. Also notes whether ``head`` waits for memory held
        outside the queue (see :meth:`_goes_first`), and wakes those behind it when they may pass again."""
        behind = [queued for queued in self._queue if queued is not head and queued.held_bytes]
        held_behind = sum(queued.held_bytes for queued in behind)
        running = sum(token.memory_bytes + token.held_bytes for token in self._running)
        if self.fits(head.memory_bytes - held_behind - running, upload=False, computation=True):
            head.held_elsewhere_since = None
        elif head.held_elsewhere_since is None and now >= head.passed_until:
            head.held_elsewhere_since = now  # counted from when it goes first: the slot stands idle from then
        if not self._goes_first(head, now):
            if now >= head.passed_until:
                # It went first until memory held elsewhere kept it waiting too long (its own timed wake-up,
                # _next_change, brings it here): those behind it that can start may again.
                self._changed.notify_all()
            if any(
                self.fits(queued.memory_bytes, upload=False, computation=True)
                for queued in self._queue
                if queued is not head and queued.refused_for is None
            ):
                head.room_by_refusal_since = None  # counted again once that one has run
                return  # one behind can start now, and then give back what it holds: it goes first
        if not self.fits(head.memory_bytes - held_behind, upload=False, computation=True):
            head.room_by_refusal_since = None
            return  # what holds the memory is not queued (computations, answers, uploads): wait
        if head.room_by_refusal_since is None:
            head.room_by_refusal_since = now
        waited_out = now - head.room_by_refusal_since >= HELD_ELSEWHERE_SECONDS
        # What it would need with all the memory held outside the queue back: more than the budget, and those
        # behind it must be refused sooner or later.
        queue_holds = head.held_bytes + held_behind
        if not waited_out and queue_holds + head.memory_bytes <= self.large_request_budget():
            # That memory (an answer being written, a computation in another slot) usually comes back within
            # moments: refused for it, a request behind was turned away that would have run a moment later.
            return
        freed = 0
        for queued in reversed(behind):
            if waited_out:
                if self.fits(head.memory_bytes - freed, upload=False, computation=True):
                    break
            elif queue_holds - freed + head.memory_bytes <= self.large_request_budget():
                break
            queued.refused_for = head
            freed += queued.held_bytes
        self._changed.notify_all()

    def _leave(self, token: _Waiter, started: float, cpu_seconds: float, *, learn: bool = True) -> None:
        """Give the slot back; ``learn`` from how long the computation took: not from one that never ran, nor
        from one that failed (a 422 for an overflow in its first block of rows ends a computation estimated at
        2 s within 23 ms, and such requests, sent on purpose, taught the speed 0.016)."""
        seconds = time.monotonic() - started
        with self._changed:
            self.busy_slots -= 1
            self._running.pop(token, None)
            if learn:
                self._learn(seconds, cpu_seconds)
            self._wake_waiters()

    def _learn(self, seconds: float, cpu_seconds: float) -> None:
        """Moving averages, the newest computation counting for a fifth: the fixed cost per call from small
        computations, the speed from the others."""
        if cpu_seconds < LEARN_SPEED_FROM_SECONDS:
            self.seconds_per_call += (seconds - self.seconds_per_call) / 5
        else:
            speed = max(0.0, seconds - self.seconds_per_call) / cpu_seconds
            self.speed += (speed - self.speed) / 5

    def _wake_waiters(self) -> None:
        """With the lock held: wake the requests queued for a slot or memory, if any. Only queued requests
        and bodies waiting for room wait on the condition (in :meth:`_enter` and :meth:`hold_body`), and every
        request gives its memory back, so with none queued (nearly always) the condition's own bookkeeping is
        skipped."""
        if self._queue or self._bodies:
            self._changed.notify_all()

    def _leave_when_done(
        self, result: Any, token: _Waiter, started: float, cpu_seconds: float, held: Reservation
    ) -> None:
        result.wait()
        held.release()
        self._leave(token, started, cpu_seconds)


def admission_of(app: Flask) -> Admission | None:
    """The app's admission (None for an app built without it)."""
    admission: Admission | None = app.extensions.get(_EXTENSION)
    return admission


def body_too_large(admission: Admission, content_length: int | None) -> Problem | None:
    """The 413 for a body over ``MAX_BODY_BYTES``, known from its headers, or None (``content_length`` None:
    a chunked body, whose length is known only as it is read)."""
    limits = admission.limits
    if content_length is not None and content_length > limits.max_body_bytes:
        return Problem(
            413,
            f"The request body is larger than the limit of {limits.max_body_bytes:,} bytes (MAX_BODY_BYTES).",
            slug="body-too-large",
        )
    return None


def hold_body_bytes(size: int) -> None:
    """Hold ``size`` more bytes of the budget for the current request's body (a compressed body as it is
    inflated: it counts at its inflated size, as a plain body at its length); 503 ``overloaded`` when the
    budget cannot take them now."""
    reservation = _current.get()
    if reservation is None:  # an app built without admission
        return
    if not reservation.take(size, upload=True):
        raise _no_room_for_body(reservation.admission, size)


def room_for_parsing(text: bytes, end: int | None = None) -> contextlib.AbstractContextManager[None]:
    """Hold, for the block that parses ``text[:end]`` as JSON, what that may take at its peak
    (:func:`parse_bytes_bound`) besides what the request holds already (its body): 413 when that is more
    than one request may ever hold. Given back when the block ends: the parsed document is gone by then, and
    what its typed request keeps counts in the computation's memory (:func:`run_admitted`). A text up to
    :data:`SMALL_BODY_BYTES` holds nothing more (small requests have their own share of the budget), and
    costs nothing more: the worked example's path.

    The parse is one C call that holds the interpreter, so this also bounds how long the loop may wait for
    it: about 1.2 ns per byte of the bound, 0.45 s for the largest the default budget takes. A parse that
    does not fit now waits for room as a body does (:meth:`Admission.hold_body`).
    """
    length = len(text) if end is None else end
    reservation = None if length <= SMALL_BODY_BYTES else _current.get()
    if reservation is None:  # a small text, or an app built without admission
        return _NOTHING_HELD
    admission = reservation.admission
    most = admission.large_request_budget()
    need = parse_bytes_bound(text, end, within=most - reservation.held_bytes)
    if reservation.held_bytes + need > most:
        raise Problem(
            413,
            f"Parsing this {length:,}-byte JSON text could take up to {need:,} bytes of memory (it has many "
            "arrays, objects, strings or values for its length): with its body, more than the "
            f"{most:,} bytes one request may hold of MEMORY_BUDGET_BYTES. Send fewer, wider rows or a "
            "shorter body, or the arrays as /v2 binary tensor data.",
            slug="body-too-large",
        )
    reservation.take_for_parsing(need)
    return _HeldForParsing(reservation, need)


_NOTHING_HELD = contextlib.nullcontext()


class _HeldForParsing:
    """What :func:`room_for_parsing` took, given back when its block ends, however it ends."""

    __slots__ = ("_bytes", "_reservation")

    def __init__(self, reservation: Reservation, size: int) -> None:
        self._reservation = reservation
        self._bytes = size

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exception: object) -> None:
        self._reservation.give_back(self._bytes)


def body_reservation(limits: AdmissionLimits, content_length: int | None) -> int:
    """What a body reserves of the budget before it is read: its length, or ``MAX_BODY_BYTES`` if chunked."""
    return limits.max_body_bytes if content_length is None else content_length


def _no_room_for_body(
    admission: Admission, size: int, *, waited: bool = False, parsing: bool = False
) -> Problem:
    limits = admission.limits
    when = f"within COMPUTE_QUEUE_SECONDS ({limits.compute_queue_seconds:g} s)" if waited else "now"
    what = f"the {size:,} bytes that parsing this body may need" if parsing else f"a body of {size:,} bytes"
    return overloaded(
        f"This worker holds {admission.held_bytes:,} bytes of its {limits.memory_budget_bytes:,}-byte "
        f"memory budget (MEMORY_BUDGET_BYTES) for other requests and could not take {what} "
        f"{when}; try again shortly.",
        1.0,
    )


_current: contextvars.ContextVar[Reservation | None] = contextvars.ContextVar("reservation", default=None)


class Computation(Protocol[T_co]):
    """A typed request as admission sees it: what it asks for, and how to compute it."""

    def work(self) -> Work: ...

    def run(self) -> T_co: ...


class _Answered(Generic[R, T]):
    """A computation followed by the building of its answer, both on the compute thread."""

    def __init__(self, computation: Computation[R], answer: Callable[[R], T]) -> None:
        self._computation = computation
        self._answer = answer

    def work(self) -> Work:
        return self._computation.work()

    def run(self) -> T:
        return self.answer(self.kernel())

    def kernel(self) -> R:
        return self._computation.run()

    def answer(self, result: R) -> T:
        with collection_paused():  # an answer's millions of Python objects: see service/web/garbage.py
            return self._answer(result)


class _Timed(Generic[T]):
    """A computation that stamps its start and its kernel's end on the request's timeline (the metrics'
    compute step; an answer built after the kernel, see :func:`answered`, is part of encoding)."""

    def __init__(self, computation: Computation[T], timeline: Timeline) -> None:
        self._computation = computation
        self._timeline = timeline

    def work(self) -> Work:
        return self._computation.work()

    def run(self) -> T:
        timeline, computation = self._timeline, self._computation
        timeline.compute_started = time.perf_counter()
        if isinstance(computation, _Answered):
            result = computation.kernel()
            timeline.kernel_done = time.perf_counter()
            built: T = computation.answer(result)
            return built
        answer = computation.run()
        timeline.kernel_done = time.perf_counter()
        return answer


def answered(computation: Computation[R], answer: Callable[[R], T]) -> Computation[T]:
    """``computation`` followed by ``answer(result)``, as one computation for :func:`run_admitted`.

    Building an answer can cost as much as the kernel (a log-likelihood's 524,288 ranks and top log-probs as
    Python objects: 1.2 s against 1.1 s of arithmetic); done with the computation, it runs on the compute
    thread too, so the worker's loop does not wait for it.
    """
    return _Answered(computation, answer)


def decode_off_the_loop(decode: Callable[[], T], *, body_bytes: int) -> T:
    """Run ``decode`` (parsing a body and loading it into its typed request) off the worker's loop when the
    body is over :data:`DECODE_ON_THREAD_BYTES`, and with the garbage collector paused when it is over
    :data:`PAUSE_COLLECTION_BYTES`.

    It runs on a thread of its own (not a compute slot): the loop then waits only for the longest single
    C call inside it (orjson parsing a 16 MiB body: at most about 0.3 s, with the garbage collector paused
    as it is for every large body) instead of the whole decoding, since Python hands the loop's thread the
    interpreter every few milliseconds. Exceptions come back as they are.
    """
    if body_bytes <= DECODE_ON_THREAD_BYTES:
        # On the loop; one of more than a few thousand containers with the collector paused too: parsing 1 MiB
        # of one-element rows took 127 ms with it running (collections of the rows as they were made), 22 ms
        # without, and the whole request 296 ms.
        return decode() if body_bytes <= PAUSE_COLLECTION_BYTES else _decode_uncollected(decode)
    decode_large = functools.partial(_decode_uncollected, decode)
    reservation = _current.get()  # None: an app built without admission
    if reservation is None or not under_gevent():
        return decode_large()
    return reservation.admission.on_decode_thread(decode_large)


def _decode_uncollected(decode: Callable[[], T]) -> T:
    with collection_paused():  # a large body's millions of containers: see service/web/garbage.py
        try:
            return decode()
        except BaseException as error:
            # The failed decoding's frames hold the parsed document, in a reference cycle once an error
            # was caught and another raised (the frame holds the error, the error its traceback): left
            # so, the collector's next full collection freed it, 1.8 s with the worker's loop waiting, for
            # 16 MiB of []. Cleared now, it is freed at once, while the collector is paused.
            _clear_frames(error)
            raise


def run_admitted(computation: Computation[T], answer: AnswerEncoding = JSON_ANSWER) -> T:
    """Check the work against the limits (413; its answer as it will be written: ``answer``), then compute
    in a compute slot (503/504 when it cannot).

    Every protocol's view calls this, and only this, between building its typed request and encoding the
    result. The computation's memory (:data:`HELD_PER_BODY_BYTE` per body byte, :data:`HELD_PER_WORK_ELEMENT`
    per element held whole: :func:`held_elements`) is held from the budget until the answer has been sent.
    """
    work = computation.work()
    timeline = current_timeline()
    if timeline is not None:
        timeline.decoded = time.perf_counter()
        timeline.work = work
        computation = _Timed(computation, timeline)
    admit_work(work, answer)
    reservation = _current.get()
    if reservation is None:  # an app built without admission
        return computation.run()
    body_bytes = body_size()  # inflated, for a compressed body: what parsing it holds
    memory = HELD_PER_BODY_BYTE * body_bytes + HELD_PER_WORK_ELEMENT * held_elements(work)
    cpu_seconds = expected_cpu_seconds(work, answer)
    if cpu_seconds <= NO_SLOT_SECONDS and reservation.take(
        max(0, memory - reservation.held_bytes), large=body_bytes > SMALL_BODY_BYTES
    ):
        # Small work runs at once on the worker's own loop, beside the slots: it costs less than handing it to
        # a thread, and a request as small as the worked example never waits behind another's computation.
        return computation.run()
    return reservation.admission.run(
        computation.run, cpu_seconds=cpu_seconds, memory_bytes=memory, reservation=reservation
    )


def held_elements(work: Work) -> int:
    """The elements ``work`` holds whole: its largest ``MAX_WORK_ELEMENTS`` bound, or its answer if larger.

    Its other bounds (e.g. ``MAX_OUTPUT_ONLY_WORK_ELEMENTS``: scores computed a block of rows at a time)
    measure time, not memory.
    """
    held = [bound.amount for bound in work.bounds if bound.setting == "MAX_WORK_ELEMENTS"]
    return max([work.answer_elements, *held])


def install_admission(app: Flask) -> Admission:
    """Reserve every request's body before it is read and give everything back when the answer is sent."""
    admission = Admission(AdmissionLimits.from_config(app.config))
    app.extensions[_EXTENSION] = admission
    wsgi_app: Callable[[dict[str, Any], Any], Iterable[bytes]] = app.wsgi_app

    def admitted_wsgi_app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        reservation = Reservation(admission)
        environ[_RESERVATION_KEY] = reservation
        token = _current.set(reservation)
        try:
            answer = wsgi_app(environ, start_response)
        except BaseException:
            reservation.release()
            raise
        finally:
            _current.reset(token)
        return _ReleasedOnClose(answer, reservation, environ)

    app.wsgi_app = admitted_wsgi_app  # type: ignore[method-assign]
    steps = request_steps(app)
    steps.add_before(_admit_body)
    steps.add_after(_close_if_body_unread)
    return admission


class _ReleasedOnClose:
    """An answer's iterable that, when the server closes it, gives back what the request held and closes the
    connection of a body left unread, whatever the answer's own ``close`` raised before. (werkzeug's
    ``ClosingIterator`` stops at the first callback that raises, and a streamed answer's close writes its
    access line: a log that could not be written kept the request's memory from the budget for good.)"""

    __slots__ = ("_answer", "_environ", "_reservation")

    def __init__(self, answer: Iterable[bytes], reservation: Reservation, environ: dict[str, Any]) -> None:
        self._answer = answer
        self._reservation = reservation
        self._environ = environ

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._answer)

    def close(self) -> None:
        try:
            close = getattr(self._answer, "close", None)
            if close is not None:
                close()
        finally:
            try:
                self._reservation.release()
            finally:
                _close_if_unread(self._environ)


def _close_if_body_unread(request: Request, g: RequestGlobals, response: Response) -> Response:
    """Decide before the answer's head is written: an answer given without reading its body to the end (a
    415, 401, 404, …) says ``Connection: close``, rather than promise keep-alive and close after it (the
    client's next request on the connection would be lost)."""
    _close_if_unread(request.environ)
    return response


def _admit_body(request: Request, g: RequestGlobals) -> None:
    """Refuse a body over ``MAX_BODY_BYTES`` from its headers (413), and have its room in the memory budget
    taken when it is first read (:func:`_take_room`), not before: a request answered without reading its
    body (no route, not its method, no API key, a media type or content coding its route does not take)
    takes no room and no place among the bodies waiting for it, whatever its ``Content-Length``, and its
    connection is closed after the answer. (Taken here, such requests waited for room under memory pressure
    and were then refused 503, not 401, 404 or 415; clients without a key could fill the queue of bodies.)"""
    reservation: Reservation | None = request.environ.get(_RESERVATION_KEY)
    if reservation is None:
        return
    admission = reservation.admission
    # Set on the request, Flask's limit is read without looking the app up again (werkzeug reads it twice).
    request.max_content_length = admission.limits.max_body_bytes
    if request.content_length in (None, 0) and not _is_chunked(request.environ):
        return
    if request.routing_exception is not None:
        return  # a wrong path or method is said as such (404, 405), not as a body too large
    length = request.content_length
    refusal = body_too_large(admission, length)
    if refusal is not None:
        close_connection_after_answer()
        raise refusal
    counted = counting_input(request.environ)
    size = body_reservation(admission.limits, length)
    take = functools.partial(_take_room, reservation, size, framing_header(chunked=length is None), counted)
    if counted is None:  # (an app without body counting: taken now)
        take()
    else:
        counted.before_first_read(take)


def _take_room(reservation: Reservation, size: int, framing: str, counted: CountingInput | None) -> None:
    """Take ``size`` bytes of room for a body about to be read (503 when none comes free in time), then
    start its deadline: the wait for room is not the client's, and does not count against it. Under the
    gevent worker a body sent with ``Expect: 100-continue`` is asked for only after this, at its first
    read."""
    try:
        reservation.take_body(size, framing=framing)
    except Problem:
        close_connection_after_answer()
        raise
    if counted is not None:
        limits = reservation.admission.limits
        counted.set_deadline(
            size, grace_seconds=limits.body_timeout_seconds, bytes_per_second=limits.body_min_bytes_per_second
        )


def _is_chunked(environ: dict[str, Any]) -> bool:
    return "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()


def _close_if_unread(environ: dict[str, Any]) -> None:
    """Close the connection after an answer whose body was not read to its end (rather than drain it)."""
    counted: CountingInput | None = counting_input(environ)
    if counted is None:
        return
    length = environ.get("CONTENT_LENGTH")
    declared = int(length) if length and str(length).isdigit() else None
    if (
        counted.timed_out
        or (declared is not None and counted.bytes_read < declared)
        or (declared is None and _is_chunked(environ) and not counted.ended)
    ):
        close_connection_after_answer()
