"""POST /v1/multi-head-attention: request and response."""

from __future__ import annotations

from typing import Any

import numpy as np
from marshmallow import fields, post_load, validate

from service.kernels import MultiHeadResult
from service.protocols.declarations.arrays import Array
from service.protocols.declarations.attention import AttentionOptionsSchema, IndexRows
from service.protocols.declarations.common import IncludeList
from service.protocols.declarations.fields import StrictInteger
from service.protocols.declarations.model import FOLLOWS_PRECISION, ModelDeclaration, OutputSpec
from service.protocols.declarations.schemas import PartSchema, ResponseSchema
from service.requests import MultiHeadOutput, MultiHeadRequest

ARRAYS = MultiHeadRequest.ARRAYS


def _array(name: str, description: str, **kwargs: Any) -> Array:
    return Array.of(ARRAYS[name], metadata={"description": description}, **kwargs)


class MultiHeadRequestSchema(AttentionOptionsSchema):
    """The layer's arrays and heads; the options that act per head are /v1/attention's own fields."""

    query = _array("query", "Inputs of the queries, [..., n, d_model].", required=True)
    key = _array("key", "Inputs of the keys, [..., m, d_kv_model]; default: the query (self-attention).")
    value = _array("value", "Inputs of the values, [..., m, d_kv_model]; default: the key.")
    w_q = _array("w_q", "Query projection, [d_model, num_heads · d_k] (x @ w_q).", required=True)
    w_k = _array("w_k", "Key projection, [d_kv_model, num_kv_heads · d_k].", required=True)
    w_v = _array("w_v", "Value projection, [d_kv_model, num_kv_heads · d_v].", required=True)
    w_o = _array(
        "w_o", "Output projection of the concatenated heads, [num_heads · d_v, d_out].", required=True
    )
    b_q = _array("b_q", "Query projection bias, [num_heads · d_k].")
    b_k = _array("b_k", "Key projection bias, [num_kv_heads · d_k].")
    b_v = _array("b_v", "Value projection bias, [num_kv_heads · d_v].")
    b_o = _array("b_o", "Output projection bias, [d_out].")
    num_heads = StrictInteger(
        required=True, validate=validate.Range(min=1), metadata={"description": "Query heads H_q."}
    )
    num_kv_heads = StrictInteger(
        validate=validate.Range(min=1),
        metadata={
            "description": "Key/value heads H_kv (default num_heads); num_heads must be a multiple. Query "
            "head i reads key/value head i // (num_heads / num_kv_heads): grouped-query attention; 1 is "
            "multi-query attention."
        },
    )
    mask = _array("mask", "true = may attend; broadcastable to the per-head weights [..., H_q, n, m].")
    bias = _array("bias", "Added to every head's scaled scores; broadcastable to [..., H_q, n, m].")
    alibi_slopes = _array("alibi_slopes", "ALiBi: one slope per head, broadcastable to [..., H_q].")
    include = IncludeList(
        MultiHeadOutput,
        default=sorted(MultiHeadRequest.DEFAULT_INCLUDE),
        metadata={
            "description": "The steps to return beside the output: per-head weights and scores "
            "[..., H_q, n, m], heads (per-head outputs before w_o) [..., H_q, n, d_v], and the projections "
            "q [..., H_q, n, d_k], k [..., H_kv, m, d_k], v [..., H_kv, m, d_v] as the scores used them "
            "(after rotary)."
        },
    )

    @post_load
    def typed(self, data: dict[str, Any], **kwargs: Any) -> MultiHeadRequest:
        """The typed request: its own checks (shapes, heads, ranges) raise errors naming the field."""
        return MultiHeadRequest(**data)


class MultiHeadFieldsSchema(PartSchema, MultiHeadRequestSchema):
    """A layer's fields without its inputs: a Transformer block's ``attention``, self-attention over the
    block's own rows (which also sets what it returns and the precision)."""

    class Meta:
        exclude = ("query", "key", "value", "include", "precision")


def _result_array(description: str, **kwargs: Any) -> Array:
    return Array(min_rank=1, metadata={"description": description}, **kwargs)


class MultiHeadResponseSchema(ResponseSchema):
    output = _result_array("The layer's output, [..., n, d_out].", required=True)
    weights = _result_array("Per-head attention weights, [..., H_q, n, m].")
    scores = _result_array("Per-head scores, [..., H_q, n, m]; hidden entries are null.", nullable=True)
    heads = _result_array("Per-head outputs before w_o, [..., H_q, n, d_v].")
    q = _result_array("Projected queries per head, [..., H_q, n, d_k] (after rotary).")
    k = _result_array("Projected keys per key/value head, [..., H_kv, m, d_k] (after rotary).")
    v = _result_array("Projected values per key/value head, [..., H_kv, m, d_v].")
    scale = fields.Float(required=True, metadata={"description": "The scale that was used."})
    empty_rows = IndexRows(
        fields.List(fields.Integer()),
        required=True,
        metadata={"description": "Index lists (into [..., H_q, n]) of query rows that saw no key."},
    )


def multi_head_response(result: MultiHeadResult, request: MultiHeadRequest) -> dict[str, Any]:
    """The response body: the output and whichever steps were asked for."""
    include = request.include
    # In the documented order (the response schema's), as the answers always were.
    body: dict[str, Any] = {"output": result.output}
    body.update(
        {
            name: getattr(result, name)
            for name in ("weights", "scores", "heads", "q", "k", "v")
            if name in include
        }
    )
    body.update(scale=result.scale, empty_rows=result.empty_rows)
    return body


MODEL = ModelDeclaration(
    name="multi-head-attention",
    topic="A multi-head attention layer.",
    summary="A multi-head attention layer: projections, attention per head, concatenation, output "
    "projection.",
    description="Q = query @ w_q + b_q (and K, V likewise) split into heads; each head is /v1/attention with "
    "every option given; the heads' outputs are concatenated and projected by w_o. num_kv_heads < num_heads "
    "shares key/value heads (grouped-query attention).",
    request=MultiHeadRequestSchema,
    response=MultiHeadResponseSchema,
    answer=multi_head_response,
    outputs=(
        OutputSpec("output", FOLLOWS_PRECISION, lambda r: r.output),
        OutputSpec("weights", FOLLOWS_PRECISION, lambda r: r.weights),
        OutputSpec("scores", FOLLOWS_PRECISION, lambda r: r.scores, default=False),
        OutputSpec("heads", FOLLOWS_PRECISION, lambda r: r.heads, default=False),
        OutputSpec("q", FOLLOWS_PRECISION, lambda r: r.q, default=False),
        OutputSpec("k", FOLLOWS_PRECISION, lambda r: r.k, default=False),
        OutputSpec("v", FOLLOWS_PRECISION, lambda r: r.v, default=False),
        OutputSpec("scale", "FP64", lambda r: np.asarray(r.scale, dtype=np.float64)),
        OutputSpec("empty_rows", "INT64", lambda r: r.empty_rows, shape=(-1, -1)),
    ),
    # Two tokens, d_model = 2, two heads of width 1, the identity as every projection: each head attends
    # over one feature, so the layer's arithmetic can be followed by hand.
    example={
        "query": [[1.0, 0.0], [0.0, 1.0]],
        "w_q": [[1.0, 0.0], [0.0, 1.0]],
        "w_k": [[1.0, 0.0], [0.0, 1.0]],
        "w_v": [[1.0, 0.0], [0.0, 1.0]],
        "w_o": [[1.0, 0.0], [0.0, 1.0]],
        "num_heads": 2,
        "causal": True,
        "include": ["weights"],
    },
)
