"""POST /v1/layer-norm: request and response; its fields without x are a Transformer block's norm_1 and
norm_2."""

from __future__ import annotations

from typing import Any

from marshmallow import fields, post_load

from service.kernels import NormKind
from service.protocols.declarations.arrays import Array
from service.protocols.declarations.common import one_of, precision_field, within
from service.protocols.declarations.fields import StrictFloat
from service.protocols.declarations.model import FOLLOWS_PRECISION, ModelDeclaration, OutputSpec
from service.protocols.declarations.schemas import PartSchema, RequestSchema, ResponseSchema
from service.requests import LayerNormRequest, LayerNormResult

ARRAYS = LayerNormRequest.ARRAYS


class LayerNormRequestSchema(RequestSchema):
    x = Array.of(ARRAYS["x"], required=True, metadata={"description": "The rows to normalize, [..., d]."})
    kind = fields.String(
        load_default="layer",
        validate=one_of(NormKind),
        metadata={
            "description": "layer: (x − mean) / sqrt(var + eps) · weight + bias over the last axis, with the "
            "population variance (PyTorch's F.layer_norm); rms: x / sqrt(mean(x²) + eps) · weight "
            "(nn.RMSNorm)."
        },
    )
    weight = Array.of(ARRAYS["weight"], metadata={"description": "Scales each feature, [d]; default ones."})
    bias = Array.of(
        ARRAYS["bias"],
        metadata={
            "description": "Shifts each feature, [d]; default zeros; kind layer only (refused for rms)."
        },
    )
    eps = StrictFloat(
        load_default=1e-5,
        validate=within(LayerNormRequest.EPS),
        metadata={
            "description": "Added to the variance (or the mean square) under the square root.",
            "exclusiveMinimum": 0,
        },
    )
    precision = precision_field()

    @post_load
    def typed(self, data: dict[str, Any], **kwargs: Any) -> LayerNormRequest:
        """The typed request: its own checks raise errors naming the field."""
        return LayerNormRequest(**data)


class NormFieldsSchema(PartSchema, LayerNormRequestSchema):
    """A normalization's fields without x: a Transformer block's norm_1 and norm_2."""

    class Meta:
        exclude = ("x", "precision")


class LayerNormResponseSchema(ResponseSchema):
    output = Array(min_rank=1, required=True, metadata={"description": "x normalized, [..., d]."})


def layer_norm_response(result: LayerNormResult, request: LayerNormRequest) -> dict[str, Any]:
    """The response body: the normalized rows."""
    return {"output": result.output}


MODEL = ModelDeclaration(
    name="layer-norm",
    topic="Layer normalization and RMSNorm.",
    summary="LayerNorm or RMSNorm over the last axis, with an optional weight and bias per feature.",
    description="kind layer: (x − mean) / sqrt(var + eps) · weight + bias, the population variance, as "
    "torch.nn.functional.layer_norm; a constant row's output is the bias. kind rms: x / sqrt(mean(x²) + eps) "
    "· weight, as torch.nn.RMSNorm. The statistics are computed in float64 whatever the precision.",
    request=LayerNormRequestSchema,
    response=LayerNormResponseSchema,
    answer=layer_norm_response,
    outputs=(OutputSpec("output", FOLLOWS_PRECISION, lambda r: r.output),),
    # Two rows of three: [1, 2, 3] has mean 2 and variance 2/3; a constant row gives the bias.
    example={"x": [[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]], "bias": [0.0, 0.5, 1.0]},
)
