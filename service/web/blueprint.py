"""The Blueprint every endpoint uses: orjson body parsing and a 415 for bodies that are not JSON."""

from __future__ import annotations

from typing import Any

import flask_smorest
from flask import request
from webargs import core

from service.web.parsing import OrjsonParser
from service.web.problems import Problem
from service.web.statuses import status_name


class Blueprint(flask_smorest.Blueprint):  # type: ignore[misc]
    """A flask-smorest Blueprint whose JSON bodies are parsed by orjson."""

    ARGUMENTS_PARSER = OrjsonParser()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.before_request(_require_json_body)

    def arguments(self, schema: Any, **kwargs: Any) -> Any:
        """flask-smorest's ``arguments``, documenting its 422 under the contract's own response name.

        flask-smorest names it ``http.HTTPStatus(422).name``, which Python 3.13 renamed.
        """
        decorate = super().arguments(schema, **kwargs)
        status = kwargs.get("error_status_code", self.ARGUMENTS_PARSER.DEFAULT_VALIDATION_STATUS)

        def decorator(view: Any) -> Any:
            view = decorate(view)
            view._apidoc["arguments"]["responses"][status] = status_name(status)
            return view

        return decorator


def _require_json_body() -> None:
    if request.method not in ("POST", "PUT", "PATCH"):
        return
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        # Bodies are small JSON under MAX_BODY_BYTES and our clients send them plain; decoding gzip would
        # add a decompression bomb to guard against for no gain. Reading the compressed bytes as JSON (as
        # before) gave a misleading 400, or silently wrong data. RFC 7694: 415 with the encodings accepted.
        raise Problem(
            415,
            f"Send the request body without a Content-Encoding (this request sent {encoding[:40]!r}); "
            "this service does not decode compressed bodies.",
            slug="unsupported-media-type",
            headers={"Accept-Encoding": "identity"},
        )
    if not core.is_json(request.mimetype):
        sent = request.mimetype or "no Content-Type"
        raise Problem(
            415,
            f"Send the request body as application/json (this request sent {sent}).",
            slug="unsupported-media-type",
            headers={"Accept-Post": "application/json"},
        )
