"""POST /v1/attention: request and response."""

from __future__ import annotations

from typing import Any, get_args

import numpy as np
from marshmallow import fields, post_load, validate

from service.kernels import AttentionResult, CausalAlignment, EmptyRowPolicy, Rotary, RotaryStyle
from service.protocols.declarations.arrays import Array
from service.protocols.declarations.common import (
    FixedLengthList,
    IncludeList,
    one_of,
    precision_field,
    within,
)
from service.protocols.declarations.fields import StrictBoolean, StrictFloat, StrictInteger
from service.protocols.declarations.model import FOLLOWS_PRECISION, ModelDeclaration, OutputSpec
from service.protocols.declarations.schemas import RequestSchema, ResponseSchema
from service.requests import AttentionOutput, AttentionRequest

ATTENTION_INCLUDES = get_args(AttentionOutput)
ARRAYS = AttentionRequest.ARRAYS


class AttentionOptionsSchema(RequestSchema):
    """The options of one attention: /v1/attention's, and per head /v1/multi-head-attention's."""

    causal = StrictBoolean(load_default=False, metadata={"description": "Hide future keys."})
    causal_alignment = fields.String(
        load_default="lower_right",
        validate=one_of(CausalAlignment),
        metadata={
            "description": "lower_right: the queries are the last n of the m positions (key j is hidden "
            "from query i when j > i + m - n); upper_left: hidden when j > i (PyTorch's is_causal)."
        },
    )
    scale = StrictFloat(
        validate=within(AttentionRequest.SCALE),
        metadata={"description": "Multiplies QKᵀ; default 1/sqrt(d_k).", "exclusiveMinimum": 0},
    )
    window = FixedLengthList(
        StrictInteger(allow_none=True, validate=validate.Range(min=0)),
        length=2,
        metadata={
            "description": "[left, right] (null = unbounded on that side): key j is visible from query i "
            "only when i' - left <= j <= i' + right, where i' = i + m - n under lower_right alignment and "
            "i under upper_left. Combined with mask and causal by AND (FlashAttention's window_size).",
        },
    )
    softcap = StrictFloat(
        validate=within(AttentionRequest.SOFTCAP),
        metadata={
            "description": "Logit soft-capping (Gemma 2): scaled scores become "
            "softcap * tanh(scores / softcap), before bias, ALiBi and masking.",
            "exclusiveMinimum": 0,
        },
    )
    rotary = fields.Nested(
        lambda: RotarySchema(),
        metadata={
            "description": "Rotary position embedding of the query and key rows before the scores (the "
            "scores and weights returned are the rotated ones)."
        },
    )
    empty_rows = fields.String(
        load_default="error",
        validate=one_of(EmptyRowPolicy),
        metadata={
            "description": "What to do with a query row that sees no key: error (422 naming the row) or "
            "zero (all-zero weights and output, row listed in empty_rows)."
        },
    )
    precision = precision_field()


class AttentionRequestSchema(AttentionOptionsSchema):
    query = Array.of(
        ARRAYS["query"],
        required=True,
        metadata={"description": "Queries, shape [..., n, d_k]; a 1-D [d_k] is a single query."},
    )
    key = Array.of(ARRAYS["key"], required=True, metadata={"description": "Keys, [..., m, d_k]."})
    value = Array.of(ARRAYS["value"], required=True, metadata={"description": "Values, [..., m, d_v]."})
    mask = Array.of(
        ARRAYS["mask"],
        metadata={
            "description": "true = this query may attend to this key; broadcastable to [..., n, m] "
            "(a 1-D [m] mask is per-key visibility). Combined with causal by AND."
        },
    )
    bias = Array.of(
        ARRAYS["bias"],
        metadata={"description": "Added to the scaled scores before softmax; broadcastable to [..., n, m]."},
    )
    enable_gqa = StrictBoolean(
        load_default=False,
        metadata={
            "description": "Grouped-query attention (PyTorch's enable_gqa): the query has H_q heads at "
            "dim -3, key and value H_kv, with H_q a multiple of H_kv; query head i reads key/value head "
            "i // (H_q / H_kv). H_kv = 1 is multi-query attention."
        },
    )
    alibi_slopes = Array.of(
        ARRAYS["alibi_slopes"],
        metadata={
            "description": "ALiBi: one slope per head, broadcastable to the leading dimensions [..., H]; "
            "adds -slope * |i' - j| to the scores, after bias."
        },
    )
    include = IncludeList(
        AttentionOutput,
        default=sorted(AttentionRequest.DEFAULT_INCLUDE),
        metadata={"description": 'Extra arrays to return (default ["weights"]).'},
    )

    @post_load
    def typed(self, data: dict[str, Any], **kwargs: Any) -> AttentionRequest:
        """The typed request: its own checks (shapes, ranges) raise errors naming the field."""
        return AttentionRequest(**data)


