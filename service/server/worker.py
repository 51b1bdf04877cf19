"""gunicorn's gevent worker, with admission at the connection level (``worker_class`` of gunicorn_settings).

gunicorn's gevent worker gives each connection a greenlet, so idle and slow clients cost a greenlet, not the
worker. What it lacks, and this subclass adds through the worker's public methods:

- **Deadlines for request heads.** The first request's head must arrive within ``HEADER_TIMEOUT_SECONDS``;
  a kept-alive connection may then wait ``GUNICORN_KEEPALIVE`` seconds for the next one (gunicorn uses the
  keep-alive time for both, and none at all when keep-alive is off: then every answer closes its connection
  here instead). Under TLS the handshake has a deadline of ``HEADER_TIMEOUT_SECONDS`` before the first head's
  (service/server/tls.py): gevent's server would do it before the worker sees the connection, with none.
- **A deadline for answers.** A client that takes none of its answer for ``ANSWER_TIMEOUT_SECONDS``, or
  that takes it slower than ``ANSWER_MIN_BYTES_PER_SECOND`` after that much grace, is disconnected
  (:class:`ClientSocket`), so the answer's share of the memory budget comes back.
- **A bounded request head.** A head that has not ended after :data:`MAX_HEAD_BYTES` (nginx's default, four
  buffers of 8 KiB) is a ``431`` (:class:`ClientSocket`): gunicorn allows 100 fields of 8,190 bytes, and its
  parser scans the whole head again after each 8 KiB read, so 60 connections with 785 KB heads cost the
  worker 1.8 s of CPU (``/livez`` waited as long) and 45 MB outside the memory budget.
- **Chunked bodies counted on the wire.** What each connection receives is counted (:class:`ClientSocket`),
  for the app to refuse a chunked body whose framing outgrows its data (service/web/body.py).
- **Room for new connections.** A worker holds at most ``worker_connections`` connections. When it holds more
  than :data:`CROWDED_SHARE` of them, connections are closed, the cheapest for their clients first
  (:meth:`IdleConnections.close_longest_idle`): those waiting longest for a request head (idle keep-alives,
  clients that connect and send nothing or trickle their headers), then bodies waiting for room in the
  memory budget (503), then bodies that stall, such as a lying ``Content-Length`` (408), on each new
  connection and every
  :data:`SWEEP_SECONDS`, so a crowd cannot keep the worker full for long and a probe or a real client
  always gets in.
- **No place kept for a client that left.** Every :data:`SWEEP_SECONDS` the bodies waiting for room in the
  memory budget are looked at, and the wait of one whose client has left (:meth:`ClientSocket.client_left`)
  is ended, its place in the queue of bodies free again.
- **``100 Continue`` only for a body the app reads.** gunicorn answers ``Expect: 100-continue`` as soon as
  it has the head; here the 100 waits for the app's first read of the body (:class:`ClientSocket`), so a
  body the app refuses without reading it (401, 404, 405, 413, 415, or 503 when no room comes for it in
  the worker's memory budget in time) is never asked for, and one that has to wait for room is asked for
  once it has it.
- **New connections taken in bursts when the loop lags.** With several workers on one listening socket,
  gunicorn has each accept one connection per wake-up of its loop, so that one worker does not take a whole
  burst; but a worker busy with kept-alive connections turns its loop once per round of them, so a burst of
  new connections came in one per round (2 workers, 64 connections at once: the last first request answered
  after 1.0-1.4 s, wrk's p99 0.5-0.9 s). This worker accepts more per wake-up as its loop lags
  (:func:`accepts_per_wakeup`), and one at a time, as gunicorn, while it keeps up.
- **Its decisions counted.** What it does with connections that no answer records (a close at a head's or
  a handshake's deadline, for room, as it stops, for a client that stopped reading) is counted on
  ``/metrics`` (service/server/connection_metrics.py).
- **Close, don't drain.** When the app asks to close a connection after its answer (a body it refused or that
  did not arrive in time, see service/web/connection.py), the connection is closed rather than kept alive,
  which would make gunicorn read the rest of that body first.

The kernel runs on a thread (service/web/admission.py), so this worker's event loop stays free to do all this
while a request computes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import math
import select
import socket
import ssl
import struct
import termios
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import gevent
import gevent.monkey
from flask import Flask
from gevent import Greenlet
from gevent.server import StreamServer
from gunicorn.workers.ggevent import GeventWorker

from service.server import tls
from service.server.connection_metrics import CloseReason, connection_metrics
from service.server.problems import write_problem
from service.web.admission import Admission, admission_of
from service.web.connection import (
    WaitEnd,
    on_bytes_received,
    on_close_request,
    on_waits,
    take_close_request,
)

# Past this share of worker_connections the worker is crowded and closes the longest-idle connections.
CROWDED_SHARE = 0.9
SWEEP_SECONDS = 0.5
SWEEP_FAILURE_LOG_SECONDS = 60.0
# A connection is closed for room only once it has waited this long for its head (a fresh one is about to
# send it).
MIN_IDLE_SECONDS = 0.5
# After an answer that closes its connection with a body left unread, what the client still sends is read and
# thrown away for this long, so the answer is not lost to a reset (see linger()).
LINGER_SECONDS = 2.0
# The most of an answer the kernel queues unsent on a connection (TCP_NOTSENT_LOWAT; see ClientSocket).
UNSENT_BYTES = 128 * 1024
# A send that waits ANSWER_TIMEOUT_SECONDS while its client takes some of the answer waits again, this many
# times at most (a client reading a few bytes per timeout cannot hold an answer for ever).
MOST_ANSWER_WAITS = 30
# The largest piece of an answer handed to a TLS connection at once (a TLS send returns only when all of it is
# written, so a larger one would show the client's progress only at its end).
TLS_PIECE_BYTES = 64 * 1024
LINGER_READ_BYTES = 64 * 1024
# What a request head may take, its request line included (as nginx's large_client_header_buffers 4 8k): one
# that has not ended after it is refused with a 431 (ClientSocket.recv). One that ends in the read that
# crosses it is served, so a head of up to one read (8 KiB, gunicorn's) more may pass.
MAX_HEAD_BYTES = 32 * 1024
# gunicorn's interim answer to a head with ``Expect: 100-continue`` (ClientSocket holds it back).
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
INTERIM = b"HTTP/1.1 1"  # how every interim (1xx) answer's head starts
# How a TLS handshake fails when its client closes or resets the connection (before sending anything:
# tls.handshake's ConnectionAbortedError; during it: an EOF against the protocol, or a reset).
CLIENT_LEFT_HANDSHAKE = (ConnectionAbortedError, ConnectionResetError, BrokenPipeError, ssl.SSLEOFError)
# A worker sharing the listening socket accepts one more connection per wake-up for each of these seconds its
# loop lags, up to the most: a connection waits about one turn of a busy loop instead of one turn per
# connection ahead of it. The loop's lag is measured every PACE_SECONDS; a worker left with no connection
# goes back to one at a time at once (it does not lag, and the next burst is one the workers share). Chosen
# by measurement (docs/performance.md): a fixed 16 took bursts as fast but let one idle worker take a whole
# small burst (4 wrk connections all on one worker in 4 of 8 runs, halving throughput); gevent's default of
# 100 did so for 64.
LAG_SECONDS_PER_ACCEPT = 0.005
MOST_ACCEPTS_PER_WAKEUP = 16
PACE_SECONDS = 0.02


class _Wait:
    """``with`` it around a wait the worker may end early (:meth:`end_now`, from its event loop): a read that
    waits for the client (:class:`_ReadWait`, :class:`_HeadWait`) or a body waiting for room in the memory
    budget (:class:`_RoomWait`)."""

    def __init__(self, waits: IdleConnections) -> None:
        self._waits = waits
        self.greenlet = gevent.getcurrent()
        self.since = 0.0
        self.ending = False  # its end is on its way (from the loop's next turn)
        self.ended_by_worker = False  # by end_now (for room, or as the worker stops), not its own deadline

    def __enter__(self) -> _Wait:
        self.since = time.monotonic()
        self._waits.waiting[self] = None
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> bool:
        self._waits.waiting.pop(self, None)
        return self.swallows(kind, value, traceback)

    def swallows(self, kind: Any, value: Any, traceback: Any) -> bool:
        """Whether the wait's end is swallowed here: no, the waiting code answers it itself."""
        return False

    def end_now(self, why: WaitEnd, reason: CloseReason | None) -> None:
        """End the wait at once, if it still waits (from the event loop), and count its connection's close
        for ``reason`` (None: not the server's doing, as when the client has left)."""
        if self in self._waits.waiting:
            self._waits.waiting.pop(self, None)
            self.ended_by_worker = True
            try:
                self._end(why)
            finally:
                if reason is not None:
                    self._waits.count_close(reason)

    def _end(self, why: WaitEnd) -> None:
        raise NotImplementedError


