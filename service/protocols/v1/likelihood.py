"""POST /v1/log-likelihood."""

from __future__ import annotations

from typing import Any

from flask import request

from service.protocols.declarations.errors import COMPUTE_ERRORS
from service.protocols.declarations.likelihood import (
    LikelihoodRequestSchema,
    LikelihoodResponseSchema,
    likelihood_response,
)
from service.protocols.v1.examples import LIKELIHOOD_EXAMPLE_REQUEST, LIKELIHOOD_EXAMPLE_RESPONSE
from service.protocols.v1.parsing import load_json_body
from service.requests import LikelihoodRequest
from service.web.admission import answered, run_admitted
from service.web.routes import Routes

routes = Routes("likelihood", __name__, url_prefix="/v1", description="Log-likelihood of token sequences.")
SCHEMA = LikelihoodRequestSchema()


@routes.post(
    "/log-likelihood",
    operation_id="logLikelihood",
    request=SCHEMA,
    request_example=LIKELIHOOD_EXAMPLE_REQUEST,
    response=LikelihoodResponseSchema,
    response_example=LIKELIHOOD_EXAMPLE_RESPONSE,
    errors=COMPUTE_ERRORS,
)
def likelihood_view() -> dict[str, Any]:
    """Per-token log-probabilities and ranks, and per-sequence log-likelihood, NLL and perplexity."""
    typed: LikelihoodRequest = load_json_body(request, SCHEMA)
    return run_admitted(answered(typed, likelihood_response))
