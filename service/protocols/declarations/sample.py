"""POST /v1/sample: request and response."""

from __future__ import annotations

from typing import Any

from marshmallow import fields, post_load

from service.kernels import SampleResult
from service.protocols.declarations.arrays import Array
from service.protocols.declarations.common import within
from service.protocols.declarations.fields import StrictFloat, StrictInteger
from service.protocols.declarations.schemas import RequestSchema, ResponseSchema
from service.protocols.declarations.softmax import DISTRIBUTION_FIELDS
from service.requests import SampleRequest


class SampleRequestSchema(RequestSchema):
    logits = Array.of(
        SampleRequest.ARRAYS["logits"],
        required=True,
        metadata={"description": "Logits; each row over the last axis is a distribution to draw from."},
    )
    temperature = StrictFloat(
        load_default=1.0,
        validate=within(SampleRequest.TEMPERATURE),
        metadata={"description": "Divides the logits; 0 is greedy: the argmax, the lowest index on ties."},
    )
    # The distribution's other options are softmax's, so both document (and check) the same meaning.
    mask = DISTRIBUTION_FIELDS["mask"]
    top_k = DISTRIBUTION_FIELDS["top_k"]
    top_p = DISTRIBUTION_FIELDS["top_p"]
    min_p = DISTRIBUTION_FIELDS["min_p"]
    num_samples = StrictInteger(
        load_default=1,
        validate=within(SampleRequest.NUM_SAMPLES),
        metadata={"description": "Independent draws per row, with replacement."},
    )
    seed = StrictInteger(
        validate=within(SampleRequest.SEED),
        metadata={
            "description": "Seeds NumPy's PCG64; the same request and seed give the same tokens on every "
            "machine. Absent: a fresh seed, returned in the answer. At most 2^53 - 1, so that JavaScript "
            "holds it exactly."
        },
    )

    @post_load
    def typed(self, data: dict[str, Any], **kwargs: Any) -> SampleRequest:
        """The typed request: its own checks (shapes, ranges) raise errors naming the field."""
        return SampleRequest(**data)


class SampleResponseSchema(ResponseSchema):
    tokens = Array(
        kind="integer",
        required=True,
        metadata={
            "description": "Drawn token indices, [..., num_samples]: the logits' batch dims, then the draws."
        },
    )
    logprobs = Array(
        required=True,
        metadata={
            "description": "Natural-log probability of each drawn token under the distribution, "
            "[..., num_samples]."
        },
    )
    seed = fields.Integer(
        required=True, metadata={"description": "The seed used: send it back to repeat the draw."}
    )


def sample_response(result: SampleResult) -> dict[str, Any]:
    """The response body for ``result``."""
    return {"tokens": result.tokens, "logprobs": result.logprobs, "seed": result.seed}
