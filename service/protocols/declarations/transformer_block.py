"""POST /v1/transformer-block: request and response. Its parts are the declarations of their own endpoints,
nested (the multi-head layer's, the feed-forward layer's, layer-norm's, without their inputs), so a rule
answers alike inside the block and alone, and an error inside names its path (feed_forward.w_3)."""

from __future__ import annotations

from typing import Any

from marshmallow import fields, post_load

from service.kernels import NormPosition, TransformerBlockResult
from service.protocols.declarations.arrays import Array
from service.protocols.declarations.common import IncludeList, one_of, precision_field
from service.protocols.declarations.feed_forward import FeedForwardFieldsSchema
from service.protocols.declarations.layer_norm import NormFieldsSchema
from service.protocols.declarations.model import FOLLOWS_PRECISION, ModelDeclaration, OutputSpec
from service.protocols.declarations.multihead import MultiHeadFieldsSchema
from service.protocols.declarations.schemas import RequestSchema, ResponseSchema
from service.requests import BlockOutput, TransformerBlockRequest

_NORM = (
    "The body of /v1/layer-norm without x (kind, weight, bias, eps); default: LayerNorm with weight 1, "
    "bias 0 and eps 1e-5, as PyTorch's layers start."
)


class TransformerBlockRequestSchema(RequestSchema):
    x = Array.of(
        TransformerBlockRequest.ARRAYS["x"],
        required=True,
        metadata={"description": "The tokens' vectors, [..., n, d_model]: the residual stream's input."},
    )
    attention = fields.Nested(
        MultiHeadFieldsSchema,
        required=True,
        metadata={
            "description": "The body of /v1/multi-head-attention without query, key, value, include and "
            "precision: self-attention over the block's rows, with every option (causal, rotary, …); w_o "
            "must give d_model columns."
        },
    )
    feed_forward = fields.Nested(
        FeedForwardFieldsSchema,
        required=True,
        metadata={
            "description": "The body of /v1/feed-forward without x, include and precision; w_2 must give "
            "d_model columns."
        },
    )
    norm_1 = fields.Nested(
        NormFieldsSchema,
        metadata={"description": f"Before attention (pre) or after its residual add (post). {_NORM}"},
    )
    norm_2 = fields.Nested(
        NormFieldsSchema,
        metadata={
            "description": f"Before the feed-forward layer (pre) or after its residual add (post). {_NORM}"
        },
    )
    norm_position = fields.String(
        load_default="pre",
        validate=one_of(NormPosition),
        metadata={
            "description": "pre (GPT-2, LLaMA): h = x + MHA(norm_1(x)), y = h + FFN(norm_2(h)); post "
            "(Attention Is All You Need §3.1): h = norm_1(x + MHA(x)), y = norm_2(h + FFN(h))."
        },
    )
    include = IncludeList(
        BlockOutput,
        default=[],
        metadata={
            "description": "weights: the per-head attention weights [..., H, n, n]; residual: the residual "
            "stream h between the two sublayers [..., n, d_model]."
        },
    )
    precision = precision_field()

    @post_load
    def typed(self, data: dict[str, Any], **kwargs: Any) -> TransformerBlockRequest:
        """The typed request: each part is checked by its own endpoint's typed request, over x."""
        return TransformerBlockRequest(**data)


class TransformerBlockResponseSchema(ResponseSchema):
    output = Array(
        min_rank=2, required=True, metadata={"description": "The block's output, [..., n, d_model]."}
    )
    weights = Array(min_rank=3, metadata={"description": "Per-head attention weights, [..., H, n, n]."})
    residual = Array(
        min_rank=2,
        metadata={"description": "The residual stream h between the sublayers, [..., n, d_model]."},
    )


def transformer_block_response(
    result: TransformerBlockResult, request: TransformerBlockRequest
) -> dict[str, Any]:
    """The response body: the output, and the weights and residual stream when asked for."""
    body: dict[str, Any] = {"output": result.output}
    body.update({name: getattr(result, name) for name in ("weights", "residual") if name in request.include})
    return body


_IDENTITY = [[1.0, 0.0], [0.0, 1.0]]

MODEL = ModelDeclaration(
    name="transformer-block",
    topic="One Transformer block: attention and a feed-forward layer, with residual connections and norms.",
    summary="One Transformer block over a sequence (self-attention), pre-norm or post-norm.",
    description="pre: h = x + MHA(norm_1(x)), y = h + FFN(norm_2(h)); post: h = norm_1(x + MHA(x)), "
    "y = norm_2(h + FFN(h)). attention, feed_forward, norm_1 and norm_2 are the bodies of "
    "/v1/multi-head-attention, /v1/feed-forward and /v1/layer-norm without their inputs; an error inside one "
    "names its path (feed_forward.w_3). The work limits count the whole block.",
    request=TransformerBlockRequestSchema,
    response=TransformerBlockResponseSchema,
    answer=transformer_block_response,
    outputs=(
        OutputSpec("output", FOLLOWS_PRECISION, lambda r: r.output),
        OutputSpec("weights", FOLLOWS_PRECISION, lambda r: r.weights, default=False),
        OutputSpec("residual", FOLLOWS_PRECISION, lambda r: r.residual, default=False),
    ),
    # Two tokens, one head, identity projections, pre-norm, causal, relu between identities (docs/layers.md
    # follows it by hand).
    example={
        "x": _IDENTITY,
        "attention": {
            "w_q": _IDENTITY,
            "w_k": _IDENTITY,
            "w_v": _IDENTITY,
            "w_o": _IDENTITY,
            "num_heads": 1,
            "causal": True,
        },
        "feed_forward": {"w_1": _IDENTITY, "w_2": _IDENTITY, "activation": "relu"},
        "include": ["weights", "residual"],
    },
)
