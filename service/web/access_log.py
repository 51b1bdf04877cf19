"""One JSON line per request on stdout: method, path, status, duration, bytes and the request id."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any, TextIO

from flask import Flask, Response, request

from service.web.json_provider import dumps_bytes
from service.web.request_clock import request_seconds
from service.web.request_id import current_request_id

ACCESS_LOGGER = "service.access"

# Attributes every LogRecord has; anything else was passed with ``extra=`` and becomes a JSON member.
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """``{"time": …, "level": …, "logger": …, "message": …, **extra}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        body.update({k: v for k, v in vars(record).items() if k not in _RECORD_ATTRIBUTES})
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return dumps_bytes(body).decode()


JsonFormatter.converter = time.gmtime


class StdoutHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stdout`` is at the time (test runners swap it)."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    @property
    def stream(self) -> TextIO:
        return sys.stdout

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def _access_logger() -> logging.Logger:
    logger = logging.getLogger(ACCESS_LOGGER)
    if not logger.handlers:  # once per process, however many apps are built
        handler = StdoutHandler()
        handler.setFormatter(JsonFormatter())
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False  # the line is complete; a root handler would print it twice
    return logger


def install_access_log(app: Flask) -> None:
    """When ``ACCESS_LOG`` is on, log every request once it has its response."""
    logger = _access_logger()
    if not app.config["ACCESS_LOG"]:
        return

    @app.after_request
    def _log(response: Response) -> Response:
        duration = request_seconds() or 0.0
        logger.info(
            "request",
            extra={
                "method": request.method,
                "path": request.path,
                "status": response.status_code,
                "duration_ms": round(duration * 1000, 3),
                "bytes": response.calculate_content_length() or 0,
                "request_bytes": request.content_length or 0,
                "request_id": current_request_id(),
                "pid": os.getpid(),
            },
        )
        return response
