"""POST /v1/attention: request and response."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, get_args

from marshmallow import Schema, fields, post_load

from service.api.schemas.common import IncludeList, one_of, precision_field, within
from service.kernels import AttentionResult, CausalAlignment, EmptyRowPolicy
from service.requests import AttentionOutput, AttentionRequest
from service.web.arrays import Array
from service.web.fields import StrictBoolean, StrictFloat

ATTENTION_INCLUDES = get_args(AttentionOutput)
ARRAYS = AttentionRequest.ARRAYS


class AttentionRequestSchema(Schema):
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
    causal = StrictBoolean(load_default=False, metadata={"description": "Hide future keys."})
    causal_alignment = fields.String(
        load_default="lower_right",
        validate=one_of(CausalAlignment),
        metadata={
            "description": "lower_right: the queries are the last n of the m positions (key j is hidden "
            "from query i when j > i + m - n); upper_left: hidden when j > i (PyTorch's is_causal)."
        },
    )
    bias = Array.of(
        ARRAYS["bias"],
        metadata={"description": "Added to the scaled scores before softmax; broadcastable to [..., n, m]."},
    )
    scale = StrictFloat(
        validate=within(AttentionRequest.SCALE),
        metadata={"description": "Multiplies QKᵀ; default 1/sqrt(d_k).", "exclusiveMinimum": 0},
    )
    empty_rows = fields.String(
        load_default="error",
        validate=one_of(EmptyRowPolicy),
        metadata={
            "description": "What to do with a query row that sees no key: error (422 naming the row) or "
            "zero (all-zero weights and output, row listed in empty_rows)."
        },
    )
    include = IncludeList(
        AttentionOutput,
        default=sorted(AttentionRequest.DEFAULT_INCLUDE),
        metadata={"description": 'Extra arrays to return (default ["weights"]).'},
    )
    precision = precision_field()

    @post_load
    def typed(self, data: dict[str, Any], **kwargs: Any) -> AttentionRequest:
        """The typed request: its own checks (shapes, ranges) raise errors naming the field."""
        return AttentionRequest(**data)


class IndexRows(fields.List[Any]):
    """Index lists as the kernel gives them (an int array, one row per index): written by orjson as is."""

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> Any:
        return value


class AttentionResponseSchema(Schema):
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
            "description": "Log-sum-exp of the visible scores per query, [..., n]; null for an empty row."
        },
    )
    scale = fields.Float(required=True, metadata={"description": "The scale that was used."})
    empty_rows = IndexRows(
        fields.List(fields.Integer()),
        required=True,
        metadata={"description": "Index lists (into [..., n]) of query rows that saw no key."},
    )


def attention_response(result: AttentionResult, *, include: Collection[str]) -> dict[str, Any]:
    """The response body for ``result``: the output and whichever of ATTENTION_INCLUDES were asked for."""
    body: dict[str, Any] = {"output": result.output, "scale": result.scale, "empty_rows": result.empty_rows}
    body.update({name: getattr(result, name) for name in ATTENTION_INCLUDES if name in include})
    return body
