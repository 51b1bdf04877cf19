"""The /v2 documents, for the contract (KServe's rest_predict_v2.yaml, with this service's models).

The views write these documents themselves (the infer answer may be binary); the schemas describe them.
"""

from __future__ import annotations

import functools
from typing import Any

from marshmallow import EXCLUDE, Schema, fields, validate

from service.protocols.declarations.fields import StrictBoolean
from service.protocols.declarations.schemas import ResponseSchema
from service.protocols.v2.models import Model
from service.protocols.v2.tensors import DTYPES, HEADER_LENGTH
from service.requests import MAX_RANK

DATATYPES = list(DTYPES)


def _nested_elements(levels: int) -> dict[str, Any]:
    """A tensor's JSON element: a number or boolean, or (``levels`` deep) a list of them, for data sent flat
    or nested as its shape. Written out rather than recursive: code generators (openapi-python-client) give
    up on a schema that refers to itself, and on an array without ``items``."""
    scalar: dict[str, Any] = {"type": ["number", "boolean"]}
    if levels == 0:
        return scalar
    return {"anyOf": [scalar, {"type": "array", "items": _nested_elements(levels - 1)}]}


# Request data: a rank-MAX_RANK tensor nested as its shape is MAX_RANK lists deep, the outer one being data.
INPUT_DATA_ITEMS = _nested_elements(MAX_RANK - 1)
# Answer data is always flat; null where /v1 writes null.
OUTPUT_DATA_ITEMS: dict[str, Any] = {"type": ["number", "boolean", "null"]}


class ServerMetadataSchema(ResponseSchema):
    name = fields.String(required=True)
    version = fields.String(required=True)
    extensions = fields.List(fields.String(), required=True)


class LiveSchema(ResponseSchema):
    live = fields.Boolean(required=True)


class ReadySchema(ResponseSchema):
    ready = fields.Boolean(required=True)


class ModelReadySchema(ResponseSchema):
    name = fields.String(required=True)
    ready = fields.Boolean(required=True)


class TensorRanksSchema(ResponseSchema):
    """An input tensor's ranks: its metadata shape has the least; leading dimensions may be added up to the
    most."""

    min_rank = fields.Integer(required=True, metadata={"description": "The least rank: the shape's length."})
    max_rank = fields.Integer(required=True, metadata={"description": "The most dimensions it takes."})
    axes = fields.String(metadata={"description": "The dimensions' names, e.g. [..., n, d_k]."})


class MetadataTensorSchema(ResponseSchema):
    name = fields.String(required=True)
    datatype = fields.String(required=True, validate=validate.OneOf(DATATYPES))
    shape = fields.List(
        fields.Integer(),
        required=True,
        metadata={"description": "The least rank the tensor takes, -1 for each (variable) dimension."},
    )
    parameters = fields.Nested(TensorRanksSchema, metadata={"description": "Inputs: the ranks they take."})


class ModelMetadataSchema(ResponseSchema):
    name = fields.String(required=True)
    versions = fields.List(fields.String(), required=True)
    platform = fields.String(required=True)
    parameters = fields.Dict(
        keys=fields.String(),
        values=fields.String(),
        metadata={"description": "leading_dimensions: how to read the shapes (each the least rank)."},
    )
    inputs = fields.List(fields.Nested(MetadataTensorSchema), required=True)
    outputs = fields.List(fields.Nested(MetadataTensorSchema), required=True)


def _binary_data_size() -> fields.Integer:
    return fields.Integer(
        validate=validate.Range(min=0),
        metadata={
            "description": "This tensor's bytes follow the JSON header (binary tensor data extension)."
        },
    )


class InputParametersSchema(Schema):
    """An input's parameters: ``binary_data_size``, and members this server reads past (MLServer labels every
    input ``content_type``), as the protocol lets it; Triton's shared-memory ones are refused by name (the
    decoder's SHARED_MEMORY_PARAMETERS: this server has no shared memory)."""

    class Meta:
        unknown = EXCLUDE  # documented open: apispec omits additionalProperties: false

    binary_data_size = _binary_data_size()


