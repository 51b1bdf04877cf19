"""Fixtures as in Flask's tutorial: ``app`` and ``client``.

``client`` checks every exchange against the committed ``openapi.yaml`` with openapi-core: every
response must match the contract, and every request the server accepted must match it too.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import settings
from openapi_core import Config, OpenAPI
from openapi_core.contrib.werkzeug import WerkzeugOpenAPIRequest, WerkzeugOpenAPIResponse
from werkzeug.test import TestResponse

from service import create_app

CONTRACT_PATH = Path(__file__).resolve().parent.parent / "openapi.yaml"

# CI replays the same examples every run, so a red build is reproducible rather than luck; a local run
# draws new examples each time and keeps the ones that failed (.hypothesis/).
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")


@cache
def contract() -> OpenAPI:
    text = {media_type: bytes.decode for media_type in ("text/html", "text/javascript", "text/css")}
    # Binary bodies are declared `type: string, format: binary` (what generators read as raw bytes); read
    # as latin-1, each octet is one character of that string.
    octets = {"application/octet-stream": lambda body: body.decode("latin-1")}
    config = Config(extra_media_type_deserializers={"application/problem+json": json.loads, **text, **octets})
    return OpenAPI.from_file_path(str(CONTRACT_PATH), config=config)


class ContractCheckingClient(FlaskClient):
    """A test client that validates each request/response pair against the contract."""

    def open(self, *args: Any, **kwargs: Any) -> TestResponse:
        response = super().open(*args, **kwargs)
        stream = response.request.environ["wsgi.input"]
        if hasattr(stream, "seek"):
            stream.seek(0)  # the app consumed the body; openapi-core reads it again
        request = WerkzeugOpenAPIRequest(response.request)
        method = response.request.method
        # CORS preflights (OPTIONS) are answered by flask-cors and are not API operations.
        if method != "OPTIONS" and self.application.url_map.bind("localhost").test(
            response.request.path, method
        ):
            if response.status_code < 400:
                contract().validate_request(request)
            contract().validate_response(request, WerkzeugOpenAPIResponse(response))
        return response


@pytest.fixture
def app() -> Flask:
    app = create_app({"TESTING": True})
    app.test_client_class = ContractCheckingClient
    return app


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()