class _ReadWait(_Wait):
    """A read that waits for the client, ended early by raising its ``timeout`` in it, as if it had fired: a
    body read (service/web/body.py), whose own deadline answers 408 and closes the connection."""

    def __init__(self, waits: IdleConnections, timeout: gevent.Timeout) -> None:
        super().__init__(waits)
        self.timeout = timeout

    def end_now(self, why: WaitEnd, reason: CloseReason | None) -> None:
        self.timeout.cancel()
        super().end_now(why, reason)

    def _end(self, why: WaitEnd) -> None:
        self.greenlet.throw(self.timeout)


class _RoomWait(_Wait):
    """A body waiting for room in the memory budget (service/web/admission.py), ended by calling ``end(why)``:
    raised into a wait on a condition variable, an exception broke the condition's locks ("Semaphore
    released too many times", a 500)."""

    def __init__(self, waits: IdleConnections, end: Callable[[WaitEnd], None]) -> None:
        super().__init__(waits)
        self._ender = end  # the admission's, for this body

    def _end(self, why: WaitEnd) -> None:
        self._ender(why)


class _HeadWait(_ReadWait):
    """``with`` it around reading a request head: a timeout that the worker can also fire early.

    A kept-alive connection's wait (``seconds`` is GUNICORN_KEEPALIVE) may be given ``head_seconds`` too: once
    the head's first bytes come (:meth:`head_started`, from its :class:`ClientSocket`), the rest of it must
    come within them, as a first head's must. Without it, a head trickled a byte a second after one quick
    request held its connection for the whole keep-alive time.
    """

    def __init__(
        self,
        waits: IdleConnections,
        seconds: float,
        *,
        kept_alive: bool,
        head_seconds: float | None = None,
        sock: ClientSocket | None = None,
        deadline_reason: CloseReason | None = None,
    ) -> None:
        # False: when it fires the with block just ends, and gunicorn closes the connection
        super().__init__(waits, gevent.Timeout(seconds, False))
        self.kept_alive = kept_alive  # a connection served before, waiting for its next request
        # What its connection's close is counted as when its own deadline ends it.
        self.deadline_reason: CloseReason = deadline_reason or (
            "idle_timeout" if kept_alive else "head_timeout"
        )
        self._seconds = seconds
        self._head_seconds = head_seconds or 0.0
        self._sock = sock if head_seconds is not None else None  # tells it when the head starts

    def __enter__(self) -> _HeadWait:
        super().__enter__()
        self.timeout.start()
        if self._sock is not None:
            self._sock.head_wait = self
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> bool:
        if self._sock is not None:
            self._sock.head_wait = None
        return super().__exit__(kind, value, traceback)

    def head_started(self) -> None:
        """The head's first bytes came (its socket calls this once, inside the wait): from now its rest has
        ``head_seconds``, if that is sooner than the wait's end (a new timer; gevent's keeps the time it was
        made with), and its connection is closed at the deadline of a head, not of an idle connection."""
        self.deadline_reason = "head_timeout"
        if time.monotonic() + self._head_seconds < self.since + self._seconds:
            self.timeout.cancel()
            self.timeout = gevent.Timeout(self._head_seconds, False)
            self.timeout.start()

    def swallows(self, kind: Any, value: Any, traceback: Any) -> bool:
        swallowed = bool(self.timeout.__exit__(kind, value, traceback))
        if swallowed and not self.ended_by_worker:  # its own deadline (end_now counts its own ends)
            self._waits.count_close(self.deadline_reason)
        return swallowed


