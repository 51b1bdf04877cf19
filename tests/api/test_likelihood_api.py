"""POST /v1/log-likelihood over HTTP."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient
from scipy.special import log_softmax

from tests.problems import assert_problem
from tests.references import reference_sequence


def post(client: FlaskClient, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/log-likelihood", json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    result: dict[str, Any] = response.get_json()
    return result


def loop_reference(logits: np.ndarray, targets: list[int], *, shift: bool) -> dict[str, Any]:
    expected = reference_sequence(logits, np.asarray(targets), shift=shift, temperature=1.0, top_k=0)
    ranks = [
        rank if scored else None for rank, scored in zip(expected["ranks"], expected["scored"], strict=True)
    ]
    return {**expected, "token_logprobs": expected["logprobs"], "ranks": ranks}


@pytest.mark.parametrize("shift", [False, True])
def test_matches_a_loop_reference(client: FlaskClient, shift: bool) -> None:
    rng = np.random.default_rng(11)
    logits = rng.normal(size=(6, 9)) * 3
    targets = [3, 0, -100, 8, 2, 5]
    body = post(client, logits=logits.tolist(), targets=targets, shift=shift)
    expected = loop_reference(logits, targets, shift=shift)
    assert body["ranks"] == expected["ranks"]
    for got, want in zip(body["token_logprobs"], expected["token_logprobs"], strict=True):
        assert (got is None and want is None) or got == pytest.approx(want, rel=1e-12)
    assert body["log_likelihood"] == pytest.approx(expected["log_likelihood"], rel=1e-12)
    assert body["num_tokens"] == expected["num_tokens"]
    assert body["mean_nll"] == pytest.approx(-expected["log_likelihood"] / expected["num_tokens"], rel=1e-12)
    assert body["perplexity"] == pytest.approx(math.exp(body["mean_nll"]), rel=1e-12)
    assert body["is_greedy"] == all(rank == 1 for rank in expected["ranks"] if rank is not None)


def test_batched_sequences_keep_leading_dims(client: FlaskClient) -> None:
    logits = np.random.default_rng(5).normal(size=(2, 4, 5))
    targets = [[1, 2, 3, 4], [0, -100, -100, -100]]
    body = post(client, logits=logits.tolist(), targets=targets, shift=True)
    assert body["num_tokens"] == [3, 0]
    assert body["mean_nll"][1] is None
    assert body["perplexity"][1] is None
    assert body["log_likelihood"][1] == 0.0
    assert body["token_logprobs"][1] == [None, None, None, None]
    first = loop_reference(logits[0], targets[0], shift=True)
    assert body["log_likelihood"][0] == pytest.approx(first["log_likelihood"], rel=1e-12)


def test_greedy_sequence_and_top_logprobs(client: FlaskClient) -> None:
    logits = [[5.0, 1.0, 0.0], [0.0, 4.0, 1.0]]
    body = post(client, logits=logits, targets=[0, 1], top_logprobs=2)
    assert body["is_greedy"] is True
    assert body["ranks"] == [1, 1]
    top = body["top_logprobs"]
    assert [entry["token"] for entry in top[0]] == [0, 1]
    assert top[1][0]["logprob"] == pytest.approx(float(log_softmax([0.0, 4.0, 1.0])[1]), rel=1e-12)
    shifted = post(client, logits=logits, targets=[0, 1], shift=True, top_logprobs=1)
    assert shifted["top_logprobs"][0] is None
    assert shifted["top_logprobs"][1] == [
        {"token": 0, "logprob": pytest.approx(float(log_softmax(logits[0])[0]))}
    ]


def test_temperature_scales_logits_before_scoring(client: FlaskClient) -> None:
    logits = [[2.0, 1.0, 0.0]]
    body = post(client, logits=logits, targets=[1], temperature=0.5)
    assert body["token_logprobs"][0] == pytest.approx(
        float(log_softmax(np.array(logits[0]) / 0.5)[1]), rel=1e-12
    )


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"logits": [[1.0, 2.0]], "targets": [2]}, "targets", "2"),
        ({"logits": [[1.0, 2.0]], "targets": [-1]}, "targets", "-1"),
        ({"logits": [[1.0, 2.0]], "targets": [0.5]}, "targets", "integer"),
        ({"logits": [[1.0, 2.0]], "targets": [True]}, "targets", "boolean"),
        ({"logits": [[1.0, 2.0]], "targets": [0, 1]}, "targets", "[2]"),
        ({"logits": [1.0, 2.0], "targets": [0]}, "logits", "rank"),
        ({"logits": [[1.0, 2.0]], "targets": [0], "temperature": 0}, "temperature", ""),
        ({"logits": [[1.0, 2.0]], "targets": [0], "top_logprobs": 21}, "top_logprobs", ""),
        ({"logits": [[1.0, 2.0]], "targets": [0], "shift": "yes"}, "shift", "boolean"),
        ({"logits": [[1.0, 2.0]], "targets": [0], "ignore_index": 1.5}, "ignore_index", "integer"),
    ],
)
def test_invalid_requests_are_422_naming_the_field(
    client: FlaskClient, body: dict[str, Any], field: str, says: str
) -> None:
    assert_problem(client.post("/v1/log-likelihood", json=body), 422, field=field, says=says)


@pytest.mark.parametrize(
    "ignore_index", ["-9223372036854775809", "-9223372036854775808.5", "9223372036854775808", "1e19"]
)
def test_an_ignore_index_beyond_int64_is_refused_not_rounded_into_range(
    client: FlaskClient, ignore_index: str
) -> None:
    # orjson reads an integer literal beyond int64 as a float: -9223372036854775809 became -2**63, in range,
    # and the request was answered 200 with position 0 (target -2**63) ignored.
    body = (
        '{"logits": [[2.0, 0.5], [0.1, 1.5]], "targets": [-9223372036854775808, 1], '
        f'"ignore_index": {ignore_index}}}'
    )
    response = client.post("/v1/log-likelihood", data=body, content_type="application/json")
    assert_problem(response, 422, field="ignore_index", says="out of range")


def test_the_int64_bounds_written_as_integers_are_in_range(client: FlaskClient) -> None:
    for ignore_index in ("-9223372036854775808", "9223372036854775807"):
        body = f'{{"logits": [[2.0, 0.5], [0.1, 1.5]], "targets": [0, 1], "ignore_index": {ignore_index}}}'
        response = client.post("/v1/log-likelihood", data=body, content_type="application/json")
        assert response.status_code == 200, response.get_data(as_text=True)
        assert response.get_json()["num_tokens"] == 2


def test_target_out_of_range_is_a_validation_problem(client: FlaskClient) -> None:
    response = client.post("/v1/log-likelihood", json={"logits": [[1.0, 2.0], [0.0, 1.0]], "targets": [0, 5]})
    problem = assert_problem(response, 422, field="targets", says="5")
    assert problem["type"].endswith(":validation-error")


def test_perplexity_overflow_is_422(client: FlaskClient) -> None:
    response = client.post("/v1/log-likelihood", json={"logits": [[0.0, 1e6]], "targets": [0]})
    problem = assert_problem(response, 422, says="overflow")
    assert problem["type"].endswith(":numerical-overflow")


def _top_logprobs_reference(ids: np.ndarray, values: np.ndarray, scored: np.ndarray) -> Any:
    """Plain loops: per position a list of {"token", "logprob"}, None where unscored, nested as the batch."""
    if scored.ndim > 1:
        return [_top_logprobs_reference(ids[b], values[b], scored[b]) for b in range(scored.shape[0])]
    rows: list[Any] = []
    for position in range(scored.shape[0]):
        if not scored[position]:
            rows.append(None)
            continue
        row = []
        for rank in range(ids.shape[-1]):
            row.append({"token": int(ids[position, rank]), "logprob": float(values[position, rank])})
        rows.append(row)
    return rows


@pytest.mark.parametrize("batch", [(), (2,), (2, 3)])
@pytest.mark.parametrize("positions", [1, 3, 7, 8])
@pytest.mark.parametrize("top", [1, 2, 4, 7])
def test_top_logprobs_are_written_in_blocks_as_one_list_would_be(
    monkeypatch: pytest.MonkeyPatch, batch: tuple[int, ...], positions: int, top: int
) -> None:
    """Written a block of whole positions at a time, at most 6 entries a block here (65,536 served, or one
    position when it has more): the same bytes as the whole list."""
    import orjson

    from service.protocols.declarations import likelihood

    monkeypatch.setattr(likelihood, "TOP_ENTRIES_PER_BLOCK", 6)
    blocks: list[list[object]] = []
    dumps = orjson.dumps

    def recording(rows: list[object]) -> bytes:
        blocks.append(rows)
        return dumps(rows)

    monkeypatch.setattr(orjson, "dumps", recording)  # the module's calls, through the same module object
    rng = np.random.default_rng(positions + len(batch) + 10 * top)
    ids = rng.integers(0, 50, size=(*batch, positions, top))
    values = rng.normal(size=(*batch, positions, top))
    values[(..., 0, 0)] = np.nan  # a non-finite log-probability is written as null, as before
    scored = rng.random(size=(*batch, positions)) < 0.7
    fragment = likelihood._top_logprobs(ids, values, scored)
    monkeypatch.undo()
    assert dumps(fragment) == dumps(_top_logprobs_reference(ids, values, scored))
    per_block = max(1, 6 // top)
    assert [len(rows) for rows in blocks] == [
        min(per_block, positions - start)
        for _ in range(int(np.prod(batch)))
        for start in range(0, positions, per_block)
    ]
