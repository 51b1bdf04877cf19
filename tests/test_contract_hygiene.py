"""The contract reads cleanly for generators and linters (Redocly, Spectral): one operationId per operation,
named as the JS client names its functions; stated security; one bound per side; no unused components;
no YAML anchors; a server; examples for the main errors, which are the service's real answers; response
schemas open to members added later."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from flask.testing import FlaskClient

from service import create_app
from service.site import javascript
from service.site.spec import PROBLEM_EXAMPLES
from service.web.api_keys import is_protected
from tests.conftest import CONTRACT_PATH
from tests.tolerance import assert_json_close

JS_MODELS = Path(__file__).resolve().parent.parent / "service" / "static" / "models.js"


def _spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(CONTRACT_PATH.read_text())
    return spec


def _operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            if method != "parameters":  # shared by the path's operations, not one of them
                yield path, method, operation


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_every_operation_has_a_unique_operation_id() -> None:
    ids = [operation.get("operationId") for _, _, operation in _operations(_spec())]
    assert all(ids), ids
    assert len(ids) == len(set(ids))


def test_operation_ids_are_the_js_client_function_names() -> None:
    # export function attention(body, options) { return postJson("/v1/attention", body, options); }
    exported = r'export function (\w+)\(body, options\) \{\s*return postJson\("([^"]+)"'
    functions = dict(re.findall(exported, JS_MODELS.read_text()))
    assert set(functions) >= {"attention", "softmax", "logLikelihood"}
    spec = _spec()
    for name, path in functions.items():
        assert spec["paths"][path]["post"]["operationId"] == name


def test_every_v1_operation_has_a_js_function_reaching_every_request_field() -> None:
    # Each function posts its body as given, so every field reaches the service; its comment lists them all,
    # so a field the contract gains and the comment lacks (once: window, softcap, rotary, enable_gqa and
    # alibi_slopes on attention) fails here.
    documented = (
        r"/\*\*((?:(?!\*/).)*)\*/\s*"  # the comment just above
        r'export function (\w+)\(body, options\) \{\s*return postJson\("([^"]+)", body, options\);'
    )
    functions = {
        name: (path, comment) for comment, name, path in re.findall(documented, JS_MODELS.read_text(), re.S)
    }
    spec = _spec()
    for path, method, operation in _operations(spec):
        if not path.startswith("/v1/"):
            continue
        name = operation["operationId"]
        assert name in functions, f"models.js has no function {name} for {method.upper()} {path}"
        assert functions[name][0] == path
        reference = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        schema = spec["components"]["schemas"][reference.removeprefix("#/components/schemas/")]
        comment = functions[name][1]
        missing = [field for field in schema["properties"] if not re.search(rf"\b{field}\b", comment)]
        assert not missing, f"the comment of {name} in models.js does not name {missing}"


def test_the_js_model_functions_are_written_from_the_declarations() -> None:
    # models.js is generated (make openapi); a model declared since it was written fails here.
    assert JS_MODELS.read_text(encoding="utf-8") == javascript.render(), "run make openapi"


def test_security_is_stated_for_every_operation() -> None:
    spec = _spec()
    assert spec["security"] == [{}, {"bearerAuth": []}]  # the computations: no key, or a bearer key
    for path, _, operation in _operations(spec):
        assert operation.get("security") == (None if is_protected(path) else []), path


def test_one_bound_per_side() -> None:
    for schema in _walk(_spec()):
        assert not {"minimum", "exclusiveMinimum"} <= set(schema), schema
        assert not {"maximum", "exclusiveMaximum"} <= set(schema), schema


def test_every_array_schema_states_its_items() -> None:
    # openapi-python-client drops a schema holding an array without items, and every schema using it (once,
    # every /v2 infer request, whose tensors' data had none).
    for schema in _walk(_spec()):
        kinds = schema.get("type")
        if kinds == "array" or (isinstance(kinds, list) and "array" in kinds):
            assert "items" in schema or "prefixItems" in schema, schema


def test_every_component_is_used() -> None:
    spec = _spec()
    refs = {node["$ref"] for node in _walk(spec) if "$ref" in node}
    for kind, components in spec["components"].items():
        if kind == "securitySchemes":
            continue  # used by name in security requirements
        for name in components:
            assert f"#/components/{kind}/{name}" in refs, f"{kind}/{name} is never used"


def test_no_yaml_anchors_and_a_server() -> None:
    text = CONTRACT_PATH.read_text()
    assert not [event for event in yaml.parse(text) if getattr(event, "anchor", None)]
    assert _spec()["servers"] == [{"url": "/", "description": "The service that serves this contract."}]


def test_response_schemas_allow_members_added_later() -> None:
    spec = _spec()
    schemas = spec["components"]["schemas"]
    answers = [operation["responses"] for _, _, operation in _operations(spec)]
    in_answers = _referenced([*answers, spec["components"]["responses"]], schemas)
    assert {"Problem", "AttentionResponse", "SoftmaxResponse", "LikelihoodResponse"} <= in_answers
    for name in in_answers:  # clients must ignore members they do not know; the contract lets them come
        assert not [node for node in _walk(schemas[name]) if node.get("additionalProperties") is False], name
    for name in ("AttentionRequest", "SoftmaxRequest", "LikelihoodRequest"):  # unknown fields are refused
        assert schemas[name]["additionalProperties"] is False


def _referenced(roots: list[Any], schemas: dict[str, Any]) -> set[str]:
    """The names of the schema components ``roots`` refer to, directly or through other components."""
    found: set[str] = set()
    pending = list(roots)
    while pending:
        for node in _walk(pending.pop()):
            name = node.get("$ref", "").removeprefix("#/components/schemas/")
            if name in schemas and name not in found:
                found.add(name)
                pending.append(schemas[name])
    return found


def test_main_error_responses_have_examples() -> None:
    responses = _spec()["components"]["responses"]
    for name in ("UNPROCESSABLE_CONTENT", "CONTENT_TOO_LARGE"):
        assert responses[name]["content"]["application/problem+json"]["examples"], name


def test_the_error_examples_are_what_the_service_answers(client: FlaskClient) -> None:
    (example,) = PROBLEM_EXAMPLES[422].values()
    answer = client.post("/v1/softmax", json={"logits": [1.0, 2.0], "temprature": 0.5})
    _compare(answer.get_json(), example["value"], status=answer.status_code)

    (example,) = PROBLEM_EXAMPLES[413].values()
    app = create_app({"TESTING": True})  # the default MAX_BODY_BYTES, which the example states
    too_large = b"[" + b"0," * (app.config["MAX_CONTENT_LENGTH"] // 2) + b"0]"
    answer = app.test_client().post("/v1/softmax", data=too_large, content_type="application/json")
    _compare(answer.get_json(), example["value"], status=answer.status_code)


def _compare(answer: dict[str, Any], example: dict[str, Any], *, status: int) -> None:
    assert status == example["status"]
    answer, example = dict(answer), dict(example)
    assert isinstance(answer.pop("request_id"), str)  # each answer has its own
    example.pop("request_id")
    assert_json_close(answer, example)