class OutputParametersSchema(ResponseSchema):
    """An output's parameters in an answer: open to members added later, as every response is."""

    binary_data_size = _binary_data_size()


class BinaryDataSchema(Schema):
    binary_data = StrictBoolean(metadata={"description": "Answer this output as binary tensor data."})


class ResponseOutputSchema(ResponseSchema):
    name = fields.String(required=True)
    datatype = fields.String(required=True, validate=validate.OneOf(DATATYPES))
    shape = fields.List(fields.Integer(), required=True)
    parameters = fields.Nested(OutputParametersSchema)
    data = fields.Raw(
        metadata={
            "description": "Row-major, flattened; null where /v1 writes null. Absent for binary outputs.",
            "type": "array",
            "items": OUTPUT_DATA_ITEMS,
        }
    )


class InferenceResponseSchema(ResponseSchema):
    model_name = fields.String(required=True)
    model_version = fields.String(required=True)
    id = fields.String()
    outputs = fields.List(fields.Nested(ResponseOutputSchema), required=True)


@functools.cache  # one class per model: the contract names each once
def inference_request_schema(model: Model) -> type[Schema]:
    """The JSON header of an infer request to ``model``: its tensor names and its parameters."""
    request_input = Schema.from_dict(
        {
            "name": fields.String(required=True, validate=validate.OneOf(list(model.inputs))),
            "shape": fields.List(fields.Integer(validate=validate.Range(min=0)), required=True),
            "datatype": fields.String(required=True, validate=validate.OneOf(DATATYPES)),
            "parameters": fields.Nested(InputParametersSchema),
            "data": fields.Raw(
                metadata={
                    "description": "Flat (row-major), or nested exactly as shape; absent for binary data.",
                    "type": "array",
                    "items": INPUT_DATA_ITEMS,
                }
            ),
        },
        name=f"{model.schema_name}Input",
    )
    request_output = Schema.from_dict(
        {
            "name": fields.String(required=True, validate=validate.OneOf(list(model.outputs))),
            "parameters": fields.Nested(BinaryDataSchema),
        },
        name=f"{model.schema_name}RequestedOutput",
    )
    return Schema.from_dict(
        {
            "id": fields.String(),
            "parameters": fields.Nested(type(model.parameters)),
            "inputs": fields.List(fields.Nested(request_input), required=True),
            "outputs": fields.List(
                fields.Nested(request_output),
                metadata={"description": "The outputs to answer; absent or empty: the defaults (as /v1)."},
            ),
        },
        name=f"{model.schema_name}InferenceRequest",
    )


def binary_body_doc(description: str) -> dict[str, Any]:
    # OpenAPI 3.1 describes raw bytes by their media type (contentMediaType); generators still read raw bytes
    # from OpenAPI 3.0's type string, format binary (openapi-python-client: a File body), so both are stated.
    # Without a type, openapi-python-client typed the body Any and its infer function crashed on any body.
    return {
        "schema": {
            "type": "string",
            "format": "binary",
            "contentMediaType": "application/octet-stream",
            "description": description,
        }
    }


HEADER_LENGTH_DOC = {
    "description": "Bytes of the JSON header at the start of the body; the binary tensor data follows it.",
    "schema": {"type": "integer", "minimum": 1},
}
BINARY_REQUEST = (
    f"The JSON header ({HEADER_LENGTH} bytes), then each input's binary_data_size bytes in the order of "
    "inputs: little-endian, row-major, BOOL as one byte per element."
)
BINARY_RESPONSE = (
    f"The JSON header ({HEADER_LENGTH} response header), then each binary output's bytes in the order of "
    "outputs. Where /v1 writes null, binary FP outputs hold -inf (a hidden score) or NaN."
)
