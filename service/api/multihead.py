"""POST /v1/multi-head-attention."""

from __future__ import annotations

from typing import Any

from service.api.errors_doc import document_compute_errors
from service.api.examples import MULTI_HEAD_EXAMPLE_REQUEST, MULTI_HEAD_EXAMPLE_RESPONSE
from service.api.schemas.multihead import MultiHeadRequestSchema, MultiHeadResponseSchema, multi_head_response
from service.requests import MultiHeadRequest
from service.web.admission import run_admitted
from service.web.blueprint import Blueprint

blp = Blueprint(
    "multi_head_attention", __name__, url_prefix="/v1", description="A multi-head attention layer."
)


@blp.route("/multi-head-attention", methods=["POST"])
@blp.doc(operationId="multiHeadAttention")
@blp.arguments(MultiHeadRequestSchema(), example=MULTI_HEAD_EXAMPLE_REQUEST)
@blp.response(200, MultiHeadResponseSchema, example=MULTI_HEAD_EXAMPLE_RESPONSE)
@document_compute_errors(blp)
def multi_head_attention_view(request: MultiHeadRequest) -> dict[str, Any]:
    """A multi-head attention layer: projections, attention per head, concatenation, output projection.

    Q = query @ w_q + b_q (and K, V likewise) split into heads; each head is /v1/attention with every
    option given; the heads' outputs are concatenated and projected by w_o. num_kv_heads < num_heads
    shares key/value heads (grouped-query attention).
    """
    return multi_head_response(run_admitted(request), include=request.include)
