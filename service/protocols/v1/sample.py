"""POST /v1/sample."""

from __future__ import annotations

from typing import Any

from flask import request

from service.protocols.declarations.errors import COMPUTE_ERRORS
from service.protocols.declarations.sample import SampleRequestSchema, SampleResponseSchema, sample_response
from service.protocols.v1.examples import SAMPLE_EXAMPLE_REQUEST, SAMPLE_EXAMPLE_RESPONSE
from service.protocols.v1.parsing import load_json_body
from service.requests import SampleRequest
from service.web.admission import answered, run_admitted
from service.web.routes import Routes

routes = Routes(
    "sample",
    __name__,
    url_prefix="/v1",
    description="Seeded sampling with temperature, top-k, top-p and min-p.",
)
SCHEMA = SampleRequestSchema()


@routes.post(
    "/sample",
    operation_id="sample",
    request=SCHEMA,
    request_example=SAMPLE_EXAMPLE_REQUEST,
    response=SampleResponseSchema,
    response_example=SAMPLE_EXAMPLE_RESPONSE,
    errors=COMPUTE_ERRORS,
)
def sample_view() -> dict[str, Any]:
    """Tokens drawn from each row of the logits, reproducibly from a seed.

    From the distribution /v1/softmax shows: temperature, top_k, top_p, min_p, each on what is left.
    """
    typed: SampleRequest = load_json_body(request, SCHEMA)
    return run_admitted(answered(typed, sample_response))
