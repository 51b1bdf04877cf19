"""POST /v1/log-likelihood: request and response."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
from marshmallow import fields, post_load

from service.kernels import LikelihoodResult
from service.protocols.declarations.arrays import Array
from service.protocols.declarations.common import precision_field, within
from service.protocols.declarations.fields import StrictBoolean, StrictFloat, StrictInteger
from service.protocols.declarations.model import FOLLOWS_PRECISION, ModelDeclaration, OutputSpec
from service.protocols.declarations.schemas import RequestSchema, ResponseSchema
from service.requests import LikelihoodRequest


class LikelihoodRequestSchema(RequestSchema):
    logits = Array.of(
        LikelihoodRequest.ARRAYS["logits"],
        required=True,
        metadata={"description": "Next-token logits per position."},
    )
    targets = Array.of(
        LikelihoodRequest.ARRAYS["targets"],
        required=True,
        metadata={"description": "Token ids in [0, V), or ignore_index for padding."},
    )
    shift = StrictBoolean(
        load_default=False,
        metadata={"description": "Causal training shift: the logits row at position i scores targets[i+1]."},
    )
    ignore_index = StrictInteger(load_default=-100, metadata={"description": "Target id that marks padding."})
    temperature = StrictFloat(
        load_default=1.0,
        validate=within(LikelihoodRequest.TEMPERATURE),
        metadata={"description": "Divides the logits before scoring."},
    )
    top_logprobs = StrictInteger(
        load_default=0,
        validate=within(LikelihoodRequest.TOP_LOGPROBS),
        metadata={"description": "How many of the most probable tokens to list per scored position."},
    )
    precision = precision_field()

    @post_load
    def typed(self, data: dict[str, Any], **kwargs: Any) -> LikelihoodRequest:
        """The typed request: its own checks (shapes, ranges) raise errors naming the field."""
        return LikelihoodRequest(**data)


_TOP_LOGPROB = {
    "type": "object",
    "properties": {
        "token": {"type": "integer"},
        # null when the token's probability is 0 in floating point (its log is minus infinity)
        "logprob": {"type": ["number", "null"]},
    },
    "required": ["token", "logprob"],
}


def _top_logprobs_schema(*, min_rank: int, max_rank: int) -> dict[str, Any]:
    variants = []
    for rank in range(min_rank, max_rank + 1):
        schema: dict[str, Any] = {"type": ["array", "null"], "items": _TOP_LOGPROB}
        for _ in range(rank):
            schema = {"type": "array", "items": schema}
        variants.append(schema)
    return {"anyOf": variants}


class LikelihoodResponseSchema(ResponseSchema):
    token_logprobs = Array(
        nullable=True,
        required=True,
        metadata={"description": "log P(target) per position, [..., T]; null where not scored."},
    )
    ranks = Array(
        kind="integer",
        nullable=True,
        required=True,
        metadata={
            "description": "1 + the number of logits above the target's, [..., T]; null where not scored."
        },
    )
    log_likelihood = Array(
        min_rank=0, required=True, metadata={"description": "Sum over scored tokens, [...]."}
    )
    num_tokens = Array(
        kind="integer", min_rank=0, required=True, metadata={"description": "Scored tokens, [...]."}
    )
    mean_nll = Array(
        min_rank=0, nullable=True, required=True, metadata={"description": "-log_likelihood / num_tokens."}
    )
    perplexity = Array(min_rank=0, nullable=True, required=True, metadata={"description": "exp(mean_nll)."})
    is_greedy = Array(
        kind="boolean", min_rank=0, required=True, metadata={"description": "Every scored target has rank 1."}
    )
    top_logprobs = fields.Raw(
        metadata={
            "description": "[..., T, k] lists of {token, logprob}, most probable first; null rows where not "
            "scored. Present when top_logprobs > 0.",
            **_top_logprobs_schema(min_rank=1, max_rank=LikelihoodRequest.ARRAYS["targets"].max_rank),
        }
    )


# Top log-probabilities ({"token", "logprob"} entries) written to JSON per block, in whole positions (at
# least one a block): see _top_logprobs.
TOP_ENTRIES_PER_BLOCK = 65_536


def likelihood_response(result: LikelihoodResult, request: LikelihoodRequest) -> dict[str, Any]:
    """Shape the kernel's result for JSON: unscored positions become null."""
    ranks = result.ranks.astype(object)
    ranks[~result.scored] = None
    body: dict[str, Any] = {
        "token_logprobs": result.token_logprobs,  # NaN where not scored: written as null
        "ranks": ranks.tolist(),
        "log_likelihood": result.log_likelihood,
        "num_tokens": result.num_tokens,
        "mean_nll": result.mean_nll,
        "perplexity": result.perplexity,
        "is_greedy": result.is_greedy,
    }
    if result.top_ids is not None and result.top_values is not None:
        body["top_logprobs"] = _top_logprobs(result.top_ids, result.top_values, result.scored)
    return body