class ClientSocket:
    """A client's socket as this worker serves it: it counts the bytes received, for
    :func:`~service.web.connection.bytes_received` (the app compares them with a chunked body's bytes to
    refuse one whose framing costs more than its data), gives up on a client that takes none of its
    answer for ``answer_timeout`` seconds (as nginx's ``send_timeout``) or falls behind ``answer_min_rate``
    after that much grace: gevent's ``sendall`` waits for ever, and the answer holds its share of the
    worker's memory budget until it has been sent, and sends a
    ``100 Continue`` only when the app reads the body it invites.

    gunicorn sends the 100 as soon as it has parsed a head with ``Expect: 100-continue``, before the app
    runs, so a client was told to send a body the app then refused without reading it: a 16 MiB upload to a
    misspelt path, with the wrong method or media type or without its API key was sent whole, for a 404,
    405, 415 or 401. RFC 9110 (section 10.1.1) wants the final answer instead whenever the head decides it.
    Here the 100 is held back (:meth:`send`: it is gunicorn's one write that does not go through
    ``sendall``) and sent at the body's first read (:meth:`recv`), as Go's net/http and Tomcat's
    ``continueResponseTiming="onRead"`` do; a final answer given before then goes without it. (Under TLS
    too: the worker wraps the connection for TLS first, and this one wraps that.)"""

    def __init__(
        self,
        sock: Any,
        *,
        answer_timeout: float | None,
        on_stalled: Callable[[CloseReason, str], None],
        accepted: float | None = None,
        answer_min_rate: float | None = None,
    ) -> None:
        self.sock = sock
        self.accepted = time.monotonic() if accepted is None else accepted  # its connection's, monotonic
        self.bytes_received = 0
        self.request: Any = None  # gunicorn's message of the request being served (or the last one)
        # Of bytes_received, how many came before the request being served surely began: all but the last
        # read when the one before it was answered (that read may have taken the start of this one).
        self.received_before_request = 0
        self._last_read = 0
        # bytes_received when the head being read began (None while its request is served): at most one read
        # later than it, so a head is counted short by at most what that read held of it (8 KiB: gunicorn's)
        self._head_from: int | None = 0
        self.head_wait: _HeadWait | None = None  # a kept-alive connection's wait for its next head, if any
        self._continue_due = False  # a 100 Continue held back until the app reads the body (see send)
        self._answer_timeout = answer_timeout
        self._on_stalled = on_stalled
        # The answer's sends may wait for its client answer_timeout + k / answer_min_rate seconds in all while
        # its first k bytes are handed over (None: no such bound): a client reading a step per timeout is not
        # stalled, but at 13 KiB a second it held a 192 MiB answer's share of the memory budget for four
        # hours. Only waiting counts: the server's own time (computing, encoding pieces) is not the client's.
        self._answer_min_rate = answer_min_rate
        self._answer_bytes = 0  # of the answer being sent, handed to the connection so far
        self._answer_waited = 0.0  # seconds its sends waited for the client
        # Under TLS a send is all or nothing (OpenSSL writes the whole buffer before it returns) and gevent's
        # waits without the timer it is given, so answers go in pieces, each under a timer (see sendall).
        self._tls = hasattr(sock, "pending")
        if answer_timeout is not None:
            # Linux calls a socket writable again only once a third of its send buffer is free (up to 4 MiB
            # on loopback): a client reading 64 KiB a second left a send waiting 20 s. With at most this much
            # queued unsent, a send waits for 100-230 KiB read; _send_in_time waits again for a slower reader.
            with contextlib.suppress(OSError, AttributeError):  # not TCP (a Unix socket), or not Linux
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, UNSENT_BYTES)

    def send(self, data: Any, *arguments: Any) -> int:
        if not arguments and data == CONTINUE:
            self._continue_due = True  # sent at the body's first read (recv), if the app reads it at all
            return len(data)
        sent: int = self.sock.send(data, *arguments)
        return sent

    def recv(self, *arguments: Any) -> bytes:
        if self._continue_due:  # the app reads the body: now the client may send it
            self._continue_due = False
            self.sendall(CONTINUE)
        if self._head_from is not None and self.bytes_received - self._head_from >= MAX_HEAD_BYTES:
            # gunicorn reads on only while the head has not ended. Checked before the read, not after it: the
            # read that ends a head may also hold its body or the next request, which are not the head's.
            self._refuse_head()
        data: bytes = self.sock.recv(*arguments)
        self.bytes_received += len(data)
        self._last_read = len(data)
        if data and self.head_wait is not None:
            waiting, self.head_wait = self.head_wait, None
            waiting.head_started()
        return data

    def sendall(self, data: Any) -> None:
        if self._continue_due and not _interim(data):
            # A final answer given before the body was read replaces the 100, so the client need not send
            # the body at all (RFC 9110, section 10.1.1). Another interim answer (103 Early Hints) does not.
            self._continue_due = False
        if self._answer_timeout is None:
            self.sock.sendall(data)
            return
        view = memoryview(data).cast("B")
        sent = 0
        if not self._tls:
            try:
                sent = self.sock.send(view, 0, 0.0)  # at once, without waiting: it all fits, nearly always
            except BlockingIOError:
                sent = 0
            self._answer_bytes += sent
        while sent < len(view):
            piece = view[sent : sent + TLS_PIECE_BYTES] if self._tls else view[sent:]
            more = self._send_in_time(piece, self._answer_timeout)
            sent += more
            self._answer_bytes += more

    def _wait_allowed(self) -> float:
        """How much longer the answer's sends may wait for its client before its next byte is handed over:
        ``inf`` without a minimum rate."""
        if self._answer_min_rate is None or self._answer_timeout is None:
            return math.inf
        allowed = self._answer_timeout + (self._answer_bytes + 1) / self._answer_min_rate
        return allowed - self._answer_waited

    def _send_in_time(self, view: memoryview, seconds: float) -> int:
        """Some of ``view``, once the client has taken enough of what was sent before to make room; cut when
        it has taken none of it (its queue in the kernel no shorter) for ``seconds``, or when the answer has
        waited longer than its minimum rate allows (:meth:`_wait_allowed`)."""
        reason: CloseReason = "answer_stalled"
        for _ in range(MOST_ANSWER_WAITS):
            queued = self._queued()
            left = self._wait_allowed()
            began = time.monotonic()
            timer = gevent.Timeout(max(0.0, min(seconds, left)))
            try:
                with timer:
                    sent: int = self.sock.send(view)
            except gevent.Timeout as fired:
                if fired is not timer:
                    raise
            else:
                self._answer_waited += time.monotonic() - began
                return sent
            self._answer_waited += time.monotonic() - began
            if left <= seconds:
                reason = "answer_too_slow"
                break
            still = self._queued()
            if queued is None or still is None or still >= queued:
                break  # nothing taken: the client stopped reading
            # It is reading, only slower than the kernel's wake-up needs (the room it waits for): wait on.
        if reason == "answer_too_slow":
            why = (
                f"the client took its answer slower than {self._answer_min_rate:,.0f} bytes a second "
                f"({self._answer_bytes:,} bytes handed over, {self._answer_waited:.1f} s waited for it; "
                "ANSWER_MIN_BYTES_PER_SECOND)"
            )
        else:
            why = f"the client took none of its answer for {seconds:g} s (ANSWER_TIMEOUT_SECONDS)"
        self._on_stalled(reason, why)
        # gunicorn closes the connection quietly, as for a client gone; the answer is closed
        raise BrokenPipeError(errno.EPIPE, why) from None

    def _refuse_head(self) -> NoReturn:
        """A ``431`` for a head that has not ended after :data:`MAX_HEAD_BYTES`, written, logged and counted
        as gunicorn's own 431 is, then the connection closed as the app's refusals are: the client may still
        be sending the head, and closing with its bytes unread would reset the connection, which can destroy
        the answer before the client reads it (see :func:`linger`)."""
        self._head_from = None
        detail = f"The request head has not ended after {MAX_HEAD_BYTES:,} bytes."
        write_problem(self.sendall, 431, "Request Header Fields Too Large", detail)
        linger(self.sock)
        raise StopIteration(detail)  # gunicorn's end of a connection (its parser stops so too)

    def head_read(self) -> None:
        """The head of the request being served is parsed: what comes next is its body."""
        self._head_from = None
        self._new_answer()

    def _new_answer(self) -> None:
        """What the next answer has been handed over and waited starts from nothing."""
        self._answer_bytes, self._answer_waited = 0, 0.0

    def request_answered(self) -> None:
        """The request being served has been answered; the next one on this connection starts after it."""
        self.received_before_request = self.bytes_received - self._last_read
        self._head_from = self.bytes_received
        self._new_answer()  # (also at the next head: an answer the server writes without one starts anew)

    def client_left(self) -> bool:
        """Whether the client has given up on the request being served, whose body is not read yet: it reset
        the connection, or closed its side of it having sent fewer bytes than the body declares (a chunked
        body's end is unknown: only a reset counts for it). Whatever a client sends before it closes comes
        before the close, so all of it is here by then, read or in the kernel's buffer: one that shuts down
        its side once its whole body is sent, and waits for the answer, has not left.

        Seen only once the close arrives: a client that sent more than the kernel's receive buffer takes
        (about 100 KB on loopback) before closing is not seen to leave, its close queued behind bytes the
        server does not read while the body waits (one that sends ``Expect: 100-continue`` sends none). On a
        kept-alive connection the last read of the request before may have held this one's start, so a body
        no larger than that read (up to 1 MiB in gunicorn 27) is not seen either."""
        events = _hangups(self.sock)
        if events & (select.POLLHUP | select.POLLERR):
            return True
        declared = None if self.request is None else _declared_length(self.request.headers)
        if not events & _POLLRDHUP or declared is None:
            return False
        unread = self.unread_bytes()  # (under TLS, encrypted: more than it will read as)
        if unread is None:
            return False
        pending = getattr(self.sock, "pending", None)  # TLS: decrypted already, not read yet
        if pending is not None:
            unread += pending()
        # What this request's client sent, at the most: its head is counted too, and a read-ahead of the
        # request before it.
        arrived = self.bytes_received - self.received_before_request + unread
        return declared > arrived

    def unread_bytes(self) -> int | None:
        """Bytes the client has sent that the kernel holds unread (FIONREAD); None where it does not say."""
        return self._kernel_count(termios.FIONREAD)

    def _queued(self) -> int | None:
        """Bytes of answers in the kernel's queue for this connection, sent or not but not yet acknowledged
        by the client (SIOCOUTQ); None where the kernel does not say."""
        return self._kernel_count(termios.TIOCOUTQ)

    def _kernel_count(self, request: int) -> int | None:
        """The count the kernel gives for this socket's ``request`` (an ioctl); None where it does not."""
        try:
            answer = fcntl.ioctl(self.sock.fileno(), request, b"\0\0\0\0")
        except (OSError, ValueError, AttributeError):
            return None
        count: int = struct.unpack("i", answer)[0]
        return count

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)  # everything else is the socket's own


