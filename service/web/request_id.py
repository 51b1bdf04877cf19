"""``X-Request-ID``: taken from the caller when it is sane, generated otherwise, echoed in the response."""

from __future__ import annotations

import re
import uuid

from flask import Flask, Response, g, has_request_context, request

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
    return uuid.uuid4().hex


def install_request_ids(app: Flask) -> None:
    """Give every request an id before anything else runs, and send it back on every response."""

    @app.before_request
    def _assign() -> None:
        g.request_id = accept_or_generate(request.headers.get(HEADER))

    @app.after_request
    def _echo(response: Response) -> Response:
        request_id = current_request_id()
        if request_id is not None:
            response.headers[HEADER] = request_id
        return response
