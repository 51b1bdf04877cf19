"""/v2's Triton extensions that clients call besides the protocol: model configuration, repository index.

``GET /v2/models/{model}/config`` answers Triton's model configuration (the JSON form of its ``ModelConfig``),
so ``tritonclient``'s ``get_model_config`` reads it: the same tensors as the model's metadata, with Triton's
``TYPE_`` datatypes and ``dims``, and ``max_batch_size`` 0 (the models take any leading dimensions and batch
nothing on the server's side). ``POST /v2/repository/index`` lists every model, each ``READY`` (the models are
code: they are loaded with the service and cannot be unloaded), so ``get_model_repository_index`` reads it.
"""

from __future__ import annotations

from typing import Any

import orjson
from flask import request
from marshmallow import Schema, ValidationError, fields, validate
from werkzeug.exceptions import NotFound

from service.protocols.declarations.fields import StrictBoolean
from service.protocols.declarations.schemas import RequestSchema, ResponseSchema
from service.protocols.v2.models import MODELS, VERSION, Model
from service.protocols.v2.tensors import DTYPES, malformed
from service.protocols.v2.views import model_metadata
from service.web.body import require_media_type
from service.web.encodings import read_decoded_body
from service.web.problems import Problem, problem_from_validation_messages
from service.web.routes import Routes

routes = Routes(
    "v2-repository",
    __name__,
    url_prefix="/v2",
    description="Triton's model configuration and model repository extensions, as tritonclient calls them.",
)

PLATFORM = "numpy"
READY = "READY"
# The largest index request read: {"ready": true} with room for whitespace (tritonclient sends 16 bytes).
INDEX_REQUEST_BYTES = 4096
# Triton's configuration names a datatype TYPE_ and its protocol name, except for strings (TYPE_STRING).
CONFIG_DATATYPES = [f"TYPE_{datatype}" for datatype in DTYPES]


class ConfigTensorSchema(ResponseSchema):
    name = fields.String(required=True)
    data_type = fields.String(required=True, validate=validate.OneOf(CONFIG_DATATYPES))
    format = fields.String(required=True, metadata={"description": "Always FORMAT_NONE: no image layout."})
    dims = fields.List(
        fields.Integer(),
        required=True,
        metadata={
            "description": "As the metadata's shape: -1 for a variable dimension, the least rank the tensor "
            "takes (leading dimensions broadcast: the metadata's parameters give the rank's range)."
        },
    )
    optional = fields.Boolean(metadata={"description": "Inputs only: the model runs without this tensor."})


class SpecificVersionsSchema(ResponseSchema):
    versions = fields.List(fields.Integer(), required=True)


class VersionPolicySchema(ResponseSchema):
    specific = fields.Nested(
        SpecificVersionsSchema, required=True, metadata={"description": "The versions served: [1]."}
    )


class ModelConfigSchema(ResponseSchema):
    name = fields.String(required=True)
    platform = fields.String(required=True)
    backend = fields.String(required=True)
    version_policy = fields.Nested(VersionPolicySchema, required=True)
    max_batch_size = fields.Integer(
        required=True,
        metadata={"description": "0: the tensors' shapes are given whole, with no batch dimension added."},
    )
    input = fields.List(fields.Nested(ConfigTensorSchema), required=True)
    output = fields.List(fields.Nested(ConfigTensorSchema), required=True)


class RepositoryIndexRequestSchema(RequestSchema):
    ready = StrictBoolean(
        metadata={"description": "Only models ready to infer (every model of this service is ready)."}
    )


class RepositoryModelSchema(ResponseSchema):
    name = fields.String(required=True)
    version = fields.String(required=True)
    state = fields.String(required=True, validate=validate.OneOf([READY]))


def _model_parameter() -> dict[str, Any]:
    return {
        "in": "path",
        "name": "model",
        "required": True,
        "schema": {"type": "string", "enum": list(MODELS)},
    }


