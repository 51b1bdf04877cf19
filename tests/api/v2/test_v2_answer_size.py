"""/v2's answer-size bound in the answer's own encoding: binary tensor data by its bytes, JSON by its text.

The bound (``MAX_ANSWER_BYTES``) is checked before computing; a binary answer of float64 values takes 8 bytes
per value, of float32 values 4, while JSON may take 25 (the longest float64 and its comma).
"""

from __future__ import annotations

import numpy as np
import pytest
from flask.testing import FlaskClient

from service import create_app
from tests.api.v2.test_v2_api import binary_body, json_tensor, read_answer
from tests.problems import assert_problem

RNG = np.random.default_rng(2026_12_01)
N = 64
QUERY, KEY, VALUE = (RNG.normal(size=(N, 8)) for _ in range(3))
# output (64 × 8) and weights (64 × 64): 4,608 values; as JSON up to 115,200 bytes, as binary FP64 36,864
# and FP32 18,432.
VALUES = N * 8 + N * N
OUTPUTS = ("output", "weights")


def _client(limit: int) -> FlaskClient:
    return create_app({"TESTING": True, "MAX_ANSWER_BYTES": limit}).test_client()


def _binary_infer(client: FlaskClient, datatype: str, *, binary_outputs: bool = True) -> object:
    dtype = np.float64 if datatype == "FP64" else np.float32
    tensors = [
        (name, array.astype(dtype), datatype)
        for name, array in zip(("query", "key", "value"), (QUERY, KEY, VALUE), strict=True)
    ]
    outputs = [{"name": name, "parameters": {"binary_data": binary_outputs}} for name in OUTPUTS]
    body, headers = binary_body(tensors, outputs=outputs)
    return client.post("/v2/models/attention/infer", data=body, headers=headers)


def test_a_binary_fp64_answer_is_estimated_at_8_bytes_per_value_not_as_json() -> None:
    client = _client(50_000)  # over 8 × 4,608 = 36,864, under 25 × 4,608 = 115,200
    answer = read_answer(_binary_infer(client, "FP64"))
    assert answer["weights"].shape == (N, N)
    np.testing.assert_allclose(answer["weights"].sum(axis=-1), 1.0, rtol=1e-12)
    # The same outputs as JSON are refused, by their JSON estimate.
    problem = assert_problem(_binary_infer(client, "FP64", binary_outputs=False), 413)
    assert problem["type"].endswith(":answer-too-large")
    assert f"{VALUES:,} values, up to {25 * VALUES:,} bytes of JSON" in problem["detail"]


def test_a_binary_fp32_answer_is_estimated_at_4_bytes_per_value() -> None:
    client = _client(20_000)  # over 4 × 4,608 = 18,432, under 8 × 4,608 = 36,864
    answer = read_answer(_binary_infer(client, "FP32"))
    assert answer["output"].dtype == np.float32
    problem = assert_problem(_binary_infer(client, "FP64"), 413)
    assert f"up to {8 * VALUES:,} bytes of binary tensor data (8 per value)" in problem["detail"]
    assert "20,000 bytes (MAX_ANSWER_BYTES)" in problem["detail"]


def test_one_json_output_among_binary_ones_is_estimated_as_json() -> None:
    client = _client(50_000)
    tensors = [
        json_tensor(name, array, "FP64")
        for name, array in zip(("query", "key", "value"), (QUERY, KEY, VALUE), strict=True)
    ]
    outputs = [{"name": "output", "parameters": {"binary_data": True}}, {"name": "weights"}]
    response = client.post("/v2/models/attention/infer", json={"inputs": tensors, "outputs": outputs})
    assert_problem(response, 413, says="bytes of JSON")


@pytest.mark.parametrize("limit", [25 * VALUES])
def test_json_answers_keep_their_estimate(limit: int) -> None:
    assert _binary_infer(_client(limit), "FP64", binary_outputs=False).status_code == 200
    assert_problem(_binary_infer(_client(limit - 1), "FP64", binary_outputs=False), 413)
