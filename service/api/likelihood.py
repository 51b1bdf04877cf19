"""POST /v1/log-likelihood."""

from __future__ import annotations

from typing import Any

from service.api.errors_doc import document_compute_errors
from service.api.examples import LIKELIHOOD_EXAMPLE_REQUEST, LIKELIHOOD_EXAMPLE_RESPONSE
from service.api.schemas.common import PRECISIONS
from service.api.schemas.likelihood import (
    LikelihoodRequestSchema,
    LikelihoodResponseSchema,
    likelihood_response,
)
from service.api.work import check_likelihood_work
from service.kernels import sequence_log_likelihood
from service.web.blueprint import Blueprint

blp = Blueprint("likelihood", __name__, url_prefix="/v1", description="Log-likelihood of token sequences.")


@blp.route("/log-likelihood", methods=["POST"])
@blp.arguments(LikelihoodRequestSchema(), example=LIKELIHOOD_EXAMPLE_REQUEST)
@blp.response(200, LikelihoodResponseSchema, example=LIKELIHOOD_EXAMPLE_RESPONSE)
@document_compute_errors(blp)
def likelihood_view(args: dict[str, Any]) -> dict[str, Any]:
    """Per-token log-probabilities and ranks, and per-sequence log-likelihood, NLL and perplexity."""
    batch, length, vocabulary = args["shape"]
    check_likelihood_work(batch, length, vocabulary, top_logprobs=args["top_logprobs"])
    result = sequence_log_likelihood(
        args["logits"],
        args["targets"],
        shift=args["shift"],
        ignore_index=args["ignore_index"],
        temperature=args["temperature"],
        top_logprobs=args["top_logprobs"],
        dtype=PRECISIONS[args["precision"]],
    )
    return likelihood_response(result)
