"""Answers the server writes itself, instead of the app: problem+json, logged like the app's.

gunicorn answers malformed HTTP (and a worker that timed out) on its own (service/server/gunicorn_settings.py
routes those answers here), and the worker answers a plain HTTP request to a TLS port (service/server/tls.py),
so every answer, whoever writes it, is a problem document with a request id, the CORS headers a page needs to
read it when every origin is allowed, and one JSON access-log line on stdout (unless ``ACCESS_LOG`` is off).
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import json
import os
import time
import uuid
from collections.abc import Callable, Mapping

from service.settings import Settings

PROBLEM_TYPE_BASE = "urn:attention-service:problem:"


def problem_bytes(
    status: int,
    reason: str,
    detail: str,
    *,
    slug: str | None = None,
    headers: Mapping[str, str] | None = None,
    title: str | None = None,
) -> tuple[bytes, str]:
    """The whole HTTP answer (``Connection: close``) for a problem, and the request id it carries: ``reason``
    is the status line's phrase, and the problem's title unless ``title`` is given (the app's 503s are
    titled ``Overloaded`` under a ``Service Unavailable`` status line)."""
    request_id = uuid.uuid4().hex
    body = json.dumps(
        {
            "type": PROBLEM_TYPE_BASE + slug if slug else "about:blank",
            "title": title or reason,
            "status": status,
            "detail": detail or reason,
            "request_id": request_id,
            # The Open Inference Protocol's member, which the app adds on /v2: the server writes these before
            # (or without) knowing the path, and a /v2 client reads only this one.
            "error": detail or reason,
        }
    ).encode()
    every_origin = [o.strip() for o in os.environ.get("CORS_ORIGINS", "*").split(",") if o.strip()] == ["*"]
    cors = (
        "Access-Control-Allow-Origin: *\r\nAccess-Control-Expose-Headers: X-Request-ID, Retry-After\r\n"
        if every_origin
        else ""
    )
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    # Date, as in the app's answers: RFC 9110 (section 6.6.1) wants it in every 4xx from a server with a clock
    date = email.utils.formatdate(usegmt=True)
    head = (
        f"HTTP/1.1 {status} {reason}\r\nDate: {date}\r\nConnection: close\r\nX-Request-ID: {request_id}\r\n"
        f"{cors}{extra}"
        f"Content-Type: application/problem+json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body, request_id


def log_answer(
    status: int, size: int, request_id: str, *, method: str | None = None, path: str | None = None
) -> None:
    """The access-log line of an answer the server wrote itself (the app logs its own, in the same shape),
    unless ``ACCESS_LOG`` turns the log off."""
    if not _access_log_on():
        return
    now = time.time()
    line = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z",
        "level": "info",
        "logger": "service.access",
        "message": "request",
        "method": method,  # None: gunicorn could not parse the request, gave up on it, or it was not HTTPS
        "path": path,
        "status": status,
        "bytes": size,
        "request_bytes": 0,
        "request_id": request_id,
        "pid": os.getpid(),
        "answered_by": "gunicorn",
    }
    # A line that cannot be written (a pipe gone) is lost, as the app's are, and costs no answer.
    with contextlib.suppress(OSError, ValueError):
        print(json.dumps(line, separators=(",", ":")), flush=True)


@functools.cache
def _access_log_on() -> bool:
    """``ACCESS_LOG``, read once per process by the app's own rule for it: one log, one switch. Only that
    setting is read (reading them all would read ``API_KEYS_FILE``, which may have gone since the start)."""
    only = {name: value for name, value in os.environ.items() if name == "ACCESS_LOG"}
    return Settings.from_env(only).access_log


def write_problem(write: Callable[[bytes], object], status: int, reason: str, detail: str) -> None:
    """Write the whole answer for a problem with ``write``, log it and count it in the HTTP metrics, as the
    app's are (the answer says ``Connection: close``: the caller closes the connection after it). Its request
    matched no route, and its method is unknown (``other``): gunicorn could not parse it, or it was not
    HTTPS."""
    # Imported here, in the worker answering: gunicorn_settings imports this module before it sets
    # PROMETHEUS_MULTIPROC_DIR, and prometheus_client reads that once, as it is first imported.
    from service.web.metrics import OTHER, UNMATCHED, count_answer

    answer, request_id = problem_bytes(status, reason, detail)
    write(answer)
    count_answer(UNMATCHED, OTHER, status, None, 0)  # first: whatever happens to its log line, it is counted
    log_answer(status, len(answer) - answer.index(b"\r\n\r\n") - 4, request_id)
