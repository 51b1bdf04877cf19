"""A JSON request body, from bytes to the typed request: 415 unless it is plain JSON, 400 unless it parses
(orjson), 413 past the limit, 422 with each field's messages unless the schema loads it."""

from __future__ import annotations

import json
from typing import Any

import flask
import marshmallow as ma
import orjson

from service.web.admission import decode_off_the_loop, room_for_parsing
from service.web.body import require_media_type
from service.web.encodings import read_decoded_body, request_coding
from service.web.problems import Problem, problem_from_validation_messages, refuse_many_unknown_fields


def load_json_body(req: flask.Request, schema: ma.Schema) -> Any:
    """``schema.load`` of the request's JSON body (for a request schema: the typed request).

    A large body is parsed and loaded off the worker's loop (service.web.admission.decode_off_the_loop).
    """
    require_json_body(req)
    body = read_decoded_body(req)
    try:
        with room_for_parsing(body):
            return decode_off_the_loop(lambda: _load(body, schema), body_bytes=len(body))
    except ma.ValidationError as error:
        raise problem_from_validation_messages(error.messages, schema) from None


def _load(body: bytes, schema: ma.Schema) -> Any:
    data = parse_json(body)
    if isinstance(data, dict):
        refuse_many_unknown_fields(data, schema)
    try:
        return schema.load(data)
    except ma.ValidationError as error:
        # Only the messages are read: without marshmallow's references to the parsed body, a large one is
        # freed as its decoding ends, while the garbage collector is still paused for it, rather than
        # traversed by the next collections until the refusal has been answered (0.3 s each, 16 MiB of []).
        error.data = error.valid_data = None
        raise


# Bodies orjson refuses are read again with the standard library up to this size. Its parse is one C call
# too, and slower (16 MiB of 0.5 in 1.2 s against 0.34 s), and the loop waits for the longest such call.
STANDARD_PARSE_BYTES = 1024 * 1024
_NON_FINITE = (b"NaN", b"Infinity", b"-Infinity")


def parse_json(data: bytes) -> Any:
    """Parse with orjson (several times faster than the standard library's ``json``).

    orjson refuses ``NaN``/``Infinity`` literals and numbers beyond float range outright. Many
    clients still send them, so on failure a body up to :data:`STANDARD_PARSE_BYTES` is read again with
    the standard library and, if that succeeds, handed on: the array fields then reject the non-finite
    values naming the field. A larger body gets orjson's 400, which names the place, as /v2 always does.
    """
    if not data.strip():
        raise _malformed("The request body is empty: send a JSON object.")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as fast_error:
        if str(fast_error).startswith("depth limit exceeded"):
            # orjson stops at 1024 levels; Python's json parses deeper on 3.13 than on 3.11, so without
            # this the same body would be a 400 on one Python and a 422 on the other.
            raise _malformed(f"The request body nests too deeply: {fast_error}.") from None
        if len(data) > STANDARD_PARSE_BYTES:
            # pos counts characters: a byte offset only while the text is ASCII
            non_finite = (
                data[fast_error.pos : fast_error.pos + 9].startswith(_NON_FINITE)
                if data.isascii()
                else any(literal in data for literal in _NON_FINITE)
            )
            hint = " JSON has no NaN or Infinity." if non_finite else ""
            raise _malformed(f"The request body is not valid JSON: {fast_error}.{hint}") from None
        try:
            return json.loads(data.decode("utf-8"))  # JSON on the wire is UTF-8 (RFC 8259), no BOM sniffing
        except (ValueError, RecursionError):
            raise _malformed(f"The request body is not valid JSON: {fast_error}.") from None


def _malformed(detail: str) -> Problem:
    return Problem(400, detail, slug="malformed-json")


def require_json_body(request: flask.Request) -> None:
    """415 for a body that is not JSON, or compressed other than as gzip or deflate (those are inflated
    within the body limit and the memory budget: service.web.encodings)."""
    request_coding(request)
    require_media_type(request, ("application/json",))
