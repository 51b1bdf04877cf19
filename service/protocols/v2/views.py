"""/v2: the Open Inference Protocol (KServe v2) over HTTP, with the binary tensor data extension.

One route set per declared model (service.protocols.v2.models), with and without ``/versions/1``. An infer
request travels like a /v1 one: bytes → the same typed request → ``run_admitted`` (limits, a compute
slot, the kernel) → bytes; only the codec differs. Errors are the /v1 problem documents plus the
protocol's ``error`` member (service.web.problems adds it under /v2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import islice
from typing import Any

from flask import Response, request
from flask.globals import request_ctx
from marshmallow import Schema, ValidationError
from werkzeug.exceptions import NotFound

from service.identity import API_VERSION
from service.kernels import KernelError
from service.protocols.declarations.errors import COMPUTE_ERRORS
from service.protocols.v2.models import (
    BINARY_DATA_OUTPUT,
    INCLUDE,
    MODELS,
    PRECISION,
    VERSION,
    Model,
)
from service.protocols.v2.schemas import (
    BINARY_REQUEST,
    BINARY_RESPONSE,
    HEADER_LENGTH_DOC,
    InferenceResponseSchema,
    LiveSchema,
    ModelMetadataSchema,
    ModelReadySchema,
    ReadySchema,
    ServerMetadataSchema,
    binary_body_doc,
    inference_request_schema,
)
from service.protocols.v2.tensors import (
    DTYPES,
    HEADER_LENGTH,
    InputSpec,
    OutputTensor,
    decode_inputs,
    encode_outputs,
    invalid,
    malformed,
    parse_header,
    split_body,
)
from service.web.admission import answered, decode_off_the_loop, room_for_parsing, run_admitted
from service.web.body import require_media_type
from service.web.encodings import read_decoded_body
from service.web.json_provider import dumps_bytes
from service.web.limits import JSON_ANSWER, AnswerEncoding, binary_answer
from service.web.problems import (
    MAX_REPORTED_FIELDS,
    Problem,
    did_you_mean,
    problem_from_http_exception,
    problem_from_validation_messages,
    problem_response,
)
from service.web.readiness import self_check
from service.web.routes import Routes

routes = Routes(
    "v2",
    __name__,
    url_prefix="/v2",
    description="The Open Inference Protocol (KServe v2): the same models as /v1, with binary tensors.",
)

SERVER_NAME = "attention-service"
# As Triton names them (its "statistics" extension is /v2/models/{m}/stats); the repository index alone is not
# "model_repository", which would also load and unload models.
EXTENSIONS = ["binary_tensor_data", "parameters", "model_configuration", "statistics"]
OUTPUT_BINARY_DATA = "binary_data"  # the one output parameter (binary tensor data extension)
INFER_ERRORS = (*COMPUTE_ERRORS, 422)
# What a tensor's metadata shape means: the least rank it takes, every dimension variable.
LEADING_DIMENSIONS = (
    "Each shape gives the least rank a tensor takes; tensors may have more leading dimensions, up to each "
    "input's parameters.max_rank, which broadcast against each other's (as NumPy's), and the outputs have "
    "the inputs' leading dimensions."
)


@routes.get("", operation_id="serverMetadata", response=ServerMetadataSchema)
def server_metadata() -> dict[str, Any]:
    """Server metadata: name, version and the protocol extensions supported."""
    return {"name": SERVER_NAME, "version": API_VERSION, "extensions": EXTENSIONS}


@routes.get("/health/live", operation_id="serverLive", response=LiveSchema)
def server_live() -> dict[str, bool]:
    """Liveness (as /livez)."""
    return {"live": True}


@routes.get("/health/ready", operation_id="serverReady", response=ReadySchema, errors=(503,))
def server_ready() -> dict[str, bool]:
    """Readiness (as /readyz: a tiny attention computation succeeds and is right)."""
    self_check()
    return {"ready": True}


_MODEL_PATH = re.compile(r"/v2/models/(?P<model>[^/]*)(?:/versions/(?P<version>[^/]*))?(?:/.*)?")
# Triton's extensions this server lacks, by their paths' patterns: a client calling one (tritonclient's
# load_model, register_system_shared_memory…) is told which extension is missing, not only "not found".
_MISSING_EXTENSIONS = (
    (re.compile(r"/v2/repository/models/[^/]*/(?:load|unload)"), "model_repository (load and unload)"),
    (re.compile(r"/v2/systemsharedmemory(?:/.*)?"), "system_shared_memory"),
    (re.compile(r"/v2/cudasharedmemory(?:/.*)?"), "cuda_shared_memory"),
    (re.compile(r"/v2(?:/models/[^/]*(?:/versions/[^/]*)?)?/trace/setting"), "trace"),
    (re.compile(r"/v2/logging"), "logging"),
)


@routes.blueprint.app_errorhandler(NotFound)
def not_found(error: NotFound) -> Response:
    """A 404 under /v2/models names the unknown model or version, as tritonclient shows it, and one for a
    Triton extension this server lacks names the extension; else the usual."""
    for pattern, extension in _MISSING_EXTENSIONS:
        if pattern.fullmatch(request.path):
            detail = (
                f"This server does not implement Triton's {extension} extension; its extensions are "
                f"{', '.join(EXTENSIONS)} (GET /v2)."
            )
            return problem_response(Problem(404, detail, slug="unsupported-extension", title="Not Found"))
    match = _MODEL_PATH.fullmatch(request.path)
    if match is None:
        return problem_response(problem_from_http_exception(error))
    name, version = match["model"], match["version"]
    if name not in MODELS:
        field = "model"
        detail = f"There is no model {name[:60]!r}; the models are {', '.join(MODELS)}."
    elif version is not None and version != VERSION:
        field = "version"
        detail = f"Model {name!r} has no version {version[:20]!r}; its only version is {VERSION}."
    else:
        return problem_response(problem_from_http_exception(error))
    return problem_response(Problem(404, detail, errors={field: [detail]}))


def _register(model: Model, prefix: str, suffix: str) -> None:
    """The metadata, readiness and infer routes of ``model`` under ``prefix`` (with or without a version)."""
    label = model.name.replace("-", "_") + suffix

    def metadata() -> dict[str, Any]:
        return model_metadata(model)

    def ready() -> dict[str, Any]:
        self_check()
        return {"name": model.name, "ready": True}

    def infer() -> Response:
        return _infer(model)

    metadata.__doc__ = (
        f"Metadata of the {model.name} model: its input and output tensors.\n\n{model.description}"
    )
    ready.__doc__ = f"Readiness of the {model.name} model."
    infer.__doc__ = (
        f"Infer with the {model.name} model: JSON tensors, or binary tensor data after the JSON header.\n\n"
        f"{model.description} Parameters are the /v1 options, with the same names, defaults and rules."
    )
    routes.get(
        prefix,
        endpoint=f"{label}_metadata",
        operation_id=_operation_id(label, "metadata"),
        response=ModelMetadataSchema,
    )(metadata)
    routes.get(
        f"{prefix}/ready",
        endpoint=f"{label}_ready",
        operation_id=_operation_id(label, "ready"),
        response=ModelReadySchema,
        errors=(503,),
    )(ready)
    routes.post(
        f"{prefix}/infer",
        endpoint=f"{label}_infer",
        operation_id=_operation_id(label, "infer"),
        errors=INFER_ERRORS,
        parameters=[{"in": "header", "name": HEADER_LENGTH, "required": False, **HEADER_LENGTH_DOC}],
        request_body={
            "required": True,
            "content": {
                "application/json": {"schema": inference_request_schema(model)},
                "application/octet-stream": binary_body_doc(BINARY_REQUEST),
            },
        },
        responses={
            "200": {
                "description": "The outputs; binary ones follow the JSON header.",
                "content": {
                    "application/json": {"schema": InferenceResponseSchema},
                    "application/octet-stream": binary_body_doc(BINARY_RESPONSE),
                },
                "headers": {HEADER_LENGTH: HEADER_LENGTH_DOC},
            }
        },
    )(infer)


def _operation_id(label: str, operation: str) -> str:
    """``log_likelihood_versioned``, ``infer`` → ``logLikelihoodInferVersioned``: the JS client's style."""
    model, versioned, _ = label.partition("_versioned")
    words = [*model.split("_"), operation, *(["versioned"] if versioned else [])]
    return words[0] + "".join(word.capitalize() for word in words[1:])


