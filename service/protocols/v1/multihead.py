"""POST /v1/multi-head-attention."""

from __future__ import annotations

from typing import Any

from flask import request

from service.protocols.declarations.errors import COMPUTE_ERRORS
from service.protocols.declarations.multihead import (
    MultiHeadRequestSchema,
    MultiHeadResponseSchema,
    multi_head_response,
)
from service.protocols.v1.examples import MULTI_HEAD_EXAMPLE_REQUEST, MULTI_HEAD_EXAMPLE_RESPONSE
from service.protocols.v1.parsing import load_json_body
from service.requests import MultiHeadRequest
from service.web.admission import answered, run_admitted
from service.web.routes import Routes

routes = Routes(
    "multi_head_attention", __name__, url_prefix="/v1", description="A multi-head attention layer."
)
SCHEMA = MultiHeadRequestSchema()


@routes.post(
    "/multi-head-attention",
    operation_id="multiHeadAttention",
    request=SCHEMA,
    request_example=MULTI_HEAD_EXAMPLE_REQUEST,
    response=MultiHeadResponseSchema,
    response_example=MULTI_HEAD_EXAMPLE_RESPONSE,
    errors=COMPUTE_ERRORS,
)
def multi_head_attention_view() -> dict[str, Any]:
    """A multi-head attention layer: projections, attention per head, concatenation, output projection.

    Q = query @ w_q + b_q (and K, V likewise) split into heads; each head is /v1/attention with every
    option given; the heads' outputs are concatenated and projected by w_o. num_kv_heads < num_heads
    shares key/value heads (grouped-query attention).
    """
    typed: MultiHeadRequest = load_json_body(request, SCHEMA)
    return run_admitted(answered(typed, lambda result: multi_head_response(result, include=typed.include)))