class RotarySchema(RequestSchema):
    # Declared with its default (the kernel's): the contract says it, and a client that means "rotary on with
    # its defaults" can say so on /v2, where an object is its members as parameters (none: no rotary).
    base = StrictFloat(
        load_default=Rotary().base,
        validate=validate.Range(min=0, min_inclusive=False),
        metadata={"description": "Frequencies base^(-2i/dim).", "exclusiveMinimum": 0},
    )
    style = fields.String(
        validate=one_of(RotaryStyle),
        metadata={
            "description": "half: feature i pairs with i + dim/2 (GPT-NeoX, Llama rotate_half; the default); "
            "interleaved: 2i pairs with 2i + 1 (GPT-J, RoFormer)."
        },
    )
    dim = StrictInteger(
        validate=validate.Range(min=2),
        metadata={"description": "How many leading features rotate (even, at most d_k); default d_k."},
    )
    query_offset = StrictInteger(
        metadata={
            "description": "Position of query row 0; default m - n (lower_right) or 0 (upper_left). "
            "Every query's position is within ±2**53, where float64 positions are exact."
        }
    )
    key_offset = StrictInteger(
        metadata={"description": "Position of key row 0; default 0. Every key's position is within ±2**53."}
    )


class IndexRows(fields.List[Any]):
    """Index lists as the kernel gives them (an int array, one row per index): written by orjson as is."""

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> Any:
        return value


class AttentionResponseSchema(ResponseSchema):
    output = Array(
        min_rank=1, required=True, metadata={"description": "Weighted mix of the values, [..., n, d_v]."}
    )
    weights = Array(
        min_rank=1, metadata={"description": "Attention weights, [..., n, m]; masked = 0; rows sum to 1."}
    )
    scores = Array(
        min_rank=1,
        nullable=True,
        metadata={
            "description": "Scaled scores plus bias, [..., n, m]; masked entries are null (minus infinity)."
        },
    )
    logsumexp = Array(
        min_rank=0,
        nullable=True,
        metadata={
            "description": "Log-sum-exp of the visible scores per query, [..., n]; null for an empty row "
            "(minus infinity)."
        },
    )
    scale = fields.Float(required=True, metadata={"description": "The scale that was used."})
    empty_rows = IndexRows(
        fields.List(fields.Integer()),
        required=True,
        metadata={"description": "Index lists (into [..., n]) of query rows that saw no key."},
    )


def attention_response(result: AttentionResult, request: AttentionRequest) -> dict[str, Any]:
    """The response body for ``result``: the output and whichever of ATTENTION_INCLUDES were asked for."""
    include = request.include
    # In the documented order (the response schema's), as the answers always were.
    body: dict[str, Any] = {"output": result.output}
    body.update(
        {name: getattr(result, name) for name in ("weights", "scores", "logsumexp") if name in include}
    )
    body.update(scale=result.scale, empty_rows=result.empty_rows)
    return body


def _scalar(value: float) -> np.ndarray:
    return np.asarray(value, dtype=np.float64)


# The course's worked example: weights ≈ [0.3302, 0.6698], output ≈ [1.9814, 2.0093].
EXAMPLE: dict[str, Any] = {"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}

MODEL = ModelDeclaration(
    name="attention",
    topic="Masked scaled dot-product attention.",
    summary="Scaled dot-product attention with optional mask, causal mask and bias.",
    description="scores = Q Kᵀ · scale + bias, hidden scores set to minus infinity, a row-wise softmax gives "
    "the weights, and the output mixes the values with them.",
    request=AttentionRequestSchema,
    response=AttentionResponseSchema,
    answer=attention_response,
    outputs=(
        OutputSpec("output", FOLLOWS_PRECISION, lambda r: r.output),
        OutputSpec("weights", FOLLOWS_PRECISION, lambda r: r.weights),
        OutputSpec("scores", FOLLOWS_PRECISION, lambda r: r.scores, default=False),
        OutputSpec("logsumexp", FOLLOWS_PRECISION, lambda r: r.logsumexp, default=False),
        OutputSpec("scale", "FP64", lambda r: _scalar(r.scale)),
        OutputSpec("empty_rows", "INT64", lambda r: r.empty_rows, shape=(-1, -1)),
    ),
    example=EXAMPLE,
)