for _model in MODELS.values():
    _register(_model, f"/models/{_model.name}", "")
    _register(_model, f"/models/{_model.name}/versions/{VERSION}", "_versioned")


def model_metadata(model: Model) -> dict[str, Any]:
    return {
        "name": model.name,
        "versions": [VERSION],
        "platform": "numpy",
        "parameters": {"leading_dimensions": LEADING_DIMENSIONS},
        "inputs": [_input_metadata(name, spec) for name, spec in model.inputs.items()],
        "outputs": [
            {
                "name": name,
                "datatype": model.output_datatype(spec, "float64"),
                "shape": list(model.metadata_shape(spec)),
            }
            for name, spec in model.outputs.items()
        ],
    }


def _input_metadata(name: str, spec: InputSpec) -> dict[str, Any]:
    """An input tensor's metadata: its least rank as its shape, and in its parameters the ranks it takes
    and, where declared, its dimensions' names."""
    parameters: dict[str, Any] = {"min_rank": len(spec.shape), "max_rank": spec.max_rank}
    if spec.axes is not None:
        parameters["axes"] = spec.axes
    return {"name": name, "datatype": spec.datatypes[0], "shape": list(spec.shape), "parameters": parameters}


def _infer(model: Model) -> Response:
    current = request_ctx.request  # the request itself: the proxy finds the context again on each attribute
    # tritonclient labels nothing; other labels the contract does not list are refused, as on /v1
    require_media_type(current, ("application/json", "application/octet-stream"), unlabelled=True)
    body = read_decoded_body(current)
    header, binary = split_body(body, current.headers.get(HEADER_LENGTH))
    # As /v1: a large body is decoded off the worker's loop, and the answer is encoded with the computation.
    with room_for_parsing(body, len(header)):  # the header is the body's first bytes
        decoded = decode_off_the_loop(lambda: _decode(model, header, binary), body_bytes=len(body))
    computation = answered(decoded.typed, lambda result: _encode(model, decoded, result))
    head, chunks = run_admitted(computation, _answer_encoding(model, decoded.outputs, decoded.precision))
    if not chunks:
        return Response(head, mimetype="application/json")
    response = Response([head, *chunks], mimetype="application/octet-stream")
    response.headers[HEADER_LENGTH] = str(len(head))
    response.content_length = len(head) + sum(len(chunk) for chunk in chunks)
    return response


