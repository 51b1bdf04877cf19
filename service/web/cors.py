"""CORS for widgets on other origins, by flask-cors: origins from ``CORS_ORIGINS``, no credentials."""

from __future__ import annotations

from flask import Flask
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
