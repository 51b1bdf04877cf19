"""The request body as the service actually read it: counted, and unreadable bodies answered with 400.

The WSGI input stream is wrapped before Flask sees it, so the access log and the body-size histogram can
report the bytes the service read rather than the ``Content-Length`` a client claimed (which may be a lie,
or 2^64). A body that cannot be read — a malformed chunked encoding, which gunicorn reports by raising its
own parse errors from ``read`` — becomes a 400 naming the cause instead of an unhandled 500, and so does a
body that ends before its ``Content-Length`` or its last chunk (the client closed its side): it is incomplete,
and is never computed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import IO, Any

import flask
from flask import Flask, has_request_context, request
from flask.wrappers import Request
from werkzeug.exceptions import BadRequest, RequestEntityTooLarge, RequestTimeout

from service.web.connection import (
    POLL_SECONDS,
    bytes_received,
    close_connection_after_answer,
    let_other_connections_run,
    stall_watch,
    under_gevent,
)
from service.web.problems import Problem, header_problem, shortened

_ENVIRON_KEY = "attention.body"
_INFLATED_KEY = "attention.body.inflated"
# The labels of a form or of text, which a page on any origin may send without the browser asking the server
# first (CORS-safelisted) and neither protocol declares, with who sends each unless told otherwise (the 415's
# hint).
FORM_SENDERS = {
    "application/x-www-form-urlencoded": "as curl -d does",
    "multipart/form-data": "as curl -F does",
    "text/plain": "as fetch() does for a string body",
}


class UnreadableBody(BadRequest):
    """The body's framing is broken (e.g. a chunk size that is not hexadecimal)."""

    description = "The request body could not be read: its transfer encoding is malformed."


class BodyTooSlow(RequestTimeout):
    """The body fell behind its minimum rate (``BODY_TIMEOUT_SECONDS`` of grace, then the rate), or stalled
    while its worker needed the room for other connections."""

    description = (
        "The request body did not arrive in time (after BODY_TIMEOUT_SECONDS of grace it must keep up with "
        "BODY_MIN_BYTES_PER_SECOND): the connection is closed."
    )


# A chunked body is read this much at a time, its framing checked and the worker's loop let run between reads:
# gunicorn parses each chunk in Python, so a read of 64 KiB in 1-byte chunks held the loop 0.3 s, and a 16 MiB
# body of them 80 s (the worker was killed for a missed heartbeat). 4 KiB of 1-byte chunks take about 20 ms.
CHUNKED_READ_BYTES = 4 * 1024
# A read of a chunked body that took longer than this (its chunks are small) is followed by a turn of the
# loop that polls for input (a sleep of POLL_SECONDS), not only by a yield; a fast one costs nothing more.
SLOW_READ_SECONDS = 0.002
# What a chunked body may take on the wire: its bytes, a tenth more for the chunks' sizes and line ends
# (chunks of 60 bytes and more on average), and this much besides: a small body in small chunks, and what the
# server has received of the body but not yet handed out (gunicorn receives up to 1 MiB of a large chunk at
# once, and hands it out as asked: 1 MiB and 8 bytes held back at most, measured). Past it, a 400: the framing
# costs more than the data is worth. What the allowance lets through costs about 1 s of CPU at most (about
# 230,000 1-byte chunks, at about 4.6 µs each), with the loop let run every 4 KiB.
FRAMING_SHARE = 0.1
FRAMING_ALLOWANCE_BYTES = 1024 * 1024 + 64 * 1024