# The kernel's poll(), not gevent's (which waits cooperatively and knows no POLLRDHUP): asked with a zero
# timeout, it only looks.
_POLL = gevent.monkey.get_original("select", "poll")
_POLLRDHUP = getattr(select, "POLLRDHUP", 0)  # Linux's "the peer closed its side"; elsewhere only resets


def _interim(data: Any) -> bool:
    """Whether ``data`` is an interim (1xx) answer's head."""
    return bytes(memoryview(data)[: len(INTERIM)]) == INTERIM


def _hangups(sock: Any) -> int:
    """The poll events that say ``sock``'s peer closed its side (POLLRDHUP) or reset it (POLLHUP, POLLERR)."""
    poller = _POLL()
    try:
        poller.register(sock.fileno(), _POLLRDHUP)  # POLLHUP and POLLERR are reported whatever is asked
        ready = poller.poll(0)  # [(its descriptor, its events)], or [] when nothing happened
    except (OSError, ValueError, AttributeError):  # closed meanwhile, or not a socket with a descriptor
        return 0
    return ready[0][1] if ready else 0


def _declared_length(headers: list[tuple[str, str]]) -> int | None:
    """A head's ``Content-Length`` as a count of bytes; None when it has none that is one, or is chunked
    (gunicorn's headers: names in capitals)."""
    if _chunked(headers):
        return None
    length = next((value for name, value in reversed(headers) if name == "CONTENT-LENGTH"), None)
    return int(length) if length is not None and length.isascii() and length.isdigit() else None


