"""POST /v1/softmax."""

from __future__ import annotations

from typing import Any

from flask import request

from service.protocols.declarations.errors import COMPUTE_ERRORS
from service.protocols.declarations.softmax import (
    SoftmaxRequestSchema,
    SoftmaxResponseSchema,
    softmax_response,
)
from service.protocols.v1.examples import SOFTMAX_EXAMPLE_REQUEST, SOFTMAX_EXAMPLE_RESPONSE
from service.protocols.v1.parsing import load_json_body
from service.requests import SoftmaxRequest
from service.web.admission import answered, run_admitted
from service.web.routes import Routes

routes = Routes(
    "softmax", __name__, url_prefix="/v1", description="Softmax with temperature, top-k, top-p and min-p."
)
SCHEMA = SoftmaxRequestSchema()


@routes.post(
    "/softmax",
    operation_id="softmax",
    request=SCHEMA,
    request_example=SOFTMAX_EXAMPLE_REQUEST,
    response=SoftmaxResponseSchema,
    response_example=SOFTMAX_EXAMPLE_RESPONSE,
    errors=COMPUTE_ERRORS,
)
def softmax_view() -> dict[str, Any]:
    """Probabilities over the last axis of the logits, after mask, temperature, top-k, top-p and min-p."""
    typed: SoftmaxRequest = load_json_body(request, SCHEMA)
    return run_admitted(answered(typed, lambda result: softmax_response(result, include=typed.include)))
