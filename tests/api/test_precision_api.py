"""``"precision": "float32"`` on every endpoint: float32 arithmetic, float32 numbers, shorter bodies."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

RNG = np.random.default_rng(11)
REQUESTS: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "/v1/attention",
        {name: RNG.normal(size=(6, 5)).tolist() for name in ("query", "key", "value")},
        ["output", "weights"],
    ),
    ("/v1/softmax", {"logits": RNG.normal(size=(3, 9)).tolist()}, ["probabilities"]),
    (
        "/v1/log-likelihood",
        {"logits": RNG.normal(size=(7, 9)).tolist(), "targets": RNG.integers(0, 9, 7).tolist()},
        ["token_logprobs", "log_likelihood"],
    ),
]


@pytest.mark.parametrize(("path", "body", "fields"), REQUESTS, ids=[path for path, _, _ in REQUESTS])
def test_float32_answers_in_float32_close_to_float64(
    client: FlaskClient, path: str, body: dict[str, Any], fields: list[str]
) -> None:
    double = client.post(path, json=body)
    single = client.post(path, json={**body, "precision": "float32"})
    assert double.status_code == single.status_code == 200
    for field in fields:
        exact = np.asarray(double.get_json()[field], dtype=np.float64)
        approx = np.asarray(single.get_json()[field], dtype=np.float64)
        # Each number is written as the shortest text that reads back as its float32.
        assert [float(str(np.float32(x))) for x in approx.flat] == approx.ravel().tolist()
        assert not np.array_equal(approx, exact)  # float64 digits would not survive the round trip
        np.testing.assert_allclose(approx, exact, rtol=2e-6, atol=2e-7)
    assert len(single.get_data()) < 0.75 * len(double.get_data())
