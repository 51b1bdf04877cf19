"""POST /v1/attention."""

from __future__ import annotations

from typing import Any

from service.api.errors_doc import document_compute_errors
from service.api.examples import ATTENTION_EXAMPLE_REQUEST, ATTENTION_EXAMPLE_RESPONSE
from service.api.schemas.attention import AttentionRequestSchema, AttentionResponseSchema, attention_response
from service.requests import AttentionRequest
from service.web.admission import run_admitted
from service.web.blueprint import Blueprint

blp = Blueprint("attention", __name__, url_prefix="/v1", description="Masked scaled dot-product attention.")


@blp.route("/attention", methods=["POST"])
@blp.doc(operationId="attention")
@blp.arguments(AttentionRequestSchema(), example=ATTENTION_EXAMPLE_REQUEST)
@blp.response(200, AttentionResponseSchema, example=ATTENTION_EXAMPLE_RESPONSE)
@document_compute_errors(blp)
def attention_view(request: AttentionRequest) -> dict[str, Any]:
    """Scaled dot-product attention with optional mask, causal mask and bias.

    scores = Q Kᵀ · scale + bias, hidden scores set to minus infinity, a row-wise softmax gives the
    weights, and the output mixes the values with them.
    """
    return attention_response(run_admitted(request), include=request.include)
