"""POST /v1/sample: request and response."""

from __future__ import annotations

from typing import Any

import numpy as np
from marshmallow import fields, post_load

from service.kernels import SampleResult
from service.protocols.declarations.arrays import Array
from service.protocols.declarations.common import within
from service.protocols.declarations.fields import StrictFloat, StrictInteger
from service.protocols.declarations.model import ModelDeclaration, OutputSpec
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


def sample_response(result: SampleResult, request: SampleRequest) -> dict[str, Any]:
    """The response body for ``result``."""
    return {"tokens": result.tokens, "logprobs": result.logprobs, "seed": result.seed}


MODEL = ModelDeclaration(
    name="sample",
    topic="Seeded sampling with temperature, top-k, top-p and min-p.",
    summary="Tokens drawn from each row of the logits, reproducibly from a seed.",
    description="From the distribution /v1/softmax shows: temperature, top_k, top_p, min_p, each on what is "
    "left.",
    request=SampleRequestSchema,
    response=SampleResponseSchema,
    answer=sample_response,
    outputs=(
        OutputSpec("tokens", "INT64", lambda r: r.tokens),
        OutputSpec("logprobs", "FP64", lambda r: r.logprobs),
        OutputSpec("seed", "INT64", lambda r: np.asarray(r.seed, dtype=np.int64)),
    ),
    # The softmax example's logits, drawn from eight times with a seed: the same tokens on every machine.
    example={"logits": [2.0, 1.0, 0.1], "num_samples": 8, "seed": 0},
)
