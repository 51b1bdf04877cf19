"""POST /v1/attention."""

from __future__ import annotations

from typing import Any

from service.api.errors_doc import document_compute_errors
from service.api.examples import ATTENTION_EXAMPLE_REQUEST, ATTENTION_EXAMPLE_RESPONSE
from service.api.schemas.attention import AttentionRequestSchema, AttentionResponseSchema, attention_response
from service.api.schemas.common import PRECISIONS
from service.api.work import check_attention_work
from service.kernels import attention
from service.web.blueprint import Blueprint

blp = Blueprint("attention", __name__, url_prefix="/v1", description="Masked scaled dot-product attention.")


@blp.route("/attention", methods=["POST"])
@blp.arguments(AttentionRequestSchema(), example=ATTENTION_EXAMPLE_REQUEST)
@blp.response(200, AttentionResponseSchema, example=ATTENTION_EXAMPLE_RESPONSE)
@document_compute_errors(blp)
def attention_view(args: dict[str, Any]) -> dict[str, Any]:
    """Scaled dot-product attention with optional mask, causal mask and bias.

    scores = Q Kᵀ · scale + bias, hidden scores set to minus infinity, a row-wise softmax gives the
    weights, and the output mixes the values with them.
    """
    shapes = args["shapes"]
    include = set(args["include"])
    check_attention_work(shapes, include=include, empty_rows=args["empty_rows"])
    result = attention(
        args["query"],
        args["key"],
        args["value"],
        mask=args.get("mask"),
        bias=args.get("bias"),
        causal=args["causal"],
        causal_alignment=args["causal_alignment"],
        scale=args.get("scale"),
        empty_rows=args["empty_rows"],
        return_weights="weights" in include,
        return_scores="scores" in include,
        return_logsumexp="logsumexp" in include,
        dtype=PRECISIONS[args["precision"]],
    )
    return attention_response(result, include=include)
