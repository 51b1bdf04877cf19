"""Optional request fields sent as ``null`` mean "absent": the default applies (generated clients send
``null`` for every unset field). Required fields sent as ``null`` are refused, naming the field."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from flask.testing import FlaskClient

from tests.conftest import CONTRACT_PATH
from tests.problems import assert_problem

REQUESTS: dict[str, tuple[dict[str, Any], list[str]]] = {
    # path: (the required fields, the optional ones)
    "/v1/attention": (
        {"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]},
        [
            *("mask", "causal", "causal_alignment", "bias", "scale", "empty_rows", "include", "precision"),
            *("enable_gqa", "window", "alibi_slopes", "softcap", "rotary"),
        ],
    ),
    "/v1/softmax": (
        {"logits": [2.0, 1.0, 0.1]},
        ["temperature", "mask", "top_k", "top_p", "min_p", "include", "precision"],
    ),
    "/v1/sample": (
        {"logits": [2.0, 1.0, 0.1]},
        ["temperature", "mask", "top_k", "top_p", "min_p", "num_samples", "seed"],
    ),
    "/v1/log-likelihood": (
        {"logits": [[2.0, 0.5, -1.0], [0.1, 1.5, 0.3]], "targets": [0, 1]},
        ["shift", "ignore_index", "temperature", "top_logprobs", "precision"],
    ),
    "/v1/multi-head-attention": (
        {
            "query": [[1.0, 0.0], [0.0, 1.0]],
            **{name: [[1.0, 0.0], [0.0, 1.0]] for name in ("w_q", "w_k", "w_v", "w_o")},
            "num_heads": 2,
        },
        [
            *(
                "key",
                "value",
                "b_q",
                "b_k",
                "b_v",
                "b_o",
                "num_kv_heads",
                "mask",
                "causal",
                "causal_alignment",
            ),
            *("bias", "scale", "empty_rows", "include", "precision", "window", "alibi_slopes", "softcap"),
            "rotary",
        ],
    ),
    "/v1/positional-encoding": (
        {"kind": "sinusoidal"},
        ["length", "d_model", "positions", "x", "base", "dim", "style", "include", "precision"],
    ),
    "/v1/layer-norm": ({"x": [[1.0, 2.0, 4.0]]}, ["kind", "weight", "bias", "eps", "precision"]),
    "/v1/feed-forward": (
        {"x": [[1.0, -1.0]], "w_1": [[1.0, 0.5], [0.0, 1.0]], "w_2": [[1.0, 0.0], [0.0, 1.0]]},
        ["b_1", "b_2", "activation", "w_3", "b_3", "include", "precision"],
    ),
    "/v1/transformer-block": (
        {
            "x": [[1.0, 0.0], [0.0, 1.0]],
            "attention": {
                **{name: [[1.0, 0.0], [0.0, 1.0]] for name in ("w_q", "w_k", "w_v", "w_o")},
                "num_heads": 1,
            },
            "feed_forward": {"w_1": [[1.0, 0.5], [0.0, 1.0]], "w_2": [[1.0, 0.0], [0.0, 1.0]]},
        },
        ["norm_1", "norm_2", "norm_position", "include", "precision"],
    ),
}
# What a body needs beyond its required fields to be valid (sinusoidal: the table's size); kept out of the
# fields sent as null.
COMPLETING: dict[str, dict[str, Any]] = {"/v1/positional-encoding": {"length": 3, "d_model": 4}}


def test_every_v1_computation_is_listed() -> None:
    spec = yaml.safe_load(CONTRACT_PATH.read_text())
    computations = {
        path for path, item in spec["paths"].items() if path.startswith("/v1/") and "post" in item
    }
    assert set(REQUESTS) == computations


@pytest.mark.parametrize("path", list(REQUESTS))
def test_null_optional_fields_get_their_defaults(client: FlaskClient, path: str) -> None:
    required, optional = REQUESTS[path]
    seeded = {"seed": 3} if path == "/v1/sample" else {}  # both draw with one seed (null: a fresh one)
    completing = COMPLETING.get(path, {})
    nulls = dict.fromkeys(name for name in optional if name not in completing)
    without = client.post(path, json={**required, **completing, **seeded})
    with_nulls = client.post(path, json={**required, **completing, **nulls, **seeded})
    assert without.status_code == with_nulls.status_code == 200, with_nulls.get_data(as_text=True)
    assert with_nulls.get_data() == without.get_data()  # the same machine: the very same answer


@pytest.mark.parametrize("path", list(REQUESTS))
def test_null_required_fields_are_refused_by_name(client: FlaskClient, path: str) -> None:
    required, _ = REQUESTS[path]
    body = {**required, **COMPLETING.get(path, {})}
    for name in required:
        assert_problem(client.post(path, json={**body, name: None}), 422, field=name, says="null")


def test_an_unknown_field_sent_as_null_is_still_unknown(client: FlaskClient) -> None:
    response = client.post("/v1/softmax", json={"logits": [1.0], "temprature": None})
    assert_problem(response, 422, field="temprature")


@pytest.mark.parametrize("path", list(REQUESTS))
def test_the_contract_says_which_fields_accept_null(path: str) -> None:
    spec = yaml.safe_load(CONTRACT_PATH.read_text())
    schema_ref = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = spec["components"]["schemas"][schema_ref.rsplit("/", 1)[1]]
    required, optional = REQUESTS[path]
    assert set(schema["required"]) == set(required)
    assert set(schema["properties"]) == set(required) | set(optional)
    for name, field in schema["properties"].items():
        admits_null = "null" in field.get("type", []) or {"type": "null"} in field.get("anyOf", [])
        assert admits_null == (name in optional), name
