"""Request-body parsing for flask-smorest's ``@blp.arguments``: orjson, with a slow path for errors."""

from __future__ import annotations

import json
from typing import Any, NoReturn

import flask
import marshmallow as ma
import orjson
from webargs.flaskparser import FlaskParser, abort
from werkzeug.exceptions import RequestEntityTooLarge

from service.web.body import body_ends_here
from service.web.problems import refuse_many_unknown_fields


def read_body(req: flask.Request) -> bytes:
    """The whole request body, refused with 413 past ``MAX_BODY_BYTES`` (``MAX_CONTENT_LENGTH``)."""
    data = req.get_data(cache=True)
    limit = req.max_content_length
    if req.content_length is None and limit is not None and len(data) >= limit and not body_ends_here():
        # A chunked body has no Content-Length to refuse up front, and werkzeug stops reading it at
        # the limit: one more byte means it was cut short, so refuse it rather than parse it. A body of
        # exactly the limit is accepted, as it is with a Content-Length.
        raise RequestEntityTooLarge()
    return data


class OrjsonParser(FlaskParser):
    """Parse JSON bodies with orjson (several times faster than the standard library's ``json``).

    orjson refuses ``NaN``/``Infinity`` literals and numbers beyond float range outright. Many
    clients still send them, so on failure the body is read again with the standard library and, if
    that succeeds, handed on: the array fields then reject the non-finite values naming the field.
    """

    def _raw_load_json(self, req: flask.Request) -> Any:
        # A body that is not JSON never gets here: the Blueprint answers it with 415 first.
        data = read_body(req)
        if not data.strip():
            abort(400, messages={"json": ["The request body is empty: send a JSON object."]})
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as fast_error:
            if str(fast_error).startswith("depth limit exceeded"):
                # orjson stops at 1024 levels; Python's json parses deeper on 3.13 than on 3.11, so without
                # this the same body would be a 400 on one Python and a 422 on the other.
                abort(400, messages={"json": [f"The request body nests too deeply: {fast_error}."]})
            try:
                return json.loads(
                    data.decode("utf-8")
                )  # JSON on the wire is UTF-8 (RFC 8259), no BOM sniffing
            except (ValueError, RecursionError):
                # answered here: webargs would take orjson's empty ``doc`` for an empty body
                self._handle_invalid_json_error(fast_error, req)

    def load_json(self, req: flask.Request, schema: ma.Schema) -> Any:
        data = super().load_json(req, schema)
        if isinstance(data, dict):
            refuse_many_unknown_fields(data, schema)
        return data

    def _handle_invalid_json_error(
        self, error: json.JSONDecodeError | UnicodeDecodeError, req: flask.Request, *args: Any, **kwargs: Any
    ) -> NoReturn:
        abort(400, exc=error, messages={"json": [f"The request body is not valid JSON: {error}."]})