@dataclass(frozen=True)
class _Decoded:
    """An infer request, decoded: its typed request and the outputs to answer (each binary or not)."""

    request_id: str | None
    typed: Any
    outputs: dict[str, bool]
    precision: str


def _decode(model: Model, header: memoryview, binary: memoryview) -> _Decoded:
    document = parse_header(header)
    request_id = document.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise malformed("id must be a string.", field="id")
    arrays = decode_inputs(document.get("inputs"), binary, model.inputs)
    parameters, binary_by_default = _parameters(document.get("parameters"), model)
    if PRECISION in model.parameter_fields and parameters.get(PRECISION) is None:
        # The answer's float type follows the inputs': FP32 throughout gives float32.
        floats = [array.dtype for array in arrays.values() if array.dtype.kind == "f"]
        parameters[PRECISION] = "float32" if floats and all(d.itemsize == 4 for d in floats) else "float64"
    explicit = _requested_outputs(document.get("outputs"), model, binary_by_default)
    typed = _typed_request(model, model.body(arrays, parameters), explicit)
    outputs = _answered_outputs(model, typed, explicit, binary_by_default)
    return _Decoded(request_id, typed, outputs, parameters.get(PRECISION) or "float64")


def _encode(model: Model, decoded: _Decoded, result: Any) -> tuple[bytes, list[bytes]]:
    """The answer's JSON header and its binary chunks."""
    tensors = [
        OutputTensor(name, array, binary)
        for name, binary in decoded.outputs.items()
        if (array := model.outputs[name].read(result)) is not None
    ]
    described, chunks = encode_outputs(tensors)
    answer: dict[str, Any] = {"model_name": model.name, "model_version": VERSION, "outputs": described}
    if decoded.request_id is not None:
        answer["id"] = decoded.request_id
    return dumps_bytes(answer), chunks


def _parameters(raw: object, model: Model) -> tuple[dict[str, Any], bool]:
    """The request's parameters by path, each a field of the model's request schema (checked by it when the
    body is loaded), and whether outputs are binary by default (the extension's ``binary_data_output``)."""
    if raw is None:
        return {}, False
    if not isinstance(raw, dict):
        raise malformed("parameters must be an object.", field="parameters")
    parameters = dict(raw)
    binary_by_default = parameters.pop(BINARY_DATA_OUTPUT, None)
    if binary_by_default is None:
        binary_by_default = False
    if not isinstance(binary_by_default, bool):
        raise invalid("Not a valid boolean.", field=BINARY_DATA_OUTPUT)
    unknown = parameters.keys() - model.parameter_fields.keys()
    if unknown:
        tensors = sorted(unknown & model.inputs.keys())
        if tensors:
            raise invalid(
                "is an input tensor of this model: send it in inputs, not parameters.", field=tensors[0]
            )
        listed = islice((name for name in parameters if name in unknown), MAX_REPORTED_FIELDS)
        raise problem_from_validation_messages(
            {name: ["Unknown field."] for name in listed}, model.parameters
        )
    # null is "absent" for an optional parameter, as for /v1's fields (the contract documents them nullable).
    # Dropped here: put at its path, rotary.base: null would make a rotary object and turn rotary on.
    present = {
        name: value
        for name, value in parameters.items()
        if value is not None or name in model.required_parameters
    }
    return present, binary_by_default


