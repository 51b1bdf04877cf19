"""One JSON line per request on stdout: method, path, status, duration, bytes and the request id.

The line is built with orjson and written straight to stdout, without ``logging``'s record and formatter
machinery (it costs more than the rest of the line). Every request gets its line: a value orjson cannot
write (an integer beyond 64 bits, a lone surrogate) is written as a string and named in ``unencodable``,
so a hostile header cannot suppress the record of its request. A streamed answer is logged when its last
byte has been handed to the server, with the bytes actually sent.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
from flask import Flask, Response
from flask.wrappers import Request

from service.web.body import bytes_read
from service.web.hooks import RequestGlobals, request_steps
from service.web.request_clock import seconds_since_start

ACCESS_LOGGER = "service.access"
# A claimed Content-Length is logged as it came only when it fits a signed 64-bit integer.
_LARGEST_LOGGED_INT = 2**63 - 1


def _timestamp(now: float) -> str:
    seconds = int(now)
    return _whole_second(seconds) + f".{int((now - seconds) * 1000):03d}Z"


@functools.lru_cache(maxsize=4)
def _whole_second(seconds: int) -> str:
    # strftime once per second rather than once per line: it cost more than the rest of the timestamp
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def _encodable(value: Any) -> tuple[Any, bool]:
    """``value`` unchanged when orjson can write it, else a string standing for it (and True)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _LARGEST_LOGGED_INT:
        return str(value), True
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8"), True
    return value, False


def write_line(fields: dict[str, Any], *, level: str = "info", message: str = "request") -> None:
    """Write ``{"time", "level", "logger", "message", **fields}`` as one stdout line, whatever the fields."""
    line: dict[str, Any] = {
        "time": _timestamp(time.time()),
        "level": level,
        "logger": ACCESS_LOGGER,
        "message": message,
        **fields,
    }
    try:
        encoded = orjson.dumps(line)
    except TypeError:  # orjson.JSONEncodeError: a field it cannot write
        unencodable = []
        for name, value in list(line.items()):
            line[name], replaced = _encodable(value)
            if replaced:
                unencodable.append(name)
        line["unencodable"] = unencodable
        encoded = orjson.dumps(line, default=repr)
    try:
        sys.stdout.write(encoded.decode() + "\n")  # sys.stdout at the time: test runners swap it
        sys.stdout.flush()
    except (OSError, ValueError):  # a pipe gone, a closed stream: as logging's handlers do, the line is lost
        _report_unwritable_log()  # and the answer is not (it would have been a 500, or a streamed one cut)


def _report_unwritable_log() -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write("service.access: the access log line could not be written to stdout\n")


def _declared_length(request: Request, fields: dict[str, Any]) -> None:
    """Note a Content-Length that differs from the bytes read (clamped to 2^63 - 1 and flagged)."""
    declared = request.content_length
    if declared is not None and declared != fields["request_bytes"]:
        fields["declared_bytes"] = min(declared, _LARGEST_LOGGED_INT)
        if declared > _LARGEST_LOGGED_INT:
            fields["declared_bytes_clamped"] = True


class _CountedBody:
    """A streamed answer's iterable that writes the access line once the server is done with it: the bytes
    the server took (a piece counts once the server asks for the next one, or ends), and ``cut_short`` when
    it stopped before the last piece (a client gone, or one that stopped reading or read too slowly:
    ANSWER_TIMEOUT_SECONDS, ANSWER_MIN_BYTES_PER_SECOND)."""

    def __init__(
        self, pieces: Iterable[bytes] | Iterable[str], fields: dict[str, Any], started: float
    ) -> None:
        self._pieces = pieces
        self._fields = fields
        self._started = started
        self._sent = 0
        self._whole = False

    def __iter__(self) -> Iterator[bytes]:
        for piece in self._pieces:
            data = piece.encode() if isinstance(piece, str) else piece
            yield data
            self._sent += len(data)  # the server has written it: it asks for the next piece
        self._whole = True

    def close(self) -> None:
        close = getattr(self._pieces, "close", None)
        if close is not None:
            close()
        self._fields["duration_ms"] = round((time.perf_counter() - self._started) * 1000, 3)
        self._fields["bytes"] = self._sent
        if not self._whole:
            self._fields["cut_short"] = True
        write_line(self._fields)


def install_access_log(app: Flask) -> None:
    """When ``ACCESS_LOG`` is on, log every request once it has its response."""
    if app.config["ACCESS_LOG"]:
        request_steps(app).add_after(_log)


def _log(request: Request, g: RequestGlobals, response: Response) -> Response:
    duration = seconds_since_start(g) or 0.0
    fields: dict[str, Any] = {
        "method": request.method,
        "path": request.path,
        "status": response.status_code,
        "duration_ms": round(duration * 1000, 3),
        "bytes": 0,
        "request_bytes": bytes_read(request),
        "request_id": getattr(g, "request_id", None),
        "pid": os.getpid(),
    }
    trace_id = getattr(g, "trace_id", None)  # set by service.web.tracing when a span records
    if trace_id is not None:
        fields["trace_id"] = trace_id
    _declared_length(request, fields)
    if response.is_streamed and not response.direct_passthrough:
        fields["streamed"] = True
        started = time.perf_counter() - duration
        response.response = _CountedBody(response.response, fields, started)
        return response
    fields["bytes"] = response.calculate_content_length() or 0
    write_line(fields)
    return response