class CountingInput:
    """``wsgi.input`` that counts what it hands out; framing errors from the server become a 400.

    With a deadline (:meth:`set_deadline`, called by admission once the body is admitted) every read under
    the gevent worker is cut off when the body falls behind its minimum rate: the request is answered 408
    and its connection closed. While a read waits, the server may also end it early to make room for other
    connections (:func:`~service.web.connection.stall_watch`).
    """

    def __init__(
        self, stream: IO[bytes], *, chunked: bool = False, declared_length: int | None = None
    ) -> None:
        self._stream = stream
        self.bytes_read = 0
        self._chunked = chunked
        # The Content-Length (None for a chunked body): a body that ends before it is incomplete, not shorter.
        self._declared_length = declared_length
        # For a chunked body, when the server counts what its connection received: that count at the start.
        self._received_at_start = bytes_received() if chunked else None
        self.deadline: float | None = None  # by when the whole body must have arrived
        # When the minimum rate starts to count (after the grace) and the rate: the k-th byte is due at
        # on_time_from + k / bytes_per_second, so a client cannot send nothing until just before the deadline
        # of a large claimed length (and hold its share of the memory budget all that time).
        self._on_time_from = 0.0
        self._bytes_per_second = math.inf
        self.timed_out = False
        self.ended = False  # a read returned less than it asked for: the body has no byte left
        self._before_first_read: Callable[[], None] | None = None

    def before_first_read(self, step: Callable[[], None]) -> None:
        """Have ``step`` run once, just before the body's first read, whose errors it may raise (admission
        takes the body's room in the memory budget there: a request answered unread takes none)."""
        self._before_first_read = step

    def set_deadline(self, length: int, *, grace_seconds: float, bytes_per_second: float) -> None:
        """From now, the body's first byte may take ``grace_seconds``, then it must keep up with the rate.

        ``length`` is the body's claimed length (the largest allowed for a chunked body): its last byte is
        due ``grace_seconds + length / bytes_per_second`` from now.
        """
        now = time.monotonic()
        self._on_time_from = now + grace_seconds
        self._bytes_per_second = bytes_per_second
        self.deadline = self._on_time_from + length / bytes_per_second

    def _due(self, size: int | None) -> float | None:
        """When a read of ``size`` bytes (None or negative: the rest of the body) must have completed."""
        if self.deadline is None or size is None or size < 0:
            return self.deadline
        return min(self.deadline, self._on_time_from + (self.bytes_read + size) / self._bytes_per_second)

    def _read_by(self, due: float, read: Callable[..., bytes], size: int | None) -> bytes:
        """``read(size)``, cut off at ``due`` (``time.monotonic()``) with a 408 and the connection closed."""
        import gevent  # only under the gevent worker, where it is loaded already

        timer = gevent.Timeout(max(0.0, due - time.monotonic()))
        try:
            with stall_watch(timer), timer:
                return read(size) if size is not None else read()
        except gevent.Timeout as fired:
            if fired is not timer:
                raise
            self.timed_out = True
            close_connection_after_answer()
            raise BodyTooSlow() from None

    def read(self, size: int | None = -1) -> bytes:
        if self._received_at_start is not None:
            return self._read_chunked(size)
        data = self._counted(self._stream.read, size)
        if size is None or size < 0 or len(data) < size:
            self.ended = True
            self._check_complete()
        return data

    def _check_complete(self) -> None:
        """400 when the body ended (its client closed its side) before its declared length: RFC 9112 section
        8 makes such a message incomplete, even when its bytes parse (a JSON document followed by nothing)."""
        declared = self._declared_length
        if declared is not None and self.bytes_read < declared:
            raise malformed_body(
                "Content-Length",
                f"the body ended after {self.bytes_read:,} of the {declared:,} bytes it declared.",
            )

    def _read_chunked(self, size: int | None) -> bytes:
        """``read(size)`` of a chunked body, :data:`CHUNKED_READ_BYTES` at a time, its framing checked after
        each and the worker's loop let run between them."""
        pieces: list[bytes] = []
        got = 0
        while size is None or size < 0 or got < size:
            asked = CHUNKED_READ_BYTES if size is None or size < 0 else min(CHUNKED_READ_BYTES, size - got)
            started = time.perf_counter()
            piece = self._counted(self._stream.read, asked)
            pieces.append(piece)
            got += len(piece)
            self._check_framing()
            if len(piece) < asked:
                self.ended = True
                break
            # A slow read (small chunks) is followed by a turn that polls for input: a probe's new connection
            # waited 1.1 s for a body of tiny chunks when each read was followed by gevent.sleep(0) alone.
            slow = time.perf_counter() - started > SLOW_READ_SECONDS
            let_other_connections_run(poll_seconds=POLL_SECONDS if slow else 0.0)
        return b"".join(pieces)

    def _check_framing(self) -> None:
        start = self._received_at_start
        received = bytes_received()
        if start is None or received is None:
            return
        allowed = FRAMING_ALLOWANCE_BYTES + (1 + FRAMING_SHARE) * self.bytes_read
        if received - start > allowed:
            raise malformed_body(  # the rest of the body is never read
                "Transfer-Encoding",
                f"{received - start:,} bytes arrived for {self.bytes_read:,} bytes of body: its chunks are "
                "too small (framing over a tenth of the data); send chunks of at least a few hundred bytes.",
            )

    def readline(self, size: int | None = -1) -> bytes:
        data = self._counted(self._stream.readline, size)
        if not data:  # a line may be shorter than asked for; only an empty one ends the body
            self.ended = True
            self._check_complete()
        return data

    def _counted(self, read: Callable[..., bytes], size: int | None) -> bytes:
        """``read(size)`` within the deadline, counted; the server's framing errors become a 400."""
        if self._before_first_read is not None:
            step, self._before_first_read = self._before_first_read, None
            step()
        try:
            due = self._due(size)
            if due is None or not under_gevent():
                data = read(size) if size is not None else read()
            else:
                data = self._read_by(due, read, size)
        except OSError:
            # The connection ended mid-body (gunicorn's NoMoreData for a chunked body without its last chunk;
            # a reset, whose answer is then lost anyway).
            ended = "the connection ended before the body did."
            raise malformed_body(framing_header(chunked=self._chunked), ended) from None
        except (ValueError, BodyTooSlow):
            raise  # the 408; a ValueError is a closed stream (the request is over)
        except Exception as error:  # gunicorn's InvalidChunkSize, ChunkMissingTerminator, …
            raise UnreadableBody() from error
        self.bytes_read += len(data)
        return data

    def __iter__(self) -> CountingInput:
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line


