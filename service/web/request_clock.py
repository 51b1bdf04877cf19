"""When the request started: one clock that the access log and the latency metric both read."""

from __future__ import annotations

import time

from flask import Flask, g


def install_request_clock(app: Flask) -> None:
    """Note the start of every request before any other hook runs."""

    @app.before_request
    def _start_clock() -> None:
        g.request_started = time.perf_counter()


def request_seconds() -> float | None:
    """Seconds since the request started, or None if the clock never started (a routing failure)."""
    started: float | None = g.get("request_started")
    return None if started is None else time.perf_counter() - started
