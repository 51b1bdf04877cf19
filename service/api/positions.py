"""POST /v1/positional-encoding."""

from __future__ import annotations

from typing import Any

from service.api.errors_doc import document_compute_errors
from service.api.examples import POSITIONAL_EXAMPLE_REQUEST, POSITIONAL_EXAMPLE_RESPONSE
from service.api.schemas.positions import (
    PositionalEncodingRequestSchema,
    PositionalEncodingResponseSchema,
    positional_encoding_response,
)
from service.requests import PositionalEncodingRequest
from service.web.admission import run_admitted
from service.web.blueprint import Blueprint

blp = Blueprint(
    "positional_encoding",
    __name__,
    url_prefix="/v1",
    description="Sinusoidal and rotary positional encodings.",
)


@blp.route("/positional-encoding", methods=["POST"])
@blp.doc(operationId="positionalEncoding")
@blp.arguments(PositionalEncodingRequestSchema(), example=POSITIONAL_EXAMPLE_REQUEST)
@blp.response(200, PositionalEncodingResponseSchema, example=POSITIONAL_EXAMPLE_RESPONSE)
@document_compute_errors(blp)
def positional_encoding_view(request: PositionalEncodingRequest) -> dict[str, Any]:
    """The sinusoidal table for some positions, or rotary embedding applied to rows at their positions."""
    return positional_encoding_response(run_admitted(request), include=request.include)
