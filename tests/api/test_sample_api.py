"""POST /v1/sample over HTTP, and /v1/softmax's min_p: the distribution the draws come from."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient
from scipy.special import log_softmax
from scipy.stats import chisquare

from service import create_app
from service.kernels import MAX_NUM_SAMPLES, MAX_SEED
from tests.problems import assert_problem
from tests.references import reference_sample, reference_warpers_row


def post(client: FlaskClient, path: str = "/v1/sample", **body: Any) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    result: dict[str, Any] = response.get_json()
    return result


def test_seeded_draws_are_the_documented_algorithm(client: FlaskClient) -> None:
    logits = np.random.default_rng(4).normal(size=(3, 9)) * 2
    options = {"temperature": 0.8, "top_k": 6, "top_p": 0.95, "min_p": 0.05}
    body = post(client, logits=logits.tolist(), num_samples=16, seed=1234, **options)
    assert body["seed"] == 1234
    assert body["tokens"] == reference_sample(logits.tolist(), num_samples=16, seed=1234, **options)
    for row in range(3):
        probs, _ = reference_warpers_row(list(logits[row]), visible=[True] * 9, **options)
        expected = [math.log(probs[token]) for token in body["tokens"][row]]
        np.testing.assert_allclose(body["logprobs"][row], expected, rtol=1e-12)


def test_the_same_seed_repeats_and_a_missing_seed_is_returned(client: FlaskClient) -> None:
    request = {"logits": [[0.0] * 50] * 2, "num_samples": 30}
    first = post(client, **request)
    assert isinstance(first["seed"], int)
    assert 0 <= first["seed"] <= MAX_SEED
    again = post(client, **request, seed=first["seed"])
    assert again == first
    assert post(client, **request)["tokens"] != first["tokens"]  # a fresh seed each time


def test_shapes_of_the_answer(client: FlaskClient) -> None:
    assert np.shape(post(client, logits=[1.0, 2.0], seed=1)["tokens"]) == (1,)
    body = post(client, logits=np.zeros((2, 3, 4)).tolist(), num_samples=5, seed=1)
    assert np.shape(body["tokens"]) == np.shape(body["logprobs"]) == (2, 3, 5)


def test_temperature_zero_is_greedy_lowest_index_on_ties(client: FlaskClient) -> None:
    body = post(client, logits=[[1.0, 3.0, 2.0, 3.0]], temperature=0, num_samples=4)
    assert body["tokens"] == [[1, 1, 1, 1]]
    assert body["logprobs"] == [[-math.log(2)] * 4]  # the tie shares the probability, as /v1/softmax shows


def test_never_draws_a_masked_or_filtered_token(client: FlaskClient) -> None:
    logits = [3.0, 2.9, 2.8, 0.0, -1.0, 5.0]
    mask = [True, True, True, True, True, False]
    body = post(client, logits=logits, mask=mask, top_k=4, min_p=0.5, num_samples=2000, seed=3)
    assert set(body["tokens"]) == {0, 1, 2}  # 5 masked, 4 beyond top-k, 3 below min_p × the largest


def test_draws_follow_softmax_with_the_same_options(client: FlaskClient) -> None:
    logits = [2.0, 1.0, 0.5, 0.0, -0.5, -3.0]
    options = {"temperature": 1.3, "top_p": 0.9, "min_p": 0.1}
    shown = np.array(post(client, "/v1/softmax", logits=logits, **options)["probabilities"])
    tokens = post(client, logits=logits, num_samples=50_000, seed=99, **options)["tokens"]
    counts = np.bincount(tokens, minlength=len(logits))
    kept = shown > 0
    assert (counts[~kept] == 0).all()
    assert chisquare(counts[kept], 50_000 * shown[kept]).pvalue > 1e-3


def test_softmax_min_p_keeps_what_hugging_face_keeps(client: FlaskClient) -> None:
    logits = [2.0, 1.0, 0.1, -1.0]
    body = post(client, "/v1/softmax", logits=logits, min_p=0.3, include=["log_probabilities"])
    probs, _ = reference_warpers_row(
        logits, visible=[True] * 4, temperature=1.0, top_k=None, top_p=None, min_p=0.3
    )
    np.testing.assert_allclose(body["probabilities"], probs, rtol=1e-12)
    assert body["probabilities"][2:] == [0.0, 0.0]  # 0.09 and 0.03 of 0.66 are below 0.3 × it
    np.testing.assert_allclose(body["log_probabilities"][:2], log_softmax(logits[:2]), rtol=1e-12)


def test_logprobs_equal_softmax_log_probabilities_to_the_bit(client: FlaskClient) -> None:
    logits = np.random.default_rng(8).normal(size=(4, 30)) * 3
    options = {"temperature": 0.7, "top_k": 20, "min_p": 0.01}
    shown = post(client, "/v1/softmax", logits=logits.tolist(), include=["log_probabilities"], **options)
    body = post(client, logits=logits.tolist(), num_samples=10, seed=5, **options)
    expected = np.take_along_axis(
        np.array(shown["log_probabilities"], dtype=float), np.array(body["tokens"]), -1
    )
    assert body["logprobs"] == expected.tolist()


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"logits": [1.0, 2.0], "seed": -1}, "seed", ""),
        ({"logits": [1.0, 2.0], "seed": MAX_SEED + 1}, "seed", "9007199254740991"),
        ({"logits": [1.0, 2.0], "seed": 1.5}, "seed", "integer"),
        ({"logits": [1.0, 2.0], "seed": "7"}, "seed", "integer"),
        ({"logits": [1.0, 2.0], "min_p": 1.5}, "min_p", ""),
        ({"logits": [1.0, 2.0], "min_p": -0.1}, "min_p", ""),
        ({"logits": [1.0, 2.0], "num_samples": 0}, "num_samples", ""),
        ({"logits": [1.0, 2.0], "num_samples": MAX_NUM_SAMPLES + 1}, "num_samples", f"{MAX_NUM_SAMPLES}"),
        ({"logits": [1.0, 2.0], "num_samples": True}, "num_samples", "integer"),
        ({"logits": [1.0, 2.0], "temperature": -1}, "temperature", ""),
        ({"logits": [1.0, 2.0], "top_k": 0}, "top_k", ""),
        ({"logits": [1.0, 2.0], "top_p": 0}, "top_p", ""),
        ({"logits": [1.0, 2.0], "mask": [True, False, True]}, "mask", "[3]"),
        ({"logits": [[1.0, 2.0]], "mask": [False, False]}, "mask", ""),
        ({"logits": 3.0}, "logits", "scalar"),
    ],
)
def test_invalid_requests_are_422_naming_the_field(
    client: FlaskClient, body: dict[str, Any], field: str, says: str
) -> None:
    assert_problem(client.post("/v1/sample", json=body), 422, field=field, says=says)


def test_softmax_refuses_min_p_out_of_range(client: FlaskClient) -> None:
    assert_problem(client.post("/v1/softmax", json={"logits": [1.0], "min_p": 2}), 422, field="min_p")


def test_num_samples_counts_against_the_work_limit() -> None:
    client = create_app({"TESTING": True, "MAX_WORK_ELEMENTS": 1000}).test_client()
    body = {"logits": [[0.0, 1.0]] * 10}
    # each draw holds three arrays whole (its token, log-probability and uniform): 10 × 33 × 3 = 990
    assert client.post("/v1/sample", json={**body, "num_samples": 33}).status_code == 200
    problem = assert_problem(client.post("/v1/sample", json={**body, "num_samples": 34}), 413, says="1,020")
    assert "num_samples" in problem["detail"]