def framing_header(*, chunked: bool) -> str:
    """The header that frames a body, which its framing errors name."""
    return "Transfer-Encoding" if chunked else "Content-Length"


def malformed_body(header: str, message: str) -> Problem:
    """The 400 for a body whose framing fails (it ended early, its chunks are too small, its client left
    before sending it), naming the header that framed it; its connection is closed rather than read on."""
    close_connection_after_answer()
    return header_problem(400, header, message, slug="malformed-body", title="Malformed body")


def _declared_length(environ: dict[str, Any]) -> int | None:
    """The request's Content-Length when it is a plain count of bytes (the server refuses any other)."""
    header = environ.get("CONTENT_LENGTH", "")
    return int(header) if header.isascii() and header.isdigit() else None


def install_body_counting(app: Flask) -> None:
    """Wrap every request's input stream in a :class:`CountingInput`."""
    wsgi_app: Callable[[dict[str, Any], Any], Iterable[bytes]] = app.wsgi_app

    def counting_wsgi_app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        stream = environ.get("wsgi.input")
        if stream is not None:
            chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
            counted = CountingInput(
                stream, chunked=chunked, declared_length=None if chunked else _declared_length(environ)
            )
            environ["wsgi.input"] = counted
            environ[_ENVIRON_KEY] = counted
        return wsgi_app(environ, start_response)

    app.wsgi_app = counting_wsgi_app  # type: ignore[method-assign]


def counting_input(environ: dict[str, Any]) -> CountingInput | None:
    """The request's counted input stream (None when the app was built without body counting)."""
    counted: CountingInput | None = environ.get(_ENVIRON_KEY)
    return counted


