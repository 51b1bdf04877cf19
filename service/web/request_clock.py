"""When the request started: one clock that the access log and the latency metric both read."""

from __future__ import annotations

import time

from flask import Flask, g
from flask.wrappers import Request

from service.web.hooks import RequestGlobals, request_steps


def install_request_clock(app: Flask) -> None:
    """Note the start of every request before any other step runs."""
    request_steps(app).add_before(_start_clock)


def _start_clock(request: Request, g: RequestGlobals) -> None:
    g.request_started = time.perf_counter()


def request_seconds() -> float | None:
    """Seconds since the request started, or None if the clock never started (a routing failure)."""
    return seconds_since_start(g)


def seconds_since_start(request_globals: RequestGlobals) -> float | None:
    """:func:`request_seconds` for a request's ``g`` already in hand."""
    started: float | None = getattr(request_globals, "request_started", None)
    return None if started is None else time.perf_counter() - started
