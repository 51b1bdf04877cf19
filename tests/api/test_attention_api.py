"""POST /v1/attention over HTTP: worked examples, options, every validation rule, and a loop reference."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

from service.protocols.declarations.attention import EXAMPLE as ATTENTION_EXAMPLE_REQUEST
from tests.problems import assert_problem

SEED = ATTENTION_EXAMPLE_REQUEST  # the course's worked example


def post(client: FlaskClient, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/attention", json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.mimetype == "application/json"
    result: dict[str, Any] = response.get_json()
    return result


def test_worked_example_from_the_course(client: FlaskClient) -> None:
    body = post(client, **SEED)
    e = math.exp(1 / math.sqrt(2))
    assert body["weights"] == pytest.approx([1 / (1 + e), e / (1 + e)], rel=1e-15)
    assert body["weights"] == pytest.approx([0.3302, 0.6698], abs=5e-5)
    assert body["output"] == pytest.approx([1.9814, 2.0093], abs=5e-5)
    assert body["scale"] == pytest.approx(1 / math.sqrt(2), rel=1e-15)
    assert body["empty_rows"] == []
    assert set(body) == {"output", "weights", "scale", "empty_rows"}


def test_second_worked_example_and_its_mask(client: FlaskClient) -> None:
    request = {"query": [1, 0], "key": [[1, 0], [0, 1]], "value": [[2, 0], [0, 4]]}
    assert post(client, **request)["output"] == pytest.approx([1.3395, 1.3210], abs=5e-5)
    masked = post(client, **request, mask=[True, False])
    assert masked["output"] == [2.0, 0.0]
    assert masked["weights"] == [1.0, 0.0]


def test_include_scores_and_logsumexp_with_masked_entries_null(client: FlaskClient) -> None:
    body = post(
        client,
        query=[[1.0, 0.0], [0.0, 1.0]],
        key=[[1.0, 0.0], [0.0, 1.0]],
        value=[[1.0], [2.0]],
        causal=True,
        include=["weights", "scores", "logsumexp"],
    )
    scale = 1 / math.sqrt(2)
    assert body["scores"] == [[scale, None], [0.0, scale]]
    assert body["weights"][0] == [1.0, 0.0]
    assert body["logsumexp"] == pytest.approx([scale, math.log(1 + math.exp(scale))], rel=1e-15)


def test_output_only_when_include_is_empty(client: FlaskClient) -> None:
    assert set(post(client, **SEED, include=[])) == {"output", "scale", "empty_rows"}


def test_causal_alignments_differ_when_fewer_queries_than_keys(client: FlaskClient) -> None:
    request = {
        "query": [[1.0, 0.0]],
        "key": [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]],
        "value": [[1.0], [2.0], [3.0]],
    }
    lower_right = post(client, **request, causal=True)["weights"]
    upper_left = post(client, **request, causal=True, causal_alignment="upper_left")["weights"]
    assert all(w > 0 for w in lower_right[0])  # the last query sees the whole cache
    assert upper_left[0] == [1.0, 0.0, 0.0]


def test_custom_scale_and_bias(client: FlaskClient) -> None:
    body = post(client, **SEED, scale=2.0, bias=[0.5, -0.5])
    scores = np.array([0.0, 1.0]) * 2.0 + np.array([0.5, -0.5])
    expected = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
    assert body["weights"] == pytest.approx(expected.tolist(), rel=1e-14)
    assert body["scale"] == 2.0


def test_batched_heads_broadcast(client: FlaskClient) -> None:
    rng = np.random.default_rng(7)
    query, key, value = rng.normal(size=(2, 3, 4, 5)), rng.normal(size=(1, 3, 6, 5)), rng.normal(size=(6, 2))
    body = post(client, query=query.tolist(), key=key.tolist(), value=value.tolist())
    assert np.array(body["output"]).shape == (2, 3, 4, 2)
    assert np.array(body["weights"]).shape == (2, 3, 4, 6)
    np.testing.assert_allclose(np.array(body["weights"]).sum(axis=-1), 1.0, rtol=1e-14)


def test_empty_row_is_422_naming_the_row(client: FlaskClient) -> None:
    response = client.post(
        "/v1/attention", json={**SEED, "query": [[0, 1], [1, 0]], "mask": [[True, True], [False, False]]}
    )
    problem = assert_problem(response, 422, field="mask")
    assert "[1]" in problem["errors"]["mask"][0]


def test_empty_row_zero_mode_lists_the_row(client: FlaskClient) -> None:
    body = post(
        client,
        **{**SEED, "query": [[0, 1], [1, 0]]},
        mask=[[True, True], [False, False]],
        empty_rows="zero",
        include=["weights", "scores", "logsumexp"],
    )
    assert body["empty_rows"] == [[1]]
    assert body["weights"][1] == [0.0, 0.0]
    assert body["output"][1] == [0.0, 0.0]
    assert body["scores"][1] == [None, None]
    assert body["logsumexp"][1] is None


def test_rows_emptied_by_the_causal_mask_alone_blame_causal(client: FlaskClient) -> None:
    # Three queries over two keys, lower-right aligned: the first query sees no key.
    request = {
        "query": [[1, 0], [0, 1], [1, 1]],
        "key": [[1, 0], [0, 1]],
        "value": [[1], [2]],
        "causal": True,
    }
    problem = assert_problem(client.post("/v1/attention", json=request), 422, field="causal")
    assert problem["type"].endswith(":empty-row")
    assert "mask" not in problem["errors"]


def test_overflow_is_422_not_invalid_json(client: FlaskClient) -> None:
    response = client.post(
        "/v1/attention", json={**SEED, "query": [1e300, 1e300], "key": [[1e300, 1e300], [1, 1]]}
    )
    problem = assert_problem(response, 422, says="overflow")
    assert problem["type"].endswith(":numerical-overflow")


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"query": [[0, 1], [1]]}, "query", "ragged"),
        ({"query": ["0", 1]}, "query", "string"),
        ({"query": [None, 1]}, "query", "null"),
        ({"query": [True, 1]}, "query", "boolean"),
        ({"key": [1, 0]}, "key", "rank"),
        ({"value": [[]]}, "value", "empty"),
        ({"key": [[1, 0, 0], [0, 1, 0]]}, "key", "[2, 3]"),
        ({"value": [[6, 0], [0, 3], [1, 1]]}, "value", "[3, 2]"),
        ({"mask": [1, 0]}, "mask", "boolean"),
        ({"mask": [True, False, True]}, "mask", "[3]"),
        ({"bias": [[1.0, 2.0, 3.0]]}, "bias", "[1, 3]"),
        ({"causal": 1}, "causal", "boolean"),
        ({"causal": "true"}, "causal", "boolean"),
        ({"causal_alignment": "diagonal"}, "causal_alignment", ""),
        ({"scale": 0}, "scale", ""),
        ({"scale": -1.0}, "scale", ""),
        ({"scale": "2"}, "scale", "number"),
        ({"empty_rows": "skip"}, "empty_rows", ""),
        ({"include": ["weights", "attention"]}, "include", ""),
        ({"include": ["weights", "weights"]}, "include", "once"),
        ({"include": "weights"}, "include", ""),
        ({"precision": "float16"}, "precision", ""),
    ],
)
def test_invalid_requests_are_422_naming_the_field(
    client: FlaskClient, change: dict[str, Any], field: str, says: str
) -> None:
    assert_problem(client.post("/v1/attention", json={**SEED, **change}), 422, field=field, says=says)


def test_shape_mismatch_message_states_both_shapes(client: FlaskClient) -> None:
    problem = assert_problem(
        client.post("/v1/attention", json={**SEED, "key": [[1, 0, 0], [0, 1, 0]]}), 422, field="key"
    )
    assert problem["type"].endswith(":validation-error")  # found by the schema, like every field rule
    message = problem["errors"]["key"][0]
    assert "[2]" in message
    assert "[2, 3]" in message
