"""POST /v1/softmax: request and response."""

from __future__ import annotations

from typing import Any

import numpy as np
from marshmallow import fields, post_load

from service.kernels import SoftmaxResult
from service.protocols.declarations.arrays import Array
from service.protocols.declarations.common import IncludeList, precision_field, within
from service.protocols.declarations.fields import StrictFloat, StrictInteger
from service.protocols.declarations.model import FOLLOWS_PRECISION, ModelDeclaration, OutputSpec
from service.protocols.declarations.schemas import RequestSchema, ResponseSchema
from service.requests import SoftmaxOutput, SoftmaxRequest

# The distribution's options, shared by /v1/softmax and /v1/sample (marshmallow copies declared fields
# into each schema instance), so both document and check the same meaning.
DISTRIBUTION_FIELDS: dict[str, fields.Field[Any]] = {
    "mask": Array.of(
        SoftmaxRequest.ARRAYS["mask"],
        metadata={"description": "false = excluded (probability 0); broadcastable to the logits' shape."},
    ),
    "top_k": StrictInteger(
        validate=within(SoftmaxRequest.TOP_K),
        metadata={"description": "Keep every entry whose logit is at least the k-th largest."},
    ),
    "top_p": StrictFloat(
        validate=within(SoftmaxRequest.TOP_P),
        metadata={
            "description": "Keep the smallest set of most probable entries whose probability sums to "
            "at least p (never fewer than one), after temperature and top_k.",
        },
    ),
    "min_p": StrictFloat(
        validate=within(SoftmaxRequest.MIN_P),
        metadata={
            "description": "Keep the entries whose probability is at least min_p times the largest one, "
            "after temperature, top_k and top_p (as Hugging Face's MinPLogitsWarper and vLLM)."
        },
    ),
}


class SoftmaxRequestSchema(RequestSchema):
    logits = Array.of(
        SoftmaxRequest.ARRAYS["logits"],
        required=True,
        metadata={"description": "Logits; softmax over the last axis."},
    )
    temperature = StrictFloat(
        load_default=1.0,
        validate=within(SoftmaxRequest.TEMPERATURE),
        metadata={"description": "Divides the logits; 0 is the greedy limit (ties share the probability)."},
    )
    mask = DISTRIBUTION_FIELDS["mask"]
    top_k = DISTRIBUTION_FIELDS["top_k"]
    top_p = DISTRIBUTION_FIELDS["top_p"]
    min_p = DISTRIBUTION_FIELDS["min_p"]
    include = IncludeList(SoftmaxOutput, default=[], metadata={"description": "Extra arrays to return."})
    precision = precision_field()

    @post_load
    def typed(self, data: dict[str, Any], **kwargs: Any) -> SoftmaxRequest:
        """The typed request: its own checks (shapes, ranges) raise errors naming the field."""
        return SoftmaxRequest(**data)


class SoftmaxResponseSchema(ResponseSchema):
    probabilities = Array(required=True, metadata={"description": "Same shape as the logits; rows sum to 1."})
    log_probabilities = Array(
        nullable=True,
        metadata={
            "description": "Natural-log probabilities; null where the probability is 0 (minus infinity)."
        },
    )
    entropy = Array(
        min_rank=0, required=True, metadata={"description": "Entropy of each row in nats, [...]."}
    )
    argmax = Array(
        kind="integer",
        min_rank=0,
        required=True,
        metadata={"description": "Index of the most probable entry of each row (the first on ties), [...]."},
    )
    temperature = fields.Float(required=True, metadata={"description": "The temperature that was used."})


def softmax_response(result: SoftmaxResult, request: SoftmaxRequest) -> dict[str, Any]:
    """The response body for ``result``, with the log-probabilities when they were asked for."""
    include = request.include
    # In the documented order (the response schema's), as the answers always were.
    body: dict[str, Any] = {"probabilities": result.probabilities}
    if "log_probabilities" in include:
        body["log_probabilities"] = result.log_probabilities
    body.update(entropy=result.entropy, argmax=result.argmax, temperature=result.temperature)
    return body


MODEL = ModelDeclaration(
    name="softmax",
    topic="Softmax with temperature, top-k, top-p and min-p.",
    summary="Probabilities over the last axis of the logits, after mask, temperature, top-k, top-p and "
    "min-p.",
    request=SoftmaxRequestSchema,
    response=SoftmaxResponseSchema,
    answer=softmax_response,
    outputs=(
        OutputSpec("probabilities", FOLLOWS_PRECISION, lambda r: r.probabilities),
        OutputSpec("log_probabilities", FOLLOWS_PRECISION, lambda r: r.log_probabilities, default=False),
        OutputSpec("entropy", FOLLOWS_PRECISION, lambda r: r.entropy),
        OutputSpec("argmax", "INT64", lambda r: r.argmax),
        OutputSpec("temperature", "FP64", lambda r: np.asarray(r.temperature, dtype=np.float64)),
    ),
    example={"logits": [2.0, 1.0, 0.1], "temperature": 0.5},
)
