"""The request body as the service actually read it: counted, and unreadable bodies answered with 400.

The WSGI input stream is wrapped before Flask sees it, so the access log and the body-size histogram can
report the bytes the service read rather than the ``Content-Length`` a client claimed (which may be a lie,
or 2^64). A body that cannot be read — a malformed chunked encoding, which gunicorn reports by raising its
own parse errors from ``read`` — becomes a 400 naming the cause instead of an unhandled 500.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import IO, Any

from flask import Flask, has_request_context, request
from flask.wrappers import Request
from werkzeug.exceptions import BadRequest

_ENVIRON_KEY = "attention.body"


class UnreadableBody(BadRequest):
    """The body's framing is broken (e.g. a chunk size that is not hexadecimal)."""

    description = "The request body could not be read: its transfer encoding is malformed."


class CountingInput:
    """``wsgi.input`` that counts what it hands out; framing errors from the server become a 400."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self.bytes_read = 0

    def _count(self, data: bytes) -> bytes:
        self.bytes_read += len(data)
        return data

    def read(self, size: int | None = -1) -> bytes:
        try:
            return self._count(self._stream.read(size) if size is not None else self._stream.read())
        except (OSError, ValueError):
            raise  # a disconnect: werkzeug's LimitedStream turns these into ClientDisconnected (400)
        except Exception as error:  # gunicorn's InvalidChunkSize, ChunkMissingTerminator, …
            raise UnreadableBody() from error

    def readline(self, size: int | None = -1) -> bytes:
        try:
            return self._count(self._stream.readline(size) if size is not None else self._stream.readline())
        except (OSError, ValueError):
            raise
        except Exception as error:
            raise UnreadableBody() from error

    def __iter__(self) -> CountingInput:
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line


def install_body_counting(app: Flask) -> None:
    """Wrap every request's input stream in a :class:`CountingInput`."""
    wsgi_app: Callable[[dict[str, Any], Any], Iterable[bytes]] = app.wsgi_app

    def counting_wsgi_app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        stream = environ.get("wsgi.input")
        if stream is not None:
            counted = CountingInput(stream)
            environ["wsgi.input"] = counted
            environ[_ENVIRON_KEY] = counted
        return wsgi_app(environ, start_response)

    app.wsgi_app = counting_wsgi_app  # type: ignore[method-assign]


def body_bytes_read() -> int:
    """Bytes of the current request's body that the service has read so far (0 outside a request)."""
    if not has_request_context():
        return 0
    return bytes_read(request)


def bytes_read(current_request: Request) -> int:
    """:func:`body_bytes_read` for a request already in hand."""
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
