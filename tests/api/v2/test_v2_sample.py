"""The sample model on /v2, and the Python client's sample: the same draws as /v1 for the same seed."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest
from attention_client import ApiError, Client, InvalidInput
from flask import Flask
from flask.testing import FlaskClient

from service.kernels import MAX_SEED
from tests.api.v2.test_v2_api import _v1, as_v1, binary_body, json_tensor, read_answer
from tests.problems import assert_problem

LOGITS = np.random.default_rng(17).normal(size=(3, 7)) * 2
MASK = np.array([True, True, False, True, True, True, True])
OPTIONS = {"temperature": 0.8, "top_k": 5, "top_p": 0.95, "min_p": 0.05, "num_samples": 6, "seed": 11}


def test_metadata_describes_the_sample_model(client: FlaskClient) -> None:
    metadata = client.get("/v2/models/sample").get_json()
    assert [tensor["name"] for tensor in metadata["inputs"]] == ["logits", "mask"]
    assert [(t["name"], t["datatype"]) for t in metadata["outputs"]] == [
        ("tokens", "INT64"),
        ("logprobs", "FP64"),
        ("seed", "INT64"),
    ]


@pytest.mark.parametrize("framing", ["json", "binary"])
def test_sample_draws_what_v1_draws(client: FlaskClient, framing: str) -> None:
    tensors = [("logits", LOGITS, "FP64"), ("mask", MASK, "BOOL")]
    if framing == "json":
        inputs = [json_tensor(name, array, datatype) for name, array, datatype in tensors]
        response = client.post("/v2/models/sample/infer", json={"inputs": inputs, "parameters": OPTIONS})
    else:
        body, headers = binary_body(tensors, parameters={**OPTIONS, "binary_data_output": True})
        response = client.post("/v2/models/sample/infer", data=body, headers=headers)
    answer = read_answer(response)
    expected = _v1(client, "/v1/sample", {"logits": LOGITS.tolist(), "mask": MASK.tolist(), **OPTIONS})
    np.testing.assert_array_equal(answer["tokens"], expected["tokens"])
    np.testing.assert_array_equal(answer["logprobs"], as_v1(expected["logprobs"]))  # the same arithmetic
    assert answer["seed"].shape == ()
    assert int(answer["seed"]) == 11
    assert not (answer["tokens"] == 2).any()  # masked


def test_sample_refusals_name_the_parameter(client: FlaskClient) -> None:
    inputs = [json_tensor("logits", LOGITS, "FP64")]
    for parameters, field in [
        ({"seed": MAX_SEED + 1}, "seed"),
        ({"min_p": 2}, "min_p"),
        ({"precision": "float32"}, "precision"),
    ]:
        response = client.post("/v2/models/sample/infer", json={"inputs": inputs, "parameters": parameters})
        assert_problem(response, 422, field=field)


def in_process(app: Flask) -> Client:
    return Client("http://testserver", transport=httpx.WSGITransport(app=app))


def test_the_python_client_samples_what_v1_draws(app: Flask, client: FlaskClient) -> None:
    with in_process(app) as service:
        drawn = service.sample(LOGITS, mask=MASK, **OPTIONS)
        fresh = service.sample(LOGITS, num_samples=3)
        again = service.sample(LOGITS, num_samples=3, seed=fresh.seed)
        shown = service.softmax(LOGITS, temperature=0.8, top_k=5, top_p=0.95, min_p=0.05, mask=MASK)
    expected = _v1(client, "/v1/sample", {"logits": LOGITS.tolist(), "mask": MASK.tolist(), **OPTIONS})
    np.testing.assert_array_equal(drawn.tokens, expected["tokens"])
    np.testing.assert_array_equal(drawn.logprobs, as_v1(expected["logprobs"]))
    assert drawn.seed == 11
    assert 0 <= fresh.seed <= MAX_SEED
    np.testing.assert_array_equal(again.tokens, fresh.tokens)
    # The distribution the draws follow, with min_p, is /v1/softmax's.
    probabilities = np.take_along_axis(shown.probabilities, drawn.tokens, axis=-1)
    assert (probabilities > 0).all()
    np.testing.assert_allclose(np.log(probabilities), drawn.logprobs, rtol=1e-12)


def test_the_python_client_raises_api_error_naming_the_field(app: Flask) -> None:
    # Refused before sending (the contract's minimum), as the ApiError subclass InvalidInput.
    with in_process(app) as service, pytest.raises(ApiError) as refused:
        service.sample(LOGITS, seed=-1)
    error: Any = refused.value
    assert isinstance(error, InvalidInput)
    assert error.status == 0
    assert error.errors == {"seed": ["seed must be >= 0, got -1"]}
