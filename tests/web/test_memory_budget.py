"""The memory budget: limits from one setting, answer sizes refused before computing, answers in pieces."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest
from flask.testing import FlaskClient

from service import create_app
from service.settings import MIB, Settings
from service.web import answers
from service.web.answers import STREAM_ABOVE_ELEMENTS, encode_in_pieces
from service.web.json_provider import dumps_bytes
from tests.problems import assert_problem


@pytest.fixture(scope="module")
def plain_client() -> FlaskClient:
    """No contract check: openapi-core would walk millions of values in Python."""
    return create_app({"TESTING": True}).test_client()


def test_every_limit_follows_from_the_budget() -> None:
    default = Settings.from_env({})
    assert default.memory_budget_bytes == 384 * MIB
    assert default.max_body_bytes == 16 * MIB
    assert default.max_work_elements == 16_777_216
    assert default.max_output_only_work_elements == 67_108_864
    assert default.max_answer_bytes == 192 * MIB
    doubled = Settings.from_env({"MEMORY_BUDGET_BYTES": str(768 * MIB)})
    assert doubled.max_body_bytes == 32 * MIB
    assert doubled.max_work_elements == 2 * 16_777_216
    assert doubled.max_output_only_work_elements == 2 * 67_108_864
    assert doubled.max_answer_bytes == 384 * MIB
    own = Settings.from_env({"MEMORY_BUDGET_BYTES": str(768 * MIB), "MAX_BODY_BYTES": "1000"})
    assert own.max_body_bytes == 1000  # a limit set on its own wins over the derived one
    assert own.as_flask_config()["MAX_ANSWER_BYTES"] == 384 * MIB


@pytest.mark.parametrize("shape", [(1000,), (7, 300), (3, 5, 70), (2, 1, 40, 3), (50, 1)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.bool_])
def test_pieces_join_to_exactly_the_whole_encoding(shape: tuple[int, ...], dtype: type) -> None:
    rng = np.random.default_rng(7)
    array = (rng.standard_normal(shape) * 1e3).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        array.flat[::17] = np.nan  # written as null, in pieces as in the whole
        array.flat[5] = -np.inf
    body = {"first": array, "scale": 0.125, "rows": array.T, "empty": [], "nested": {"a": [1, 2]}}
    for block in (1, 16, 999, 10_000):
        assert b"".join(encode_in_pieces(body, block_elements=block)) == dumps_bytes(body)


def test_a_large_answer_is_streamed_with_the_right_values(plain_client: FlaskClient) -> None:
    size = STREAM_ABOVE_ELEMENTS + 1000
    logits = [float(i % 3) for i in range(size)]
    response = plain_client.post("/v1/softmax", json={"logits": logits})
    assert response.status_code == 200
    assert response.is_streamed
    probabilities = orjson.loads(response.get_data())["probabilities"]
    # closed form: the counts of 0, 1 and 2 among the logits weight e^0, e^1, e^2
    counts = [len(range(k, size, 3)) for k in range(3)]
    total = sum(count * math.exp(k) for k, count in enumerate(counts))
    assert probabilities[:3] == pytest.approx([math.exp(k) / total for k in range(3)], rel=1e-12)
    assert len(probabilities) == size


def test_the_broadcasting_amplification_gets_a_413_naming_the_answer_size(plain_client: FlaskClient) -> None:
    # 8.5 KB of body asking for a 16-million-value answer (318 MB when it was written whole)
    body = {
        "query": np.zeros((16, 1, 16, 1)).tolist(),
        "key": np.zeros((1, 256, 1, 1)).tolist(),
        "value": np.ones((1, 256)).tolist(),
        "include": [],
    }
    problem = assert_problem(plain_client.post("/v1/attention", json=body), 413)
    assert problem["type"].endswith(":answer-too-large")
    assert "16,777,216 values" in problem["detail"]
    assert "419,430,400 bytes" in problem["detail"]
    assert f"{192 * MIB:,} bytes (MAX_ANSWER_BYTES)" in problem["detail"]


def _all_rows_empty(query_rows: int) -> dict[str, object]:
    """Every query row sees no key, so empty_rows: zero lists every one of them."""
    return {
        "query": np.zeros((16, 1, query_rows, 1)).tolist(),
        "key": np.zeros((1, 256, 1, 1)).tolist(),
        "value": [[1.0]],
        "mask": [False],
        "empty_rows": "zero",
        "include": [],
    }


def test_empty_rows_zero_amplification_gets_a_413(plain_client: FlaskClient) -> None:
    # 16 × 256 × 1024 rows, each listed as 3 integers: 16.8 million values from a few KB
    problem = assert_problem(plain_client.post("/v1/attention", json=_all_rows_empty(1024)), 413)
    assert problem["type"].endswith(":answer-too-large")


def test_empty_rows_zero_within_the_budget_is_answered(plain_client: FlaskClient) -> None:
    response = plain_client.post("/v1/attention", json=_all_rows_empty(64))
    assert response.status_code == 200
    assert response.is_streamed
    answer = orjson.loads(response.get_data())
    rows = 16 * 256 * 64
    assert len(answer["empty_rows"]) == rows
    assert answer["empty_rows"][:2] == [[0, 0, 0], [0, 0, 1]]
    assert answer["empty_rows"][-1] == [15, 255, 63]
    assert np.array(answer["output"]).shape == (16, 256, 64, 1)
    assert not np.array(answer["output"]).any()


def test_many_unknown_fields_are_refused_without_a_message_each(plain_client: FlaskClient) -> None:
    fields = 1_000_000
    body = b'{"logits":[1.0],' + b",".join(b'"f%d":0' % i for i in range(fields)) + b"}"
    response = plain_client.post("/v1/softmax", data=body, content_type="application/json")
    problem = assert_problem(response, 422, field="body", says=f"{fields - 20:,} more fields")
    assert list(problem["errors"])[:3] == ["f0", "f1", "f2"]
    assert len(response.get_data()) < 10_000


def test_the_loop_looks_for_other_connections_between_the_pieces_of_an_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Made as the server sends them, on the worker's loop: a send to a fast reader never waits, and 8 million
    # values took 2.2 s to write with /livez waiting 1.8 s (make attack's "streamed" shows it under gunicorn)
    turns: list[float] = []
    monkeypatch.setattr(
        answers, "let_other_connections_run", lambda *, poll_seconds: turns.append(poll_seconds)
    )
    body = {"output": np.zeros((10, 3)), "scale": 0.5}
    pieces = list(encode_in_pieces(body, block_elements=6))
    assert b"".join(pieces) == dumps_bytes(body)
    assert len(turns) == len(pieces) > 5
    assert all(seconds > 0 for seconds in turns)  # a turn that polls for input, not a bare yield