def body_size() -> int:
    """Bytes of the current request's body as the service handles it: its inflated size when it came
    compressed (:func:`note_inflated_size`), else the bytes read (0 outside a request)."""
    if not has_request_context():
        return 0
    return body_size_of(request)


def body_size_of(current_request: Request) -> int:
    """:func:`body_size` for a request already in hand."""
    inflated: int | None = current_request.environ.get(_INFLATED_KEY)
    return inflated if inflated is not None else bytes_read(current_request)


def note_inflated_size(size: int) -> None:
    """Record the size the current request's compressed body inflated to (for :func:`body_size`)."""
    request.environ[_INFLATED_KEY] = size


def bytes_read(current_request: Request) -> int:
    """Bytes of ``current_request``'s body that the service has read so far (as sent: compressed or not)."""
    counted: CountingInput | None = current_request.environ.get(_ENVIRON_KEY)
    return counted.bytes_read if counted is not None else 0


def body_ends_here() -> bool:
    """Whether the body has no byte left after what was read (probes the raw stream for one more byte).

    For a chunked body read up to ``MAX_BODY_BYTES`` this tells a body of exactly the limit (accepted, as
    with a Content-Length) from a longer one cut short at the limit (refused).
    """
    counted: CountingInput | None = request.environ.get(_ENVIRON_KEY)
    stream = counted if counted is not None else request.environ.get("wsgi.input")
    return stream is None or stream.read(1) == b""


BODY_READ_SECONDS = "attention.body_read_seconds"  # the environ key: seconds spent reading the body


def read_body(req: flask.Request) -> bytes:
    """The whole request body, refused with 413 past ``MAX_BODY_BYTES`` (``MAX_CONTENT_LENGTH``)."""
    started = time.perf_counter()
    data = req.get_data(cache=True)
    # What the metrics' decode step leaves out (service.web.inference): kept in the environ, cheaper than g.
    environ = req.environ
    environ[BODY_READ_SECONDS] = environ.get(BODY_READ_SECONDS, 0.0) + time.perf_counter() - started
    limit = req.max_content_length
    if req.content_length is None and limit is not None and len(data) >= limit and not body_ends_here():
        # A chunked body has no Content-Length to refuse up front, and werkzeug stops reading it at
        # the limit: one more byte means it was cut short, so refuse it rather than parse it. A body of
        # exactly the limit is accepted, as it is with a Content-Length.
        raise RequestEntityTooLarge()
    return data


def _is_json(mimetype: str) -> bool:
    """``application/json`` or ``application/*+json`` (RFC 6839's structured syntax suffix)."""
    return mimetype == "application/json" or (
        mimetype.startswith("application/") and mimetype.endswith("+json")
    )


def require_media_type(req: flask.Request, accepted: tuple[str, ...], *, unlabelled: bool = False) -> None:
    """415 unless the body is labelled with one of ``accepted`` (``application/json`` admits RFC 6839's
    ``+json`` types too), or has no label where ``unlabelled`` allows it; the answer's ``Accept-Post`` lists
    ``accepted``. A body labelled as a form or as text is told how to label it with curl (issue #20)."""
    mimetype = req.mimetype
    if mimetype in FORM_SENDERS:
        sent = f"labels it {mimetype}, {FORM_SENDERS[mimetype]}; curl: -H 'Content-Type: application/json'"
    elif not (label := req.headers.get("Content-Type", "")).strip():
        if unlabelled:
            return
        sent = "sent no Content-Type"
    elif not mimetype:  # a label without a media type (";;;=="): not the same as none
        sent = f"sent a Content-Type without a media type, {shortened(label)!r}"
    elif mimetype in accepted or ("application/json" in accepted and _is_json(mimetype)):
        return
    else:
        sent = f"sent {mimetype}"
    listed = ", ".join(accepted)
    raise Problem(
        415,
        f"Send the request body as {listed} (this request {sent}).",
        slug="unsupported-media-type",
        headers={"Accept-Post": listed},
    )
