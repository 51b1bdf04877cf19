"""POST /v1/softmax."""

from __future__ import annotations

from typing import Any

from service.api.errors_doc import document_compute_errors
from service.api.examples import SOFTMAX_EXAMPLE_REQUEST, SOFTMAX_EXAMPLE_RESPONSE
from service.api.schemas.common import PRECISIONS
from service.api.schemas.softmax import SoftmaxRequestSchema, SoftmaxResponseSchema, softmax_response
from service.api.work import check_softmax_work
from service.kernels import softmax
from service.web.blueprint import Blueprint

blp = Blueprint(
    "softmax", __name__, url_prefix="/v1", description="Softmax with temperature, top-k and top-p."
)


@blp.route("/softmax", methods=["POST"])
@blp.arguments(SoftmaxRequestSchema(), example=SOFTMAX_EXAMPLE_REQUEST)
@blp.response(200, SoftmaxResponseSchema, example=SOFTMAX_EXAMPLE_RESPONSE)
@document_compute_errors(blp)
def softmax_view(args: dict[str, Any]) -> dict[str, Any]:
    """Probabilities over the last axis of the logits, after mask, temperature, top-k and top-p."""
    check_softmax_work(args["shape"])
    result = softmax(
        args["logits"],
        temperature=args["temperature"],
        mask=args.get("mask"),
        top_k=args.get("top_k"),
        top_p=args.get("top_p"),
        dtype=PRECISIONS[args["precision"]],
    )
    return softmax_response(result, include=args["include"])