def _version_parameter() -> dict[str, Any]:
    return {
        "in": "path",
        "name": "version",
        "required": True,
        "schema": {"type": "string", "enum": [VERSION]},
    }


@routes.get(
    "/models/<model>/config",
    operation_id="modelConfig",
    response=ModelConfigSchema,
    errors=(404,),
    parameters=[_model_parameter()],
)
def model_config(model: str) -> dict[str, Any]:
    """A model's configuration, in Triton's shape (tritonclient's get_model_config).

    The same tensors as the model's metadata, with Triton's data types (TYPE_FP64, …) and dims.
    """
    return config_of(_model(model))


@routes.get(
    "/models/<model>/versions/<version>/config",
    operation_id="modelConfigVersioned",
    response=ModelConfigSchema,
    errors=(404,),
    parameters=[_model_parameter(), _version_parameter()],
)
def model_config_versioned(model: str, version: str) -> dict[str, Any]:
    """A model version's configuration, in Triton's shape (tritonclient's get_model_config)."""
    if version != VERSION:
        raise NotFound()  # answered naming the version (service.protocols.v2.views.not_found)
    return config_of(_model(model))


@routes.post(
    "/repository/index",
    operation_id="repositoryIndex",
    response=RepositoryModelSchema(many=True),
    errors=(400, 413, 415, 422),
    request_body={
        "required": False,
        "content": {"application/json": {"schema": RepositoryIndexRequestSchema}},
    },
)
def repository_index() -> list[dict[str, str]]:
    """Every model and its state (tritonclient's get_model_repository_index).

    The body is optional (tritonclient sends none); every model is READY.
    """
    _read_index_request()
    return [{"name": name, "version": VERSION, "state": READY} for name in MODELS]


def config_of(model: Model) -> dict[str, Any]:
    """``model``'s configuration in Triton's JSON form: its metadata's tensors with ``TYPE_`` datatypes."""
    metadata = model_metadata(model)
    return {
        "name": model.name,
        "platform": PLATFORM,
        "backend": PLATFORM,
        "version_policy": {"specific": {"versions": [int(VERSION)]}},
        "max_batch_size": 0,
        "input": [
            {**_config_tensor(tensor), "optional": not model.inputs[tensor["name"]].required}
            for tensor in metadata["inputs"]
        ],
        "output": [_config_tensor(tensor) for tensor in metadata["outputs"]],
    }


def _config_tensor(tensor: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": tensor["name"],
        "data_type": f"TYPE_{tensor['datatype']}",
        "format": "FORMAT_NONE",
        "dims": list(tensor["shape"]),
    }


def _model(name: str) -> Model:
    model = MODELS.get(name)
    if model is None:
        raise NotFound()  # answered naming the model (service.protocols.v2.views.not_found)
    return model


def _read_index_request() -> dict[str, Any]:
    """The index request's options: none for an empty body, else a JSON object of them (``ready``)."""
    body = read_decoded_body(request)
    if not body:  # whitespace is not an empty body: it is not JSON either (a 400)
        return {}
    # A body is labelled JSON, as the contract declares (tritonclient sends none): text, a form or no label
    # is a 415, not read as JSON regardless.
    require_media_type(request, ("application/json",))
    if len(body) > INDEX_REQUEST_BYTES:
        # Parsed on the worker's loop, as it is small; a large one could hold the loop and the memory.
        raise Problem(
            413,
            f"The index request has {len(body):,} bytes; its one option (ready) takes a few, and the limit "
            f"is {INDEX_REQUEST_BYTES:,}.",
            slug="body-too-large",
        )
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise malformed(f"The index request is not valid JSON: {error}.", field="body") from None
    if not isinstance(document, dict):
        raise malformed("The index request must be a JSON object, such as {}.", field="body")
    schema: Schema = RepositoryIndexRequestSchema()
    try:
        loaded: dict[str, Any] = schema.load(document)
    except ValidationError as error:
        raise problem_from_validation_messages(error.messages, schema) from None
    return loaded
