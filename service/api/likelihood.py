"""POST /v1/log-likelihood."""

from __future__ import annotations

from typing import Any

from service.api.errors_doc import document_compute_errors
from service.api.examples import LIKELIHOOD_EXAMPLE_REQUEST, LIKELIHOOD_EXAMPLE_RESPONSE
from service.api.schemas.likelihood import (
    LikelihoodRequestSchema,
    LikelihoodResponseSchema,
    likelihood_response,
)
from service.requests import LikelihoodRequest
from service.web.admission import run_admitted
from service.web.blueprint import Blueprint

blp = Blueprint("likelihood", __name__, url_prefix="/v1", description="Log-likelihood of token sequences.")


@blp.route("/log-likelihood", methods=["POST"])
@blp.doc(operationId="logLikelihood")
@blp.arguments(LikelihoodRequestSchema(), example=LIKELIHOOD_EXAMPLE_REQUEST)
@blp.response(200, LikelihoodResponseSchema, example=LIKELIHOOD_EXAMPLE_RESPONSE)
@document_compute_errors(blp)
def likelihood_view(request: LikelihoodRequest) -> dict[str, Any]:
    """Per-token log-probabilities and ranks, and per-sequence log-likelihood, NLL and perplexity."""
    return likelihood_response(run_admitted(request))
