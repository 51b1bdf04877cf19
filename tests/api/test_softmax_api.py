"""POST /v1/softmax over HTTP."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient
from scipy.special import log_softmax, softmax
from scipy.stats import entropy

from tests.problems import assert_problem
from tests.tolerance import FLOAT64_RTOL, assert_json_close


def post(client: FlaskClient, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/softmax", json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    result: dict[str, Any] = response.get_json()
    return result


def test_matches_scipy_with_temperature_on_batched_logits(client: FlaskClient) -> None:
    logits = np.random.default_rng(1).normal(size=(2, 3, 7)) * 4
    body = post(client, logits=logits.tolist(), temperature=0.7, include=["log_probabilities"])
    np.testing.assert_allclose(body["probabilities"], softmax(logits / 0.7, axis=-1), rtol=1e-12)
    np.testing.assert_allclose(body["log_probabilities"], log_softmax(logits / 0.7, axis=-1), rtol=1e-12)
    np.testing.assert_allclose(body["entropy"], entropy(softmax(logits / 0.7, axis=-1), axis=-1), rtol=1e-12)
    assert body["argmax"] == np.argmax(logits, axis=-1).tolist()
    assert body["temperature"] == 0.7


def test_log_softmax_is_exact_for_far_apart_logits(client: FlaskClient) -> None:
    body = post(client, logits=[1000, 1], include=["log_probabilities"])
    assert body["log_probabilities"] == [0.0, -999.0]
    assert body["probabilities"][0] == 1.0


def test_zero_temperature_is_greedy_and_splits_ties(client: FlaskClient) -> None:
    assert post(client, logits=[1.0, 3.0, 2.0], temperature=0)["probabilities"] == [0.0, 1.0, 0.0]
    tied = post(client, logits=[3.0, 1.0, 3.0], temperature=0, include=["log_probabilities"])
    assert tied["probabilities"] == [0.5, 0.0, 0.5]
    assert_json_close(tied["log_probabilities"], [-math.log(2), None, -math.log(2)], rel=FLOAT64_RTOL)
    assert tied["argmax"] == 0
    assert tied["entropy"] == pytest.approx(math.log(2), rel=FLOAT64_RTOL)


def test_lower_temperature_concentrates_probability(client: FlaskClient) -> None:
    logits = [2.0, 1.0, 0.1]
    tops = [post(client, logits=logits, temperature=t)["probabilities"][0] for t in (5.0, 1.0, 0.5, 0.1)]
    assert tops == sorted(tops)
    assert tops[-1] > 0.99


def test_mask_top_k_and_top_p(client: FlaskClient) -> None:
    logits = [4.0, 3.0, 2.0, 1.0]
    masked = post(client, logits=logits, mask=[False, True, True, True])["probabilities"]
    np.testing.assert_allclose(masked, [0.0, *softmax([3.0, 2.0, 1.0])], rtol=1e-14)
    top2 = post(client, logits=logits, top_k=2)["probabilities"]
    np.testing.assert_allclose(top2, [*softmax([4.0, 3.0]), 0.0, 0.0], rtol=1e-14)
    full = softmax(logits)
    nucleus = post(client, logits=logits, top_p=float(full[0] + 1e-9))["probabilities"]
    np.testing.assert_allclose(nucleus, [*softmax([4.0, 3.0]), 0.0, 0.0], rtol=1e-14)
    assert post(client, logits=logits, top_p=0.01)["probabilities"] == [1.0, 0.0, 0.0, 0.0]


def test_row_with_nothing_left_is_422(client: FlaskClient) -> None:
    response = client.post(
        "/v1/softmax", json={"logits": [[1.0, 2.0], [3.0, 4.0]], "mask": [[True, False], [False, False]]}
    )
    problem = assert_problem(response, 422, field="mask")
    assert "[1]" in problem["errors"]["mask"][0]


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"logits": 3.0}, "logits", "scalar"),
        ({"logits": [[1.0], [2.0, 3.0]]}, "logits", "ragged"),
        ({"logits": [1.0, 2.0], "temperature": -1}, "temperature", ""),
        ({"logits": [1.0, 2.0], "temperature": True}, "temperature", "number"),
        ({"logits": [1.0, 2.0], "top_k": 0}, "top_k", ""),
        ({"logits": [1.0, 2.0], "top_k": 1.5}, "top_k", "integer"),
        ({"logits": [1.0, 2.0], "top_p": 0}, "top_p", ""),
        ({"logits": [1.0, 2.0], "top_p": 1.5}, "top_p", ""),
        ({"logits": [1.0, 2.0], "mask": [True, False, True]}, "mask", "[3]"),
        ({"logits": [1.0, 2.0], "mask": [[True, False, True]]}, "mask", "[1, 3]"),
        ({"logits": [1.0, 2.0], "include": ["probabilities"]}, "include", ""),
    ],
)
def test_invalid_requests_are_422_naming_the_field(
    client: FlaskClient, body: dict[str, Any], field: str, says: str
) -> None:
    assert_problem(client.post("/v1/softmax", json=body), 422, field=field, says=says)