def _requested_outputs(outputs: object, model: Model, binary_by_default: bool) -> dict[str, bool] | None:
    """The outputs named in the request, each with whether it is to be binary; ``None`` if none are named."""
    if outputs is None or outputs == []:  # names none, as Triton reads it (it then answers every output)
        return None
    if not isinstance(outputs, list):
        raise malformed("outputs must be a list of {name, parameters} objects.", field="outputs")
    if len(outputs) > len(model.outputs):
        raise invalid(
            f"this model has {len(model.outputs)} outputs ({', '.join(model.outputs)}).", field="outputs"
        )
    requested: dict[str, bool] = {}
    for position, output in enumerate(outputs):
        if not isinstance(output, dict) or not isinstance(output.get("name"), str):
            raise malformed(f"outputs[{position}] must be an object with a name.", field="outputs")
        name = output["name"]
        if name not in model.outputs:
            hint = did_you_mean(name, list(model.outputs))
            allowed = ", ".join(model.outputs)
            raise invalid(
                f"unknown output {name[:60]!r}.{hint} This model's outputs are: {allowed}.", field="outputs"
            )
        if name in requested:
            raise invalid(f"output {name!r} is named twice.", field="outputs")
        parameters = output.get("parameters")
        if parameters is None:
            parameters = {}
        if not isinstance(parameters, dict):
            raise malformed(f"outputs[{position}].parameters must be an object.", field="outputs")
        unsupported = sorted(set(parameters) - {OUTPUT_BINARY_DATA})
        if unsupported:
            # Ignoring it would answer something else than asked (raw scores for Triton's classification).
            raise invalid(
                f"output {name!r} has parameter {unsupported[0][:60]!r}, which this server does not support: "
                f"an output takes only {OUTPUT_BINARY_DATA} (the extensions are {', '.join(EXTENSIONS)}).",
                field="outputs",
            )
        binary = parameters.get(OUTPUT_BINARY_DATA, binary_by_default)
        if not isinstance(binary, bool):
            raise malformed(
                f"outputs[{position}].parameters.binary_data must be true or false.", field="outputs"
            )
        requested[name] = binary
    return requested


def _typed_request(model: Model, body: dict[str, Any], explicit: dict[str, bool] | None) -> Any:
    """The typed request ``body`` loads into through the model's schema, computing the outputs asked for: the
    ``include`` parameter (as /v1's) and the requested outputs that need it (``weights``, ``tables``…)."""
    schema = model.declaration.request_schema
    if explicit is not None and model.include_choices:
        asked = body.get(INCLUDE, [])
        needed = model.include_for(frozenset(explicit))
        # Only a list of names is merged; anything else is left for the schema to refuse, naming include.
        names = isinstance(asked, list) and all(isinstance(item, str) for item in asked)
        if names and set(needed) - set(asked):
            body[INCLUDE] = [*asked, *(name for name in needed if name not in asked)]
    try:
        typed = schema.load(body)
    except (ValidationError, KernelError) as error:
        refused = error.messages if isinstance(error, ValidationError) else {error.field: []}
        if explicit is not None and INCLUDE in refused:
            # An include the request's other fields rule out (a rotary table for a sinusoidal encoding, which
            # the typed request refuses): name the output that asked for it, as the client wrote it.
            body.pop(INCLUDE)
            _check_available(model, _load(schema, body), explicit)
        if isinstance(error, KernelError):
            raise
        raise problem_from_validation_messages(error.messages, schema) from None
    if explicit is not None:
        _check_available(model, typed, explicit)
    return typed


def _load(schema: Schema, body: dict[str, Any]) -> Any:
    try:
        return schema.load(body)
    except ValidationError as error:
        raise problem_from_validation_messages(error.messages, schema) from None


def _check_available(model: Model, typed: Any, explicit: dict[str, bool]) -> None:
    for name in explicit:
        spec = model.outputs[name]
        if not spec.available(typed):
            raise invalid(f"output {name!r} {spec.unavailable}.", field="outputs")


def _answered_outputs(
    model: Model, typed: Any, explicit: dict[str, bool] | None, binary_by_default: bool
) -> dict[str, bool]:
    """The outputs the answer holds: those asked for, or those /v1 would answer (the defaults and those its
    ``include`` asks for) where available."""
    if explicit is not None:
        return explicit
    included = frozenset(getattr(typed, INCLUDE, ()))
    return {
        name: binary_by_default
        for name, spec in model.outputs.items()
        if spec.available(typed) and (spec.default or (spec.include or name) in included)
    }


def _answer_encoding(model: Model, answered: dict[str, bool], precision: str) -> AnswerEncoding:
    """How the answer's values are written, for its size estimate: binary data at the widest binary datatype
    answered (8 bytes for FP64 and INT64, 4 for FP32), JSON text as soon as one output is JSON."""
    if not answered or not all(answered.values()):
        return JSON_ANSWER
    widest = max(DTYPES[model.output_datatype(model.outputs[name], precision)].itemsize for name in answered)
    return binary_answer(widest)
