"""POST /v1/attention."""

from __future__ import annotations

from typing import Any

from flask import request

from service.protocols.declarations.attention import (
    AttentionRequestSchema,
    AttentionResponseSchema,
    attention_response,
)
from service.protocols.declarations.errors import COMPUTE_ERRORS
from service.protocols.v1.examples import ATTENTION_EXAMPLE_REQUEST, ATTENTION_EXAMPLE_RESPONSE
from service.protocols.v1.parsing import load_json_body
from service.requests import AttentionRequest
from service.web.admission import answered, run_admitted
from service.web.routes import Routes

routes = Routes("attention", __name__, url_prefix="/v1", description="Masked scaled dot-product attention.")
SCHEMA = AttentionRequestSchema()


@routes.post(
    "/attention",
    operation_id="attention",
    request=SCHEMA,
    request_example=ATTENTION_EXAMPLE_REQUEST,
    response=AttentionResponseSchema,
    response_example=ATTENTION_EXAMPLE_RESPONSE,
    errors=COMPUTE_ERRORS,
)
def attention_view() -> dict[str, Any]:
    """Scaled dot-product attention with optional mask, causal mask and bias.

    scores = Q Kᵀ · scale + bias, hidden scores set to minus infinity, a row-wise softmax gives the
    weights, and the output mixes the values with them.
    """
    typed: AttentionRequest = load_json_body(request, SCHEMA)
    return run_admitted(answered(typed, lambda result: attention_response(result, include=typed.include)))
