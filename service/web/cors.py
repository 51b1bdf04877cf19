"""CORS for widgets on other origins, by flask-cors: origins from ``CORS_ORIGINS``, no credentials."""

from __future__ import annotations

from flask import Flask, Response
from flask_cors import CORS


def enable_cors(app: Flask) -> None:
    """Answer preflights (cached ``CORS_MAX_AGE`` seconds) and mark responses for the allowed origins."""
    CORS(
        app,
        origins=app.config["CORS_ORIGINS"],
        methods=["GET", "POST", "OPTIONS"],
        allow_headers=["Content-Type", "Authorization", "X-Request-ID"],
        expose_headers=["X-Request-ID"],
        max_age=app.config["CORS_MAX_AGE"],
        supports_credentials=False,
        send_wildcard=app.config["CORS_ORIGINS"] == ["*"],  # "*" rather than an echo: cacheable by any proxy
    )
    if app.config["CORS_ORIGINS"] != ["*"]:
        app.after_request(_vary_on_origin)


def _vary_on_origin(response: Response) -> Response:
    # With a list of origins the CORS headers depend on the request's Origin, so a shared cache must
    # keep one copy per Origin (flask-cors says so only on the responses it decorates).
    response.vary.add("Origin")
    return response
