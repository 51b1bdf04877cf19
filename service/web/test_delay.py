"""TEST-ONLY: ``ENABLE_TEST_DELAY=1`` lets a request ask to be held ``X-Test-Delay`` seconds (at most 10).

Off by default and never to be turned on in production: it exists so the gunicorn tests can have a
request in flight while they send SIGTERM or count requests across workers.
"""

from __future__ import annotations

import logging
import math
import time

from flask import Flask, request

HEADER = "X-Test-Delay"
MAX_DELAY_SECONDS = 10.0

log = logging.getLogger(__name__)


def install_test_delay(app: Flask) -> None:
    """Sleep before answering requests that carry ``X-Test-Delay``, when the setting is on."""
    if not app.config.get("ENABLE_TEST_DELAY"):
        return

    @app.before_request
    def _delay() -> None:
        try:
            seconds = float(request.headers.get(HEADER, "0"))
        except ValueError:
            return
        if not math.isfinite(seconds) or seconds <= 0:
            return
        seconds = min(seconds, MAX_DELAY_SECONDS)
        log.warning("test delay: holding %s %s for %.2f s", request.method, request.path, seconds)
        time.sleep(seconds)
