"""POST /v1/sample."""

from __future__ import annotations

from typing import Any

from service.api.errors_doc import document_compute_errors
from service.api.examples import SAMPLE_EXAMPLE_REQUEST, SAMPLE_EXAMPLE_RESPONSE
from service.api.schemas.sample import SampleRequestSchema, SampleResponseSchema, sample_response
from service.requests import SampleRequest
from service.web.admission import run_admitted
from service.web.blueprint import Blueprint

blp = Blueprint(
    "sample",
    __name__,
    url_prefix="/v1",
    description="Seeded sampling with temperature, top-k, top-p and min-p.",
)


@blp.route("/sample", methods=["POST"])
@blp.doc(operationId="sample")
@blp.arguments(SampleRequestSchema(), example=SAMPLE_EXAMPLE_REQUEST)
@blp.response(200, SampleResponseSchema, example=SAMPLE_EXAMPLE_RESPONSE)
@document_compute_errors(blp)
def sample_view(request: SampleRequest) -> dict[str, Any]:
    """Tokens drawn from each row of the logits, reproducibly from a seed.

    From the distribution /v1/softmax shows: temperature, top_k, top_p, min_p, each on what is left.
    """
    return sample_response(run_admitted(request))
