"""The Python client as the contract states it: one method per /v1 operation (sync and async) with every field
of its request, Literal types for the closed sets, the generated module in step with openapi.yaml, and every
argument checked before sending (an InvalidInput naming it)."""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
import tomllib
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attention_client
import httpx
import numpy as np
import pytest
import yaml
from attention_client import ApiError, AsyncClient, Client, InvalidInput
from attention_client._client import prepare

from tests.conftest import CONTRACT_PATH

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "client/src/attention_client/_generate.py"
GENERATED = ROOT / "client/src/attention_client/_models.py"


def _spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(CONTRACT_PATH.read_text())
    return spec


def _v1_operations() -> list[tuple[str, str, dict[str, Any]]]:
    """(method name, path, request schema) of every /v1 operation."""
    spec = _spec()
    schemas = spec["components"]["schemas"]
    found = []
    for path, item in spec["paths"].items():
        if path.startswith("/v1/"):
            operation = item["post"]
            reference = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            name = re.sub(r"(?<!^)(?=[A-Z])", "_", operation["operationId"]).lower()
            found.append((name, path, schemas[reference.rsplit("/", 1)[1]]))
    return found


def test_the_generated_module_is_the_contract_s() -> None:
    done = subprocess.run(
        [sys.executable, str(GENERATOR), str(CONTRACT_PATH)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == GENERATED.read_text(), "_models.py is stale: run `make clients`"


@pytest.mark.parametrize("client_class", [Client, AsyncClient])
@pytest.mark.parametrize(("method", "path", "schema"), _v1_operations(), ids=lambda v: str(v)[:30])
def test_every_operation_is_a_method_with_every_request_field(
    client_class: type[Any], method: str, path: str, schema: dict[str, Any]
) -> None:
    function = getattr(client_class, method, None)
    assert function is not None, f"{client_class.__name__} has no {method} for POST {path}"
    assert inspect.iscoroutinefunction(function) is (client_class is AsyncClient)
    parameters = inspect.signature(function).parameters
    assert set(parameters) - {"self"} == set(schema["properties"]), path
    hints = typing.get_type_hints(function)
    for name, field in schema["properties"].items():
        # A closed set is a Literal, in the argument's annotation (itself, or the items of include).
        values = field.get("enum") or _enum(field)
        if values:
            assert set(values) <= set(_literal_values(hints[name])), (method, name)
        if name in schema.get("required", []):
            assert parameters[name].default is inspect.Parameter.empty, (method, name)


def _enum(field: dict[str, Any]) -> list[Any]:
    for alternative in field.get("anyOf", [field]):
        if "enum" in alternative:
            return list(alternative["enum"])
        if "enum" in alternative.get("items", {}):
            return list(alternative["items"]["enum"])
    return []


def _literal_values(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    return [value for argument in typing.get_args(annotation) for value in _literal_values(argument)]


def test_the_version_is_the_package_s() -> None:
    pyproject = tomllib.loads((ROOT / "client/pyproject.toml").read_text())
    assert attention_client.__version__ == pyproject["project"]["version"]


def _never_sent(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"sent {request.method} {request.url}, which the client should have refused")


def _offline() -> Client:
    return Client("http://service.test", transport=httpx.MockTransport(_never_sent))


QUERY, KEY, VALUE = [[0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]], [[6.0, 0.0], [0.0, 3.0]]

REFUSED: dict[str, tuple[Callable[[Client], object], str, str]] = {
    "a typo'd include": (
        lambda c: c.attention(QUERY, KEY, VALUE, include=["weight"]),  # type: ignore[list-item]
        "include",
        r"'weight' is not an optional output of attention\. Did you mean 'weights'\?",
    ),
    "include as a string": (
        lambda c: c.attention(QUERY, KEY, VALUE, include="scores"),  # type: ignore[arg-type]
        "include",
        r"collection of output names such as \['scores'\], not a string",
    ),
    "a ragged array": (
        lambda c: c.attention([[0.0, 1.0], [1.0]], KEY, VALUE),
        "query",
        r"query is not a rectangular array",
    ),
    "a string target": (
        lambda c: c.log_likelihood([[1.0, 2.0]], "1"),
        "targets",
        r"targets must be an array of numbers, got the string '1'",
    ),
    "float targets": (
        lambda c: c.log_likelihood([[1.0, 2.0]], [1.5]),
        "targets",
        r"targets must be integers, got float64",
    ),
    "a NaN in an array": (
        lambda c: c.softmax([1.0, float("nan")]),
        "logits",
        r"logits holds a NaN or an infinity",
    ),
    "an infinite option": (
        lambda c: c.softmax([1.0, 2.0], temperature=float("inf")),
        "temperature",
        r"temperature must be a finite number, got float inf",
    ),
    # Once sent, and refused by the service's JSON parser (a 400 naming the body) or range (a 422).
    "a number beyond any float": (
        lambda c: c.softmax([1.0, 2.0], temperature=10**400),
        "temperature",
        r"temperature must be a finite number, got int 1000",
    ),
    "a number of over 4,300 digits": (
        lambda c: c.softmax([1.0, 2.0], temperature=10**5000),
        "temperature",
        r"temperature must be a finite number, got int of 16610 bits",
    ),
    "an integer beyond INT64": (
        lambda c: c.sample([1.0, 2.0], top_k=2**64),
        "top_k",
        r"top_k must be within INT64 \(-2\*\*63 to 2\*\*63 - 1\), got 18446744073709551616",
    ),
    "an integer below INT64": (
        lambda c: c.log_likelihood([[1.0, 2.0]], [1], ignore_index=-(2**63) - 1),
        "ignore_index",
        r"ignore_index must be within INT64 .*, got -9223372036854775809",
    ),
    "an unbounded integer beyond INT64": (
        lambda c: c.log_likelihood([[1.0, 2.0]], [1], ignore_index=2**64),
        "ignore_index",
        r"ignore_index must be within INT64 .*, got 18446744073709551616",
    ),
    "an option out of range": (
        lambda c: c.softmax([1.0, 2.0], top_p=1.5),
        "top_p",
        r"top_p must be <= 1\.0, got 1\.5",
    ),
    "a value outside a closed set": (
        lambda c: c.attention(QUERY, KEY, VALUE, causal_alignment="lower-right"),  # type: ignore[arg-type]
        "causal_alignment",
        r"must be one of 'lower_right', 'upper_left', got 'lower-right' \(did you mean 'lower_right'\?\)",
    ),
    "a bool for an int": (
        lambda c: c.sample([1.0, 2.0], num_samples=True),
        "num_samples",
        r"num_samples must be an int, got bool True",
    ),
    "a window of three": (
        lambda c: c.attention(QUERY, KEY, VALUE, window=[1, 2, 3]),
        "window",
        r"window must hold 2 items, got 3",
    ),
    "an unknown rotary member": (
        lambda c: c.attention(QUERY, KEY, VALUE, rotary={"bsae": 10.0}),  # type: ignore[typeddict-unknown-key]
        "rotary",
        r"rotary has no member 'bsae'\. Did you mean 'base'\?",
    ),
    "a missing required option": (
        lambda c: c.positional_encoding(kind=None),  # type: ignore[arg-type]
        "kind",
        r"kind must not be None",
    ),
    "a rank the contract does not allow": (
        lambda c: c.attention(QUERY, [1.0, 0.0], VALUE),
        "key",
        r"key must have rank 2 to 4, got shape \[2\]",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_arguments_the_service_would_refuse_raise_invalid_input_naming_them(case: str) -> None:
    call, argument, message = REFUSED[case]
    with _offline() as service, pytest.raises(InvalidInput, match=message) as refused:
        call(service)
    assert refused.value.argument == argument
    assert list(refused.value.errors) == [argument]
    assert isinstance(refused.value, ApiError)
    assert isinstance(refused.value, ValueError)  # as these checks raised before they were ApiErrors
    assert refused.value.status == 0  # nothing was sent


@pytest.mark.parametrize("suffix", ["/v2", "/v1/", "/v2/models/attention"])
def test_a_base_url_with_a_protocol_prefix_is_refused_with_a_hint(suffix: str) -> None:
    with pytest.raises(InvalidInput, match="must be the server root") as refused:
        Client("http://127.0.0.1:8000" + suffix)
    assert refused.value.argument == "base_url"
    with pytest.raises(InvalidInput, match="must be the server root"):
        AsyncClient("http://127.0.0.1:8000" + suffix)


def _generated_with(spec: dict[str, Any]) -> dict[str, Any]:
    """The module the generator writes for ``spec``, run."""
    sys.path.insert(0, str(GENERATOR.parent))
    try:
        import _generate  # type: ignore[import-not-found]  # as make clients runs it: a file
    finally:
        sys.path.remove(str(GENERATOR.parent))
    namespace: dict[str, Any] = {}
    exec(compile(_generate.render(spec), "_models.py", "exec"), namespace)  # our own output, as it is run
    return namespace


def test_options_flattened_on_v2_travel_there_and_the_rest_go_to_v1() -> None:
    # A /v2 model that takes window (a list parameter) and two of rotary's members flattened (rotary.base,
    # rotary.style) gets the calls that set only those; a rotary member it does not take sends it to /v1.
    spec = _spec()
    parameters = spec["components"]["schemas"]["AttentionParameters"]["properties"]
    for name in [name for name in parameters if name.startswith(("window", "rotary"))]:
        del parameters[name]  # whatever /v2 takes today: the test states its own
    parameters["window"] = spec["components"]["schemas"]["AttentionRequest"]["properties"]["window"]
    parameters["rotary.base"] = {"type": ["number", "null"], "exclusiveMinimum": 0}
    parameters["rotary.style"] = {"type": ["string", "null"]}
    attention = _generated_with(spec)["ATTENTION"]
    arguments = {"query": QUERY, "key": KEY, "value": VALUE, "include": ["weights"]}

    flat = prepare(attention, {**arguments, "window": (3, None), "rotary": {"base": 100.0, "style": "half"}})
    assert flat.route == "v2"
    assert flat.call.path == "/v2/models/attention/infer"
    header = json.loads(flat.call.body[: int(flat.call.headers["Inference-Header-Content-Length"])])
    assert header["parameters"] == {
        "window": [3, None],
        "rotary.base": 100.0,
        "rotary.style": "half",
        "include": ["weights"],
        "binary_data_output": True,
    }
    assert "outputs" not in header  # /v2 takes include as a parameter and answers what /v1 would

    partly = prepare(attention, {**arguments, "rotary": {"base": 100.0, "dim": 2}})
    assert partly.route == "v1"
    assert partly.call.path == "/v1/attention"
    assert json.loads(partly.call.body)["rotary"] == {"base": 100.0, "dim": 2}


def test_the_generator_takes_nested_shapes_a_new_model_may_bring() -> None:
    # A model of layers (a list of objects with arrays and closed sets inside, an inline object) gets its
    # method too: such fields are options, checked against their schema and sent to /v1 as JSON.
    spec = _spec()
    layer = {
        "type": "object",
        "properties": {
            "norm": {"type": "string", "enum": ["layer", "rms"]},
            "weight": {"$ref": "#/components/schemas/NumberArrayRank2"},
        },
        "required": ["norm"],
        "additionalProperties": False,
    }
    spec["components"]["schemas"]["StackRequest"] = {
        "type": "object",
        "properties": {
            "x": {"$ref": "#/components/schemas/NumberArrayRank2To4", "description": "The rows."},
            "layers": {"type": "array", "items": layer, "minItems": 1},
            "settings": {"type": ["object", "null"], "properties": {"eps": {"type": "number"}}},
            "activation": {"anyOf": [{"type": "string", "enum": ["gelu", "relu"]}, {"type": "null"}]},
        },
        "required": ["x", "layers"],
        "additionalProperties": False,
    }
    spec["components"]["schemas"]["StackResponse"] = {
        "type": "object",
        "properties": {"output": {"$ref": "#/components/schemas/NumberArrayRank2To4"}},
        "required": ["output"],
    }
    spec["paths"]["/v1/stack"] = {
        "post": {
            "operationId": "stack",
            "summary": "Layers, one after another.",
            "requestBody": {
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/StackRequest"}}}
            },
            "responses": {
                "200": {
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/StackResponse"}}
                    }
                }
            },
        }
    }
    generated = _generated_with(spec)
    method = generated["SyncModels"].stack
    assert list(inspect.signature(method).parameters) == ["self", "x", "layers", "settings", "activation"]
    stack = generated["STACK"]
    prepared = prepare(stack, {"x": [[1.0]], "layers": [{"norm": "rms", "weight": np.eye(1)}]})
    assert prepared.route == "v1"
    assert json.loads(prepared.call.body) == {"x": [[1.0]], "layers": [{"norm": "rms", "weight": [[1.0]]}]}
    with pytest.raises(InvalidInput, match=r"layers\[0\]\.norm must be one of 'layer', 'rms'"):
        prepare(stack, {"x": [[1.0]], "layers": [{"norm": "batch"}]})


def _with_block_model(spec: dict[str, Any], *, on_v2: bool) -> dict[str, Any]:
    """``spec`` with a model whose request holds an object of arrays and options (as a Transformer block's
    ``attention``), on /v1 and, when ``on_v2``, on /v2 with the object's members by path."""
    schemas = spec["components"]["schemas"]
    schemas["BlockAttention"] = {
        "type": "object",
        "properties": {
            "w_q": {"$ref": "#/components/schemas/NumberArrayRank2"},
            "num_heads": {"type": "integer", "minimum": 1},
            "rotary": {"anyOf": [{"$ref": "#/components/schemas/Rotary"}, {"type": "null"}]},
        },
        "required": ["w_q", "num_heads"],
        "additionalProperties": False,
    }
    schemas["BlockRequest"] = {
        "type": "object",
        "properties": {
            "x": {"$ref": "#/components/schemas/NumberArrayRank2To4"},
            "attention": {"$ref": "#/components/schemas/BlockAttention"},
        },
        "required": ["x", "attention"],
        "additionalProperties": False,
    }
    schemas["BlockResponse"] = {
        "type": "object",
        "properties": {"output": {"$ref": "#/components/schemas/NumberArrayRank2To4"}},
        "required": ["output"],
    }

    def body(name: str) -> dict[str, Any]:
        return {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}

    spec["paths"]["/v1/block"] = {
        "post": {
            "operationId": "block",
            "requestBody": body("BlockRequest"),
            "responses": {"200": body("BlockResponse")},
        }
    }
    if on_v2:
        schemas["BlockParameters"] = {
            "type": "object",
            "properties": {
                "attention.num_heads": {"type": "integer"},
                "attention.rotary.base": {"type": "number"},
            },
        }
        schemas["BlockInput"] = {"properties": {"name": {"enum": ["x", "attention.w_q"]}}}
        schemas["BlockRequestedOutput"] = {"properties": {"name": {"enum": ["output"]}}}
        schemas["BlockInferenceRequest"] = {
            "type": "object",
            "properties": {
                "parameters": {"$ref": "#/components/schemas/BlockParameters"},
                "inputs": {"type": "array", "items": {"$ref": "#/components/schemas/BlockInput"}},
                "outputs": {"type": "array", "items": {"$ref": "#/components/schemas/BlockRequestedOutput"}},
            },
        }
        spec["paths"]["/v2/models/block/infer"] = {"post": {"requestBody": body("BlockInferenceRequest")}}
    return spec


def test_an_object_of_arrays_travels_on_v2_as_tensors_by_path() -> None:
    block = _generated_with(_with_block_model(_spec(), on_v2=True))["BLOCK"]
    w_q = np.arange(6.0).reshape(2, 3)
    attention = {"w_q": w_q, "num_heads": 2, "rotary": {"base": 100.0}}
    prepared = prepare(block, {"x": [[1.0, 2.0]], "attention": attention})
    assert prepared.route == "v2"
    head_length = int(prepared.call.headers["Inference-Header-Content-Length"])
    header = json.loads(prepared.call.body[:head_length])
    assert [(i["name"], i["shape"], i["datatype"]) for i in header["inputs"]] == [
        ("x", [1, 2], "FP64"),
        ("attention.w_q", [2, 3], "FP64"),
    ]
    assert header["parameters"] == {
        "attention.num_heads": 2,
        "attention.rotary.base": 100.0,
        "binary_data_output": True,
    }
    assert prepared.call.body[head_length + 16 :] == w_q.tobytes()  # after x's two FP64

    # A member /v2 does not take (rotary.style) sends the call to /v1, the array written as lists.
    styled = prepare(block, {"x": [[1.0, 2.0]], "attention": {**attention, "rotary": {"style": "half"}}})
    assert styled.route == "v1"
    assert json.loads(styled.call.body)["attention"]["w_q"] == w_q.tolist()
    with pytest.raises(InvalidInput, match=r"attention\.w_q holds a NaN or an infinity") as refused:
        prepare(block, {"x": [[1.0]], "attention": {**attention, "w_q": np.full((2, 2), np.inf)}})
    assert refused.value.argument == "attention"


def test_an_object_of_arrays_without_a_v2_model_is_json() -> None:
    block = _generated_with(_with_block_model(_spec(), on_v2=False))["BLOCK"]
    prepared = prepare(
        block, {"x": [[1.0]], "attention": {"w_q": np.eye(2, dtype=np.float32), "num_heads": 1}}
    )
    assert prepared.route == "v1"
    assert json.loads(prepared.call.body) == {
        "x": [[1.0]],
        "attention": {"w_q": [[1.0, 0.0], [0.0, 1.0]], "num_heads": 1},
    }