def _top_logprobs(ids: np.ndarray, values: np.ndarray, scored: np.ndarray) -> orjson.Fragment:
    """The top log-probabilities as JSON already written: per position a list of ``{"token", "logprob"}``
    (``null`` where not scored), nested as the batch.

    Written a block of positions at a time (:data:`TOP_ENTRIES_PER_BLOCK` entries, 3,276 positions of 20)
    rather than built whole as Python lists and dicts: the worst case's 524,288 positions were a million
    containers, twice the memory of their JSON, held until the answer had been written, and the garbage
    collector traversed them all (one collection took 1.8 s while the worker's loop waited for the
    interpreter).
    """
    return orjson.Fragment(b"".join(_top_logprobs_json(ids, values, scored)))


def _top_logprobs_json(ids: np.ndarray, values: np.ndarray, scored: np.ndarray) -> Iterator[bytes]:
    if scored.ndim > 1:
        yield b"["
        for index, (i, v, s) in enumerate(zip(ids, values, scored, strict=True)):
            yield b"," if index else b""
            yield from _top_logprobs_json(i, v, s)
        yield b"]"
        return
    yield b"["
    positions_per_block = max(1, TOP_ENTRIES_PER_BLOCK // max(1, ids.shape[-1]))
    for start in range(0, len(scored), positions_per_block):
        block = slice(start, start + positions_per_block)
        rows = [
            [{"token": token, "logprob": logprob} for token, logprob in zip(row_ids, row_values, strict=True)]
            if is_scored
            else None
            for row_ids, row_values, is_scored in zip(
                ids[block].tolist(), values[block].tolist(), scored[block].tolist(), strict=True
            )
        ]
        written = orjson.dumps(rows)  # "[…]": the brackets are written once, around every block
        yield (b"," if start else b"") + written[1:-1]
    yield b"]"


_NEEDS_TOP = "needs the top_logprobs parameter to be at least 1"


def _lists_top(request: LikelihoodRequest) -> bool:
    """top_logprobs and top_tokens exist when the top_logprobs parameter asks for some (as in /v1)."""
    return request.top_logprobs > 0


MODEL = ModelDeclaration(
    name="log-likelihood",
    topic="Log-likelihood of token sequences.",
    summary="Per-token log-probabilities and ranks, and per-sequence log-likelihood, NLL and perplexity.",
    request=LikelihoodRequestSchema,
    response=LikelihoodResponseSchema,
    answer=likelihood_response,
    outputs=(
        OutputSpec("token_logprobs", FOLLOWS_PRECISION, lambda r: r.token_logprobs),
        OutputSpec("ranks", "INT64", lambda r: r.ranks),
        OutputSpec("log_likelihood", FOLLOWS_PRECISION, lambda r: r.log_likelihood),
        OutputSpec("num_tokens", "INT64", lambda r: r.num_tokens),
        OutputSpec("mean_nll", FOLLOWS_PRECISION, lambda r: r.mean_nll),
        OutputSpec("perplexity", FOLLOWS_PRECISION, lambda r: r.perplexity),
        OutputSpec("is_greedy", "BOOL", lambda r: r.is_greedy),
        OutputSpec(
            "top_logprobs",
            FOLLOWS_PRECISION,
            lambda r: r.top_values,
            shape=(-1, -1),
            available=_lists_top,
            unavailable=_NEEDS_TOP,
        ),
        OutputSpec(
            "top_tokens",
            "INT64",
            lambda r: r.top_ids,
            shape=(-1, -1),
            available=_lists_top,
            unavailable=_NEEDS_TOP,
        ),
    ),
    example={
        "logits": [[2.0, 0.5, -1.0], [0.1, 1.5, 0.3], [0.0, 0.2, 2.2]],
        "targets": [0, 1, 2],
        "shift": True,
    },
)
