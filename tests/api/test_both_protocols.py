"""One declaration per request, so one answer per rule on both protocols.

For every /v2 model and each of its parameters (the /v1 request's fields that are not arrays, by their path
inside nested objects), the same value is sent as a /v1 JSON field and as a /v2 request parameter: ``null``
means "absent" on both (the default applies) for an optional one, and a value the rule refuses is refused on
both with the very same message under the field's path.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient
from marshmallow import Schema, fields

from service.protocols.declarations.arrays import Array
from service.protocols.v2.models import BINARY_DATA_OUTPUT, MODELS, Model

# Each model's required fields, as /v1 JSON (the /v2 tensors and parameters are made from them).
REQUIRED: dict[str, dict[str, Any]] = {
    "attention": {"query": [[0.0, 1.0]], "key": [[1.0, 0.0], [0.0, 1.0]], "value": [[6.0, 0.0], [0.0, 3.0]]},
    "softmax": {"logits": [[2.0, 1.0, 0.1]]},
    "log-likelihood": {"logits": [[[2.0, 0.5, -1.0], [0.1, 1.5, 0.3]]], "targets": [[0, 1]]},
    "sample": {"logits": [[2.0, 1.0, 0.1]]},
    "multi-head-attention": {  # two heads of width 2, so that rotary has a pair of features to turn
        "query": [[1.0, 0.0], [0.0, 1.0]],
        **{name: [[1.0, 0.0, 0.5, 0.0], [0.0, 1.0, 0.0, 0.5]] for name in ("w_q", "w_k", "w_v")},
        "w_o": [[1.0, 0.0], [0.0, 1.0], [0.5, 0.0], [0.0, 0.5]],
        "num_heads": 2,
    },
    "positional-encoding": {"kind": "rotary", "x": [[1.0, 0.0], [0.0, 1.0]]},
    "layer-norm": {"x": [[1.0, 2.0, 4.0]]},
    "feed-forward": {"x": [[1.0, -1.0]], "w_1": [[1.0, 0.5], [0.0, 1.0]], "w_2": [[1.0, 0.0], [0.0, 1.0]]},
    # By path inside the nested parts, as /v2 takes them: two heads of width 2, so that rotary has a pair.
    "transformer-block": {
        "x": [[1.0, 0.0], [0.0, 1.0]],
        **{
            f"attention.{name}": [[1.0, 0.0, 0.5, 0.0], [0.0, 1.0, 0.0, 0.5]]
            for name in ("w_q", "w_k", "w_v")
        },
        "attention.w_o": [[1.0, 0.0], [0.0, 1.0], [0.5, 0.0], [0.0, 0.5]],
        "attention.num_heads": 2,
        "feed_forward.w_1": [[1.0, 0.5], [0.0, 1.0]],
        "feed_forward.w_2": [[1.0, 0.0], [0.0, 1.0]],
    },
}

CASES = [(model, path) for model in MODELS.values() for path in model.parameter_fields]
OPTIONAL = [(model, path) for model, path in CASES if not model.parameter_fields[path].required]


def test_every_model_has_its_required_fields_here() -> None:
    assert set(REQUIRED) == set(MODELS)


def _at_paths(values: dict[str, Any]) -> dict[str, Any]:
    """``{"rotary.base": 2, "query": q}`` as /v1 JSON: ``{"rotary": {"base": 2}, "query": q}``; a value at
    a path inside an object joins the object's other members."""
    body: dict[str, Any] = {}
    for path, value in values.items():
        *parents, leaf = path.split(".")
        level = body
        for parent in parents:
            level = level.setdefault(parent, {})
        level[leaf] = value
    return body


def _v1(client: FlaskClient, model: Model, path: str, value: Any) -> Any:
    return client.post(f"/v1/{model.name}", json=_at_paths({**REQUIRED[model.name], path: value}))


def _v2(client: FlaskClient, model: Model, path: str, value: Any) -> Any:
    inputs, parameters = [], {}
    for name, given in REQUIRED[model.name].items():
        if name not in model.inputs:
            parameters[name] = given
            continue
        array = np.asarray(given)
        datatype = "INT64" if array.dtype.kind == "i" else "FP64"
        inputs.append(
            {"name": name, "shape": list(array.shape), "datatype": datatype, "data": array.ravel().tolist()}
        )
    parameters[path] = value
    return client.post(f"/v2/models/{model.name}/infer", json={"inputs": inputs, "parameters": parameters})


@pytest.mark.parametrize(("model", "path"), OPTIONAL, ids=[f"{m.name}-{n}" for m, n in OPTIONAL])
def test_null_means_absent_on_both_protocols(client: FlaskClient, model: Model, path: str) -> None:
    v1, v2 = _v1(client, model, path, None), _v2(client, model, path, None)
    assert v1.status_code == 200, v1.get_data(as_text=True)
    assert v2.status_code == 200, v2.get_data(as_text=True)


@pytest.mark.parametrize(("model", "path"), CASES, ids=[f"{m.name}-{n}" for m, n in CASES])
def test_a_refused_value_gets_the_same_message_on_both_protocols(
    client: FlaskClient, model: Model, path: str
) -> None:
    v1, v2 = _v1(client, model, path, "?"), _v2(client, model, path, "?")
    assert v1.status_code == v2.status_code == 422
    v1_errors, v2_errors = v1.get_json()["errors"], v2.get_json()["errors"]
    assert list(v1_errors) == list(v2_errors) == [path]
    assert v1_errors[path] == v2_errors[path]
    assert v1_errors[path]  # a message, not an empty list


KIND_DATATYPES = {"number": "FP64", "integer": "INT64", "boolean": "BOOL"}


def _fields_by_path(schema: Schema, prefix: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, declared in schema.fields.items():
        if isinstance(declared, fields.Nested) and isinstance(declared.schema, Schema):
            found.update(_fields_by_path(declared.schema, f"{prefix}{name}."))
        else:
            found[f"{prefix}{name}"] = declared
    return found


@pytest.mark.parametrize("model", list(MODELS.values()), ids=list(MODELS))
def test_a_models_tensors_and_parameters_are_its_declarations_fields(model: Model) -> None:
    """The /v2 model names no field of its own: every input tensor is an array field of the request's
    declaration (required alike, the same element kind), every parameter one of its other fields (inside
    nested objects by their path), and the include list is the requested outputs."""
    declared = _fields_by_path(model.declaration.request())
    arrays = {path: field for path, field in declared.items() if isinstance(field, Array)}
    assert set(model.inputs) == set(arrays)
    for path, spec in model.inputs.items():
        assert spec.required == arrays[path].required, path
        assert spec.datatypes[0] == KIND_DATATYPES[arrays[path].kind], path
    assert set(model.parameter_fields) == set(declared) - set(arrays)
    documented = {f.data_key or name for name, f in model.parameters.fields.items()}
    assert documented == set(model.parameter_fields) | {BINARY_DATA_OUTPUT}
