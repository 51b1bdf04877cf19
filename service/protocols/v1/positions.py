"""POST /v1/positional-encoding."""

from __future__ import annotations

from typing import Any

from flask import request

from service.protocols.declarations.errors import COMPUTE_ERRORS
from service.protocols.declarations.positions import (
    PositionalEncodingRequestSchema,
    PositionalEncodingResponseSchema,
    positional_encoding_response,
)
from service.protocols.v1.examples import POSITIONAL_EXAMPLE_REQUEST, POSITIONAL_EXAMPLE_RESPONSE
from service.protocols.v1.parsing import load_json_body
from service.requests import PositionalEncodingRequest
from service.web.admission import answered, run_admitted
from service.web.routes import Routes

routes = Routes(
    "positional_encoding",
    __name__,
    url_prefix="/v1",
    description="Sinusoidal and rotary positional encodings.",
)
SCHEMA = PositionalEncodingRequestSchema()


@routes.post(
    "/positional-encoding",
    operation_id="positionalEncoding",
    request=SCHEMA,
    request_example=POSITIONAL_EXAMPLE_REQUEST,
    response=PositionalEncodingResponseSchema,
    response_example=POSITIONAL_EXAMPLE_RESPONSE,
    errors=COMPUTE_ERRORS,
)
def positional_encoding_view() -> dict[str, Any]:
    """The sinusoidal table for some positions, or rotary embedding applied to rows at their positions."""
    typed: PositionalEncodingRequest = load_json_body(request, SCHEMA)
    return run_admitted(
        answered(typed, lambda result: positional_encoding_response(result, include=typed.include))
    )
