"""POST /v1/feed-forward: request and response; its fields without x are a Transformer block's
feed_forward."""

from __future__ import annotations

from typing import Any

from marshmallow import fields, post_load

from service.kernels import Activation, FeedForwardResult
from service.protocols.declarations.arrays import Array
from service.protocols.declarations.common import IncludeList, one_of, precision_field
from service.protocols.declarations.model import FOLLOWS_PRECISION, ModelDeclaration, OutputSpec
from service.protocols.declarations.schemas import PartSchema, RequestSchema, ResponseSchema
from service.requests import FeedForwardOutput, FeedForwardRequest

ARRAYS = FeedForwardRequest.ARRAYS


def _array(name: str, description: str, **kwargs: Any) -> Array:
    return Array.of(ARRAYS[name], metadata={"description": description}, **kwargs)


class FeedForwardRequestSchema(RequestSchema):
    x = _array("x", "The rows, [..., d_model].", required=True)
    w_1 = _array(
        "w_1",
        "First projection, [d_model, d_ff] (x @ w_1); the gated one for swiglu and geglu.",
        required=True,
    )
    w_2 = _array("w_2", "Output projection, [d_ff, d_out].", required=True)
    b_1 = _array("b_1", "Bias of w_1, [d_ff].")
    b_2 = _array("b_2", "Bias of w_2, [d_out].")
    activation = fields.String(
        load_default="relu",
        validate=one_of(Activation),
        metadata={
            "description": "relu, gelu (exact: z·Φ(z)), gelu_tanh (PyTorch's approximate='tanh'), silu: "
            "act(x @ w_1 + b_1) @ w_2 + b_2. swiglu and geglu (gated, LLaMA's convention): "
            "(act(x @ w_1 + b_1) ⊙ (x @ w_3 + b_3)) @ w_2 + b_2 with act silu or gelu."
        },
    )
    w_3 = _array(
        "w_3",
        "The gated activations' other projection, [d_model, d_ff]: required for swiglu and geglu, "
        "refused for the others.",
    )
    b_3 = _array("b_3", "Bias of w_3, [d_ff]; gated activations only.")
    include = IncludeList(
        FeedForwardOutput,
        default=[],
        metadata={"description": '["hidden"] adds the hidden activations [..., d_ff] (what w_2 maps).'},
    )
    precision = precision_field()

    @post_load
    def typed(self, data: dict[str, Any], **kwargs: Any) -> FeedForwardRequest:
        """The typed request: its own checks (shapes, w_3 for the gated activations) name the field."""
        return FeedForwardRequest(**data)


class FeedForwardFieldsSchema(PartSchema, FeedForwardRequestSchema):
    """A feed-forward layer's fields without x: a Transformer block's feed_forward."""

    class Meta:
        exclude = ("x", "include", "precision")


class FeedForwardResponseSchema(ResponseSchema):
    output = Array(min_rank=1, required=True, metadata={"description": "The layer's output, [..., d_out]."})
    hidden = Array(min_rank=1, metadata={"description": "The hidden activations, [..., d_ff]."})


def feed_forward_response(result: FeedForwardResult, request: FeedForwardRequest) -> dict[str, Any]:
    """The response body: the output, and the hidden activations when asked for."""
    body: dict[str, Any] = {"output": result.output}
    if "hidden" in request.include:
        body["hidden"] = result.hidden
    return body


MODEL = ModelDeclaration(
    name="feed-forward",
    topic="The position-wise feed-forward layer of a Transformer block.",
    summary="A feed-forward layer, plain (relu, gelu, gelu_tanh, silu) or gated (swiglu, geglu).",
    description="In the x @ W convention: act(x @ w_1 + b_1) @ w_2 + b_2, or for the gated activations "
    "(act(x @ w_1 + b_1) ⊙ (x @ w_3 + b_3)) @ w_2 + b_2 (LLaMA's MLP: w_1 is gate_proj, w_3 up_proj, w_2 "
    "down_proj).",
    request=FeedForwardRequestSchema,
    response=FeedForwardResponseSchema,
    answer=feed_forward_response,
    outputs=(
        OutputSpec("output", FOLLOWS_PRECISION, lambda r: r.output),
        OutputSpec("hidden", FOLLOWS_PRECISION, lambda r: r.hidden, default=False),
    ),
    # One token, identity projections, SwiGLU: silu(x) ⊙ x, so that each number can be followed by hand.
    example={
        "x": [[1.0, -2.0]],
        "w_1": [[1.0, 0.0], [0.0, 1.0]],
        "w_3": [[1.0, 0.0], [0.0, 1.0]],
        "w_2": [[1.0, 0.0], [0.0, 1.0]],
        "activation": "swiglu",
        "include": ["hidden"],
    },
)
