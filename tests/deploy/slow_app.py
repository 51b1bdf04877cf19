"""The service plus a test-only delay: ``X-Test-Delay: <seconds>`` holds a request (at most 10 s).

gunicorn serves it as ``tests.deploy.slow_app:create_app()`` so the gunicorn tests can have a request in
flight while they send SIGTERM or spread requests over workers. It lives in the tests, never in
``service/``: the image cannot be configured into sleeping on a client's say-so.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from flask import Flask, request

from service import create_app as create_service_app

APP = "tests.deploy.slow_app:create_app()"
HEADER = "X-Test-Delay"
MAX_DELAY_SECONDS = 10.0

log = logging.getLogger(__name__)


def install_test_delay(app: Flask) -> None:
    """Sleep before answering requests with ``X-Test-Delay``; malformed or non-positive values are ignored."""

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


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    app = create_service_app(config)
    install_test_delay(app)
    return app
