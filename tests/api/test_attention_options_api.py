"""/v1/attention's options (enable_gqa, window, alibi_slopes, softcap, rotary) over HTTP, against loops."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

from service import create_app
from tests.conftest import ContractCheckingClient
from tests.layer_references import option_cases, reference_for_options

TOLERANCE = {"rtol": 1e-12, "atol": 1e-12}

app = create_app({"TESTING": True})
app.test_client_class = ContractCheckingClient


def body_for(case: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "query": case["query"].tolist(),
        "key": case["key"].tolist(),
        "value": case["value"].tolist(),
        "causal": case["causal"],
        "causal_alignment": case["alignment"],
        "enable_gqa": case["gqa"],
        "empty_rows": "zero",
        "include": ["weights", "scores"],
    }
    optional = {
        "scale": case["scale"],
        "mask": None if case["kernel_mask"] is None else case["kernel_mask"].tolist(),
        "bias": None if case["bias"] is None else case["bias"].tolist(),
        "window": None if case["window"] is None else list(case["window"]),
        "alibi_slopes": None if case["kernel_slopes"] is None else case["kernel_slopes"].tolist(),
        "softcap": case["softcap"],
        "rotary": None
        if case["rope"] is None
        else {name: value for name, value in asdict(case["rope"]).items() if value is not None},
    }
    body.update({name: value for name, value in optional.items() if value is not None})
    return body


@settings(max_examples=40, deadline=None)
@given(option_cases())
def test_options_over_http_match_the_loop_reference(case: dict[str, Any]) -> None:
    response = app.test_client().post("/v1/attention", json=body_for(case))
    assert response.status_code == 200, response.get_data(as_text=True)
    answer = response.get_json()
    expected = reference_for_options(case)
    np.testing.assert_allclose(answer["output"], expected.output, **TOLERANCE)
    np.testing.assert_allclose(answer["weights"], expected.weights, **TOLERANCE)
    scores = np.array(answer["scores"], dtype=float)  # null (hidden, by mask, causal or window) is NaN
    np.testing.assert_array_equal(np.isnan(scores), np.isnan(expected.scores))
    hidden = np.isnan(expected.scores)
    np.testing.assert_allclose(scores[~hidden], expected.scores[~hidden], **TOLERANCE)
    assert answer["empty_rows"] == np.argwhere(expected.empty).tolist()


BASE = {
    "query": np.ones((4, 3, 4)).tolist(),
    "key": np.ones((2, 5, 4)).tolist(),
    "value": np.ones((2, 5, 2)).tolist(),
}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            {"enable_gqa": True, "key": np.ones((3, 5, 4)).tolist(), "value": np.ones((3, 5, 2)).tolist()},
            "key",
        ),
        ({"enable_gqa": True, "window": [-1, 0]}, "window"),
        ({"enable_gqa": True, "window": [1]}, "window"),
        ({"enable_gqa": True, "softcap": 0}, "softcap"),
        ({"enable_gqa": True, "softcap": -2.5}, "softcap"),
        ({"enable_gqa": True, "softcap": 1e39, "precision": "float32"}, "softcap"),  # past float32's range
        ({"enable_gqa": True, "rotary": {"dim": 3}}, "rotary.dim"),
        ({"enable_gqa": True, "rotary": {"dim": 6}}, "rotary.dim"),
        ({"enable_gqa": True, "rotary": {"style": "spiral"}}, "rotary.style"),
        ({"enable_gqa": True, "alibi_slopes": [0.5, 0.25, 0.125]}, "alibi_slopes"),
        ({"enable_gqa": "yes"}, "enable_gqa"),
        ({}, "key"),  # without enable_gqa, 4 query heads and 2 key heads do not broadcast
    ],
)
def test_bad_options_are_422_naming_the_field(change: dict[str, Any], field: str) -> None:
    response = app.test_client().post("/v1/attention", json={**BASE, **change})
    assert response.status_code == 422, response.get_data(as_text=True)
    assert field in response.get_json()["errors"]


def test_a_decode_step_over_a_cache_is_the_last_row_of_the_full_pass() -> None:
    rng = np.random.default_rng(12)
    query, key, value = rng.normal(size=(4, 6, 8)), rng.normal(size=(2, 6, 8)), rng.normal(size=(2, 6, 8))
    options = {
        "causal": True,
        "enable_gqa": True,
        "rotary": {},
        "window": [3, 0],
        "alibi_slopes": [0.5, 0.25, 0.125, 0.0625],
    }
    full = app.test_client().post(
        "/v1/attention",
        json={"query": query.tolist(), "key": key.tolist(), "value": value.tolist(), **options},
    )
    step = app.test_client().post(
        "/v1/attention",
        json={"query": query[:, -1:].tolist(), "key": key.tolist(), "value": value.tolist(), **options},
    )
    assert full.status_code == step.status_code == 200
    np.testing.assert_allclose(
        step.get_json()["output"], np.array(full.get_json()["output"])[:, -1:], rtol=1e-12
    )