def _chunked(headers: list[tuple[str, str]]) -> bool:
    return any(name == "TRANSFER-ENCODING" and "chunked" in value.lower() for name, value in headers)


class _NamedListener:
    """A listening socket whose name was read when the worker began to serve it. gunicorn reads the name
    for each connection, after the TLS handshake when there is one, and by then a stop may have closed the
    socket (EBADF: the first request of a connection accepted before the stop was lost, with a traceback,
    where one without TLS is served)."""

    def __init__(self, listener: Any) -> None:
        self._listener = listener
        self._name = listener.getsockname()

    def getsockname(self) -> Any:
        return self._name

    def __getattr__(self, name: str) -> Any:
        return getattr(self._listener, name)


def asks_to_close(headers: Sequence[tuple[str, str]]) -> bool:
    """Whether a request's ``Connection`` field lists ``close``, in any of its lines, among other options
    (RFC 9112, section 9.6: the connection ends after the answer). gunicorn reads only the first line, and
    only when it is ``close`` alone: ``keep-alive, close`` kept the connection and served what followed."""
    return any(
        name == "CONNECTION" and any(option.strip(" \t").lower() == "close" for option in value.split(","))
        for name, value in headers
    )


def linger(sock: socket.socket) -> None:
    """Close our side and discard what the client still sends for up to :data:`LINGER_SECONDS`.

    Closing a socket with unread bytes in it makes the kernel reset the connection, and a reset can destroy
    the answer before the client reads it (a client still sending a refused 16 MiB body would see a reset,
    not the 413). So, as nginx's lingering close does, the server stops writing, reads and throws away for a
    short, bounded time, and then closes. Nothing read is kept: no body is buffered.
    """
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        return
    deadline = time.monotonic() + LINGER_SECONDS
    with contextlib.suppress(OSError):
        while (left := deadline - time.monotonic()) > 0:
            data = b""
            with gevent.Timeout(left, False):  # False: when the time is up the block just ends, data empty
                data = sock.recv(LINGER_READ_BYTES)
            if not data:
                return  # the client closed too, or the time is up


