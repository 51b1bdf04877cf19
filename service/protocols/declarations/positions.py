"""POST /v1/positional-encoding: request and response."""

from __future__ import annotations

from typing import Any

from marshmallow import fields, post_load, validate

from service.kernels import RotaryStyle
from service.protocols.declarations.arrays import Array
from service.protocols.declarations.common import IncludeList, one_of, precision_field, within
from service.protocols.declarations.fields import StrictFloat, StrictInteger
from service.protocols.declarations.model import FOLLOWS_PRECISION, ModelDeclaration, OutputSpec
from service.protocols.declarations.schemas import RequestSchema, ResponseSchema
from service.requests import PositionalEncodingRequest, PositionalOutput
from service.requests._positions import EncodingKind, PositionalEncodingResult

ARRAYS = PositionalEncodingRequest.ARRAYS


class PositionalEncodingRequestSchema(RequestSchema):
    kind = fields.String(
        required=True,
        validate=one_of(EncodingKind),
        metadata={
            "description": "sinusoidal: the table of Attention Is All You Need §3.5, PE(pos, 2i) = "
            "sin(pos / base^(2i/d_model)), PE(pos, 2i+1) = cos(...); rotary: RoPE applied to x."
        },
    )
    positions = Array.of(
        ARRAYS["positions"],
        metadata={"description": "Integer positions, [n]; default 0 … n − 1 (rotary) or 0 … length − 1."},
    )
    length = StrictInteger(
        validate=validate.Range(min=1),
        metadata={"description": "sinusoidal: the positions 0 … length − 1 (instead of positions)."},
    )
    d_model = StrictInteger(
        validate=validate.Range(min=2),
        metadata={"description": "sinusoidal: the table's width (even)."},
    )
    x = Array.of(ARRAYS["x"], metadata={"description": "rotary: the rows to rotate, [..., n, d]."})
    base = StrictFloat(
        load_default=10000.0,
        validate=within(PositionalEncodingRequest.BASE),
        metadata={"description": "Frequencies base^(-2i/d).", "exclusiveMinimum": 0},
    )
    style = fields.String(
        validate=one_of(RotaryStyle),
        metadata={
            "description": "rotary: half pairs feature i with i + dim/2 (GPT-NeoX, Llama; the default); "
            "interleaved pairs 2i with 2i + 1 (GPT-J, RoFormer)."
        },
    )
    dim = StrictInteger(
        validate=validate.Range(min=2),
        metadata={"description": "rotary: how many leading features rotate (even, at most d); default d."},
    )
    include = IncludeList(
        PositionalOutput,
        default=[],
        metadata={"description": 'rotary: ["tables"] adds the cos and sin tables.'},
    )
    precision = precision_field()

    @post_load
    def typed(self, data: dict[str, Any], **kwargs: Any) -> PositionalEncodingRequest:
        """The typed request: its own checks raise errors naming the field."""
        return PositionalEncodingRequest(**data)


class PositionalEncodingResponseSchema(ResponseSchema):
    encoding = Array(min_rank=2, metadata={"description": "sinusoidal: the table, [n, d_model]."})
    output = Array(min_rank=2, metadata={"description": "rotary: x rotated, [..., n, d]."})
    cos = Array(min_rank=2, metadata={"description": "rotary: cos of the angles, [n, dim / 2]."})
    sin = Array(min_rank=2, metadata={"description": "rotary: sin of the angles, [n, dim / 2]."})


def positional_encoding_response(
    result: PositionalEncodingResult, request: PositionalEncodingRequest
) -> dict[str, Any]:
    """The response body: the table, or the rotated rows (and the tables when asked for)."""
    body = {name: getattr(result, name) for name in ("encoding", "output", "cos", "sin")}
    return {name: value for name, value in body.items() if value is not None}


_ROTARY_ONLY = "is answered for kind rotary only"


def _is_rotary(request: PositionalEncodingRequest) -> bool:
    return request.kind == "rotary"


def _is_sinusoidal(request: PositionalEncodingRequest) -> bool:
    return request.kind == "sinusoidal"


MODEL = ModelDeclaration(
    name="positional-encoding",
    topic="Sinusoidal and rotary positional encodings.",
    summary="The sinusoidal table for some positions, or rotary embedding applied to rows at their "
    "positions.",
    request=PositionalEncodingRequestSchema,
    response=PositionalEncodingResponseSchema,
    answer=positional_encoding_response,
    outputs=(
        OutputSpec(
            "encoding",
            FOLLOWS_PRECISION,
            lambda r: r.encoding,
            available=_is_sinusoidal,
            unavailable="is answered for kind sinusoidal only",
        ),
        OutputSpec(
            "output", FOLLOWS_PRECISION, lambda r: r.output, available=_is_rotary, unavailable=_ROTARY_ONLY
        ),
        OutputSpec(
            "cos",
            FOLLOWS_PRECISION,
            lambda r: r.cos,
            default=False,
            available=_is_rotary,
            unavailable=_ROTARY_ONLY,
            include="tables",
        ),
        OutputSpec(
            "sin",
            FOLLOWS_PRECISION,
            lambda r: r.sin,
            default=False,
            available=_is_rotary,
            unavailable=_ROTARY_ONLY,
            include="tables",
        ),
    ),
    example={"kind": "sinusoidal", "length": 3, "d_model": 4},
)
