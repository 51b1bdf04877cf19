"""One declaration per request, so one answer per rule on both protocols.

For every /v2 model and each of its parameters (the /v1 request's optional fields), the same value is sent
as a /v1 JSON field and as a /v2 request parameter: ``null`` means "absent" on both (the default applies),
and a value the rule refuses is refused on both with the very same message under the field's name.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

from service.protocols.declarations.arrays import Array
from service.protocols.v2.models import BINARY_DATA_OUTPUT, MODELS, Model

# Each model's required inputs, as /v1 JSON (the /v2 tensors are made from them).
INPUTS: dict[str, dict[str, Any]] = {
    "attention": {"query": [[0.0, 1.0]], "key": [[1.0, 0.0], [0.0, 1.0]], "value": [[6.0, 0.0], [0.0, 3.0]]},
    "softmax": {"logits": [[2.0, 1.0, 0.1]]},
    "log-likelihood": {"logits": [[[2.0, 0.5, -1.0], [0.1, 1.5, 0.3]]], "targets": [[0, 1]]},
    "sample": {"logits": [[2.0, 1.0, 0.1]]},
}

CASES = [
    (model, name)
    for model in MODELS.values()
    for name in model.parameters.fields
    if name != BINARY_DATA_OUTPUT  # the binary tensor extension's own parameter: /v2 only
]


def test_every_model_has_inputs_here() -> None:
    assert set(INPUTS) == set(MODELS)


def _v1(client: FlaskClient, model: Model, options: dict[str, Any]) -> Any:
    return client.post(f"/v1/{model.name}", json={**INPUTS[model.name], **options})


def _v2(client: FlaskClient, model: Model, parameters: dict[str, Any]) -> Any:
    inputs = []
    for name, value in INPUTS[model.name].items():
        array = np.asarray(value)
        datatype = "INT64" if array.dtype.kind == "i" else "FP64"
        inputs.append(
            {"name": name, "shape": list(array.shape), "datatype": datatype, "data": array.ravel().tolist()}
        )
    return client.post(f"/v2/models/{model.name}/infer", json={"inputs": inputs, "parameters": parameters})


@pytest.mark.parametrize(("model", "name"), CASES, ids=[f"{m.name}-{n}" for m, n in CASES])
def test_null_means_absent_on_both_protocols(client: FlaskClient, model: Model, name: str) -> None:
    v1, v2 = _v1(client, model, {name: None}), _v2(client, model, {name: None})
    assert v1.status_code == 200, v1.get_data(as_text=True)
    assert v2.status_code == 200, v2.get_data(as_text=True)


@pytest.mark.parametrize(("model", "name"), CASES, ids=[f"{m.name}-{n}" for m, n in CASES])
def test_a_refused_value_gets_the_same_message_on_both_protocols(
    client: FlaskClient, model: Model, name: str
) -> None:
    v1, v2 = _v1(client, model, {name: "?"}), _v2(client, model, {name: "?"})
    assert v1.status_code == v2.status_code == 422
    v1_errors, v2_errors = v1.get_json()["errors"], v2.get_json()["errors"]
    assert list(v1_errors) == list(v2_errors) == [name]
    assert v1_errors[name] == v2_errors[name]
    assert v1_errors[name]  # a message, not an empty list


KIND_DATATYPES = {"number": "FP64", "integer": "INT64", "boolean": "BOOL"}


@pytest.mark.parametrize("model", list(MODELS.values()), ids=list(MODELS))
def test_a_models_tensors_and_parameters_are_its_declarations_fields(model: Model) -> None:
    """The /v2 table names no field of its own: every input tensor is an array field of the request's
    declaration (required alike, the same element kind), and every parameter one of its other fields."""
    declared = model.declaration().fields
    arrays = {name: field for name, field in declared.items() if isinstance(field, Array)}
    assert set(model.inputs) == set(arrays)
    for name, spec in model.inputs.items():
        assert spec.required == arrays[name].required, name
        assert spec.datatypes[0] == KIND_DATATYPES[arrays[name].kind], name
    assert set(model.parameters.fields) - {BINARY_DATA_OUTPUT} <= set(declared) - set(arrays)