class IdleConnections:
    """The connections waiting for the client (a request head, or more of a body), oldest wait first.

    ``count_close(reason)`` is told of each connection that the worker closes by ending a wait: a head's or
    a TLS handshake's own deadline, or an end for room or as the worker stops (not one whose client has
    left, nor a body's own deadline, whose 408 the app answers): the worker's connection metrics."""

    def __init__(self, count_close: Callable[[CloseReason], None] | None = None) -> None:
        self.waiting: dict[_Wait, None] = {}  # insertion-ordered: the oldest wait first
        self.count_close = count_close or _counted_nowhere

    def wait(
        self,
        seconds: float,
        *,
        kept_alive: bool,
        head_seconds: float | None = None,
        sock: ClientSocket | None = None,
        deadline_reason: CloseReason | None = None,
    ) -> _HeadWait:
        return _HeadWait(
            self,
            seconds,
            kept_alive=kept_alive,
            head_seconds=head_seconds,
            sock=sock,
            deadline_reason=deadline_reason,
        )

    def read(self, timeout: BaseException) -> _ReadWait:
        """A body read that waits for the client (service.web.connection.stall_watch)."""
        assert isinstance(timeout, gevent.Timeout)  # the body's deadline under this worker
        return _ReadWait(self, timeout)

    def room(self, end: Callable[[WaitEnd], None]) -> _RoomWait:
        """A body waiting for room in the memory budget (service.web.connection.room_watch)."""
        return _RoomWait(self, end)

    def end_kept_alive_waits(self) -> int:
        """End every wait for the next request on a connection kept alive (they close); how many were ended.
        A new connection's wait for its first head is left to its deadline: its client has just connected
        to send a request, which would be lost."""
        heads = [
            wait
            for wait in self.waiting
            if isinstance(wait, _HeadWait) and wait.kept_alive and not wait.ending
        ]
        return _end_soon(heads, WaitEnd.CROWDED, "stopping")

    def close_longest_idle(self, count: int) -> int:
        """Have up to ``count`` waits end, the cheapest for their clients first: waits for a request head
        (idle keep-alives, silent or trickling clients: no request is lost) that lasted
        :data:`MIN_IDLE_SECONDS`, the longest first; then bodies waiting for room in the memory budget,
        however young, the latest first (the earliest is the nearest to its room; kept while held uploads
        were cut, a crowd of them had 33 of 40 uploads held one byte short answered 408); then body reads
        that stalled that long, the longest first. Waits whose end is on its way already (from the loop's
        next turn) count among the ``count``: a burst of new connections asks once per connection before
        any end has run, and each would otherwise end as many more. How many were ended now."""
        now = time.monotonic()
        heads: list[_Wait] = []
        rooms: list[_Wait] = []
        reads: list[_Wait] = []
        for wait in self.waiting:  # the oldest first
            if wait.ending:
                count -= 1
            elif isinstance(wait, _RoomWait):
                rooms.append(wait)
            elif now - wait.since >= MIN_IDLE_SECONDS:
                (heads if isinstance(wait, _HeadWait) else reads).append(wait)
        return _end_soon([*heads, *reversed(rooms), *reads][: max(0, count)], WaitEnd.CROWDED, "crowded")

    def end_waits_for_room_of_clients_gone(self, gone: Callable[[Greenlet], bool]) -> int:
        """End the waits for room of the connections whose client has left (``gone(greenlet)``, asked of
        each waiting connection's greenlet); how many. Each kept its place in the queue of bodies until its
        ``COMPUTE_QUEUE_SECONDS`` ran out, and a few such ghosts filled the queue for a real body."""
        rooms = [wait for wait in self.waiting if isinstance(wait, _RoomWait) and not wait.ending]
        return _end_soon([wait for wait in rooms if gone(wait.greenlet)], WaitEnd.CLIENT_LEFT, None)


def _end_soon(waits: Sequence[_Wait], why: WaitEnd, reason: CloseReason | None) -> int:
    """Have ``waits`` (none of them ending already) end from the event loop's next turn, marked as ending
    until then; how many. Each connection closed by it is counted for ``reason`` (None: its client's doing,
    not the server's)."""
    loop = gevent.get_hub().loop
    for wait in waits:
        wait.ending = True
        loop.run_callback(wait.end_now, why, reason)
    return len(waits)


def _counted_nowhere(reason: CloseReason) -> None:
    """The count of connections closed, where no metrics are kept (IdleConnections outside a worker)."""


def accepts_per_wakeup(loop_lag_seconds: float) -> int:
    """How many waiting connections a worker sharing the listening socket accepts per wake-up when its loop
    runs ``loop_lag_seconds`` late: 1 (gunicorn's choice) while it keeps up, more as it lags."""
    return max(1, min(MOST_ACCEPTS_PER_WAKEUP, 1 + int(loop_lag_seconds / LAG_SECONDS_PER_ACCEPT)))


