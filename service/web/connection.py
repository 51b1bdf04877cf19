"""What the app tells the server about the connection a request came on, and whether gevent runs it.

The app decides some answers must close their connection instead of letting the server read on: a body that
was refused from its headers, or that did not arrive in time, is never drained (a client that claimed 999 MB
would otherwise hold the connection while the server reads them). The server's worker
(``service.server.worker``) asks :func:`take_close_request` after each answer. The flag is a context variable:
each gevent greenlet (one per connection) and each thread has its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

try:  # the default worker's event loop; the service also runs without it (the test client, flask run)
    import gevent.monkey
except ImportError:  # pragma: no cover - gevent is in the locks
    gevent = None

T = TypeVar("T")

_close_after_answer: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "close_after_answer", default=False
)
# Set by the server around each request: how to make the answer itself say ``Connection: close``.
_closer: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar("closer", default=None)


class WaitEnd(enum.Enum):
    """Why the server ended a body's wait for room in the memory budget."""

    CROWDED = "crowded"  # it needs the connection for others
    CLIENT_LEFT = "client left"  # the client closed (or reset) its connection before sending the body


class Waits(Protocol):
    """Set by the server around each request: how the waits it may end early are put among them, when it
    needs room for other connections (or, for a wait for room, when its client has left)."""

    def read(self, timeout: BaseException) -> AbstractContextManager[Any]:
        """A body read that waits for the client, ended by raising its ``timeout``."""
        ...

    def room(self, end: Callable[[WaitEnd], None]) -> AbstractContextManager[Any]:
        """A body that waits for room in the memory budget, ended by calling ``end(why)``."""
        ...


_waits: contextvars.ContextVar[Waits | None] = contextvars.ContextVar("waits", default=None)
# Set by the server around each request: the bytes its connection has received so far, framing included.
_received: contextvars.ContextVar[Callable[[], int] | None] = contextvars.ContextVar("received", default=None)


def under_gevent() -> bool:
    """Whether this process runs gevent's event loop with the standard library patched (the gevent worker)."""
    return gevent is not None and gevent.monkey.is_module_patched("socket")


# A sleep this short is a turn of the worker's loop that looks for new input (see let_other_connections_run).
POLL_SECONDS = 0.0001


def let_other_connections_run(*, poll_seconds: float = 0.0) -> None:
    """Under gevent, let the worker's loop run the other greenlets that are ready. ``gevent.sleep(0)`` runs
    only those; a sleep of ``poll_seconds`` > 0 is a turn of the loop that looks for new input first
    (accepts a probe's connection, reads its head)."""
    if under_gevent():
        import gevent  # only under the gevent worker, where it is loaded already

        gevent.sleep(poll_seconds)


def off_the_loop(work: Callable[[], T]) -> T:
    """``work()`` on a thread of gevent's pool under gevent, the calling greenlet waiting for it while the
    worker's loop serves the others (Python hands the loop's thread the interpreter every few milliseconds);
    a plain call elsewhere. Exceptions come back as they are."""
    if not under_gevent():
        return work()
    import gevent  # only under the gevent worker, where it is loaded already

    result: T = gevent.get_hub().threadpool.apply(work)
    return result


def close_connection_after_answer() -> None:
    """Ask the server to close this connection once the answer is sent."""
    _close_after_answer.set(True)
    closer = _closer.get()
    if closer is not None:
        closer()


def on_close_request(closer: Callable[[], None] | None) -> None:
    """Have :func:`close_connection_after_answer` call ``closer`` too (the server's, for this request)."""
    _closer.set(closer)


def take_close_request() -> bool:
    """Whether the answer just sent asked to close its connection; the next request starts afresh."""
    wanted = _close_after_answer.get()
    if wanted:
        _close_after_answer.set(False)
    return wanted


def on_waits(waits: Waits | None) -> None:
    """Have :func:`stall_watch` and :func:`room_watch` use ``waits`` (the server's, for this request)."""
    _waits.set(waits)


def stall_watch(timeout: BaseException) -> AbstractContextManager[Any]:
    """``with`` it around a read that waits for the client: the server may end the wait early, when it is
    crowded and this wait is among the longest, by raising ``timeout`` (the read's own deadline) in it."""
    waits = _waits.get()
    return waits.read(timeout) if waits is not None else contextlib.nullcontext()


def room_watch(end: Callable[[WaitEnd], None]) -> AbstractContextManager[Any]:
    """``with`` it around a body's wait for room in the memory budget: the server may end it by calling
    ``end(why)`` from its event loop, when it is crowded (before body reads that stall: none of the body has
    been read) or when the client has left; the wait must then end itself (an exception raised into a wait on
    a condition variable would break the condition's locks)."""
    waits = _waits.get()
    return waits.room(end) if waits is not None else contextlib.nullcontext()


def on_bytes_received(counter: Callable[[], int] | None) -> None:
    """Have :func:`bytes_received` ask ``counter`` (the server's, for this request's connection)."""
    _received.set(counter)


def bytes_received() -> int | None:
    """The bytes this request's connection has received so far, as sent (heads, chunk framing and bodies);
    None when the server does not count them (the test client, other servers)."""
    counter = _received.get()
    return None if counter is None else counter()
