"""POST /v1/softmax."""

from __future__ import annotations

from typing import Any

from service.api.errors_doc import document_compute_errors
from service.api.examples import SOFTMAX_EXAMPLE_REQUEST, SOFTMAX_EXAMPLE_RESPONSE
from service.api.schemas.softmax import SoftmaxRequestSchema, SoftmaxResponseSchema, softmax_response
from service.requests import SoftmaxRequest
from service.web.admission import run_admitted
from service.web.blueprint import Blueprint

blp = Blueprint(
    "softmax", __name__, url_prefix="/v1", description="Softmax with temperature, top-k, top-p and min-p."
)


@blp.route("/softmax", methods=["POST"])
@blp.doc(operationId="softmax")
@blp.arguments(SoftmaxRequestSchema(), example=SOFTMAX_EXAMPLE_REQUEST)
@blp.response(200, SoftmaxResponseSchema, example=SOFTMAX_EXAMPLE_RESPONSE)
@document_compute_errors(blp)
def softmax_view(request: SoftmaxRequest) -> dict[str, Any]:
    """Probabilities over the last axis of the logits, after mask, temperature, top-k, top-p and min-p."""
    return softmax_response(run_admitted(request), include=request.include)