class AdmittingGeventWorker(GeventWorker):  # type: ignore[misc]  # gunicorn has no type hints
    """The gevent worker with head deadlines, room kept for new connections, and no 100 for a refused body."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.idle = IdleConnections(count_close=self._count_close)
        self.open_connections = 0
        self.served: weakref.WeakSet[Greenlet] = weakref.WeakSet()  # connections past their first request
        self.client_sockets: dict[Greenlet, ClientSocket] = {}  # each connection's, by its greenlet
        self.crowded_above = max(1, int(CROWDED_SHARE * self.worker_connections))
        self.sweep_failure_logged = -math.inf  # time.monotonic() of the last failed sweep logged
        self.close_after_each_answer = False
        self.admission: Admission | None = None  # the app's, once loaded (load_wsgi)
        # gunicorn's run() builds each listener's server with ``server_class`` when it is set (its pywsgi
        # worker sets a pywsgi server class there), and otherwise a StreamServer whose max_accept it sets to
        # 1 with several workers; this builds the same StreamServer and keeps it, to pace its accepts.
        self.server_class = self._connection_server
        self.servers: list[StreamServer] = []
        self.tls_context: ssl.SSLContext | None = None  # gunicorn's, when it serves TLS (used by handle())
        self.quitting = False  # a quick stop has begun (handle_quit)

    @property
    def shares_listener(self) -> bool:
        """Whether other workers accept on the same listening socket (then its accepts are paced)."""
        return bool(self.cfg.workers > 1)

    def _connection_server(self, listener: Any, *, spawn: Any, **arguments: Any) -> StreamServer:
        # application, log, handler_class and environ are for a pywsgi server; this one calls handle(). The
        # TLS context is not the server's either: it would do the handshake before handle(), with no deadline
        # (service/server/tls.py).
        self.tls_context = arguments.get("ssl_context")
        handle = functools.partial(self.handle, _NamedListener(listener))
        server = StreamServer(listener, handle=handle, spawn=spawn)
        if self.shares_listener:
            server.max_accept = accepts_per_wakeup(0.0)
            self.servers.append(server)  # paced by _pace_accepts()
        return server

    def handle_quit(self, sig: int, frame: Any) -> None:
        """SIGINT or SIGQUIT: the quick stop, once. Ctrl-C sends SIGINT to every process of the terminal's
        group, and the master then sends each worker SIGQUIT: gevent's worker began a second stop, whose
        ``sys.exit(0)`` in a greenlet ran as the interpreter was already exiting and printed a traceback
        ("SystemExit: 0") for a clean stop."""
        if self.quitting:
            return
        self.quitting = True
        super().handle_quit(sig, frame)

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.admission = admission_of(self.wsgi) if isinstance(self.wsgi, Flask) else None

    def init_process(self) -> None:
        # With keep-alive off (GUNICORN_KEEPALIVE=0) gunicorn reads each head without timeout_ctx(): no head
        # deadline and no connection closed for room. So gunicorn keeps it on here, in this worker process
        # (the master's settings are untouched), and every answer closes its connection instead.
        self.close_after_each_answer = not self.cfg.keepalive
        if self.close_after_each_answer:
            self.cfg.set("keepalive", 1)
        connection_metrics().set_capacity(self.worker_connections)  # made here, in the worker's own process
        super().init_process()

    def header_timeout(self) -> float:
        if self.admission is None:
            return float(self.cfg.keepalive)
        return self.admission.limits.header_timeout_seconds

    def timeout_ctx(self) -> _HeadWait:
        if gevent.getcurrent() not in self.served:
            # A new connection: its first request is served even while the worker stops (gunicorn then
            # answers it with Connection: close); closing it unread would lose a request just sent.
            return self.idle.wait(self._first_head_seconds(), kept_alive=False)
        if not self.alive:
            # Stopping, on a connection served before (its request was in flight as the stop began, and
            # answered keep-alive): no next request, so it closes now instead of holding the stop for
            # GUNICORN_GRACEFUL_TIMEOUT. A request its client sends just now is lost, as at any server's
            # closing of an idle connection.
            return self.idle.wait(0.0, kept_alive=True, deadline_reason="stopping")
        return self.idle.wait(
            float(self.cfg.keepalive),
            kept_alive=True,
            head_seconds=self.header_timeout(),
            sock=self.client_sockets.get(gevent.getcurrent()),
        )

    def _first_head_seconds(self) -> float:
        """``HEADER_TIMEOUT_SECONDS`` for a new connection's first head. While the worker stops, only what
        is left of it since the connection was accepted: after a TLS handshake that took its own
        ``HEADER_TIMEOUT_SECONDS``, a head trickled for as long again held the stop for the whole
        ``GUNICORN_GRACEFUL_TIMEOUT`` (20 s), where a connection without TLS holds it for one timeout."""
        seconds = self.header_timeout()
        client = self.client_sockets.get(gevent.getcurrent())
        if self.alive or client is None:
            return seconds
        return max(0.0, client.accepted + seconds - time.monotonic())

    def run(self) -> None:
        gevent.spawn(self._keep_room)
        if self.shares_listener:
            gevent.spawn(self._pace_accepts)
        super().run()

    def _pace_accepts(self) -> None:
        while self.alive:
            asleep = time.monotonic()
            gevent.sleep(PACE_SECONDS)
            self._set_accepts_per_wakeup(accepts_per_wakeup(time.monotonic() - asleep - PACE_SECONDS))

    def _set_accepts_per_wakeup(self, accepts: int) -> None:
        for server in self.servers:
            server.max_accept = accepts

    def _keep_room(self) -> None:
        while self.alive:
            gevent.sleep(SWEEP_SECONDS)
            try:
                # Clients gone first: their connections are closing anyway, so they count against the crowd
                # (ended for it instead, one would be answered as overload, and a real client's wait cut).
                self.idle.end_waits_for_room_of_clients_gone(self._client_left)
                over = self.open_connections - self.crowded_above
                if over > 0:
                    self.idle.close_longest_idle(over)
            except Exception:  # a bug here must not end the sweeps (nor the closing at stop, below)
                if time.monotonic() >= self.sweep_failure_logged + SWEEP_FAILURE_LOG_SECONDS:
                    self.sweep_failure_logged = time.monotonic()
                    self.log.exception("the sweep for idle connections failed (logged once a minute at most)")
        # Stopping (SIGTERM, or recycled after GUNICORN_MAX_REQUESTS): gunicorn waits for every connection
        # before the worker exits, and one kept alive between requests would wait GUNICORN_KEEPALIVE (75 s)
        # for a head that may never come, so the stop took the whole GUNICORN_GRACEFUL_TIMEOUT (20 s) and a
        # recycled worker's place stayed empty that long. Those connections are closed now, as nginx closes
        # its idle ones when it stops; requests in flight still finish.
        self.idle.end_kept_alive_waits()

    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        accepted = time.monotonic()
        self.open_connections += 1
        metrics = connection_metrics()
        try:
            # In the try: the worker's own count of open connections, which decides when it is crowded, must
            # come back down whatever happens to the metrics' files.
            metrics.connection_accepted()
            if self.open_connections > self.crowded_above:
                self.idle.close_longest_idle(self.open_connections - self.crowded_above)
            if self.tls_context is not None:
                client = self._secured(client, self.tls_context, addr)
                if client is None:
                    return
            limits = None if self.admission is None else self.admission.limits
            answer_timeout = None if limits is None else limits.answer_timeout_seconds
            stalled = functools.partial(self._on_stalled_reader, addr)
            client_socket = ClientSocket(
                client,
                answer_timeout=answer_timeout,
                on_stalled=stalled,
                accepted=accepted,
                answer_min_rate=None if limits is None else limits.answer_min_bytes_per_second,
            )
            self.client_sockets[gevent.getcurrent()] = client_socket
            super().handle(listener, client_socket, addr)
        finally:
            self.client_sockets.pop(gevent.getcurrent(), None)
            self.open_connections -= 1
            if not self.open_connections:
                self._set_accepts_per_wakeup(accepts_per_wakeup(0.0))
            metrics.connection_ended()  # last: the worker's own state is right whatever happens here

    def _secured(self, client: Any, context: ssl.SSLContext, addr: Any) -> ssl.SSLSocket | None:
        """``client`` with TLS set up within ``HEADER_TIMEOUT_SECONDS`` (then its first head has as long), a
        wait that the sweep for room may end as it ends a head's; None, the connection closed, when it was
        not."""
        secured = None
        try:
            with self.idle.wait(
                self.header_timeout(), kept_alive=False, deadline_reason="tls_handshake_timeout"
            ) as wait:
                secured = tls.handshake(client, context, suppress_ragged_eofs=self.cfg.suppress_ragged_eofs)
            if secured is None:  # the wait ended it
                why = "to make room" if wait.ended_by_worker else "at its deadline"
                self.log.debug("closed the connection from %s %s: its TLS handshake was not done", addr, why)
        except tls.PlainHttp:
            self._count_close("plain_http")
            # (the linger, 2 s at most, is no wait the sweep can end: a plain HTTP client reads its answer)
            with contextlib.suppress(OSError):
                write_problem(client.sendall, 400, "Bad Request", tls.PLAIN_HTTP_DETAIL)
                linger(client)
        except CLIENT_LEFT_HANDSHAKE as gone:
            # It closed or reset the connection (as a balancer's TCP check does): its doing, not counted.
            self.log.debug(
                "closed the connection from %s: its client left during the TLS handshake: %s", addr, gone
            )
        except OSError as failure:  # ssl.SSLError is one
            # Nearly always the client's doing (it speaks no TLS this context accepts, or refused the
            # certificate), so no traceback. When most handshakes fail, the certificate or GUNICORN_CMD_ARGS'
            # --ciphers are wrong: the count of these against the connections accepted shows it.
            self._count_close("tls_handshake_failed")
            self.log.debug("closed the connection from %s: its TLS handshake failed: %s", addr, failure)
        finally:
            if secured is None:
                client.close()
        return secured

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> Any:
        current = gevent.getcurrent()
        self.served.add(current)
        client = self.client_sockets.get(current)
        if client is not None:
            client.request = req  # for _keep_room, while its body waits for room
            client.head_read()
        if self.close_after_each_answer or asks_to_close(req.headers):
            req.must_close = True  # the answer says "Connection: close", and gunicorn closes after it
        # must_close (of gunicorn's request message) makes the answer say "Connection: close" and ends the
        # connection after it
        on_close_request(lambda: setattr(req, "must_close", True))
        on_waits(self.idle)
        counted = sock if isinstance(sock, ClientSocket) else None  # (one this worker's handle() wrapped)
        on_bytes_received(None if counted is None else lambda: counted.bytes_received)
        try:
            handled = super().handle_request(listener_name, req, sock, addr)
        except StopIteration:
            # gunicorn ends the connection after this answer. Closed with bytes unread (a client that
            # pipelined its next requests), the kernel would reset it, and a reset can destroy answers sent
            # but not yet read: a worker recycled after GUNICORN_MAX_REQUESTS lost up to 3 of its last answers
            # to a client that had sent 200 requests at once.
            if take_close_request() or (counted is not None and counted.unread_bytes()):
                linger(sock)
            raise
        finally:
            on_close_request(None)
            on_waits(None)
            on_bytes_received(None)
        if take_close_request():
            linger(sock)
            raise StopIteration()
        # gevent switches greenlets only when one would block, and reading a request that has already arrived
        # does not: without this, a connection whose next request is always waiting (a fast client's arrives
        # while this answer is logged) is served again and again while other connections' requests wait
        # behind it (one worker, two wrk connections: p99 0.3-0.6 s with a median under 1 ms; 3 ms with this).
        # Other connections that are ready go first, then this one reads its next request.
        if client is not None:
            client.request_answered()
        gevent.sleep(0)
        return handled

    def _client_left(self, connection: Greenlet) -> bool:
        client = self.client_sockets.get(connection)
        return client is not None and client.client_left()

    @staticmethod
    def _count_close(reason: CloseReason) -> None:
        connection_metrics().count_close(reason)

    def _on_stalled_reader(self, addr: Any, reason: CloseReason, why: str) -> None:
        self._count_close(reason)
        self.log.warning("closed the connection from %s: %s", addr, why)
