"""Real clients against gunicorn: tritonclient[http] and this repository's Python client drive /v2.

Each answer is compared with /v1's for the same inputs (relative 1e-12 in float64; NaN or -inf where /v1
writes null), so the two protocols are one service.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest

from deploy.launch import Server, start
from tests.sockets import refusing_url

tritonclient_http = pytest.importorskip("tritonclient.http")
from attention_client import ApiError, AsyncClient, Client, ConnectionFailed  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = pytest.mark.gunicorn

RNG = np.random.default_rng(11)
QUERY = RNG.normal(size=(2, 4, 8))
KEY = RNG.normal(size=(2, 6, 8))
VALUE = RNG.normal(size=(2, 6, 5))
MASK = RNG.random((4, 6)) > 0.3
MASK[:, 0] = True
LOGITS = RNG.normal(size=(3, 7)) * 2
TOKEN_LOGITS = RNG.normal(size=(2, 5, 9))
TARGETS = RNG.integers(0, 9, size=(2, 5))
TARGETS[0, 2] = -100


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    running = start(workers=1, keep_stdout=False)
    yield running
    assert running.terminate() == 0, running.log()


@pytest.fixture(scope="module")
def triton(server: Server) -> Any:
    client = tritonclient_http.InferenceServerClient(url=server.url("").removeprefix("http://").rstrip("/"))
    yield client
    client.close()


def v1(server: Server, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(server.url(path), json=body, timeout=30)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def as_array(value: Any, *, nulls: float = np.nan) -> np.ndarray:
    def replace(item: Any) -> Any:
        return [replace(i) for i in item] if isinstance(item, list) else (nulls if item is None else item)

    return np.array(replace(value), dtype=np.float64)


def assert_same(got: np.ndarray, expected: np.ndarray, *, rtol: float = 1e-12) -> None:
    """Equal to ``rtol`` (NaN or -inf where /v1 has null). A float32 answer is compared in float32: /v1
    writes float32 numbers with the fewest digits that read back as the same float32."""
    assert got.shape == expected.shape
    expected = expected.astype(got.dtype)
    got = np.where(np.isneginf(got), np.nan, got)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=0, equal_nan=True)


def _input(name: str, array: np.ndarray, datatype: str, *, binary: bool) -> Any:
    tensor = tritonclient_http.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


# ---- tritonclient ----


def test_tritonclient_sees_a_live_ready_server_and_its_models(triton: Any) -> None:
    assert triton.is_server_live()
    assert triton.is_server_ready()
    metadata = triton.get_server_metadata()
    assert "binary_tensor_data" in metadata["extensions"]
    for model in ("attention", "softmax", "log-likelihood"):
        assert triton.is_model_ready(model)
        assert triton.is_model_ready(model, model_version="1")
        assert triton.get_model_metadata(model)["name"] == model
    assert not triton.is_model_ready("gpt")


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("datatype", ["FP64", "FP32"])
def test_tritonclient_attention_equals_v1(server: Server, triton: Any, binary: bool, datatype: str) -> None:
    dtype = np.float64 if datatype == "FP64" else np.float32
    inputs = [
        _input("query", QUERY.astype(dtype), datatype, binary=binary),
        _input("key", KEY.astype(dtype), datatype, binary=binary),
        _input("value", VALUE.astype(dtype), datatype, binary=binary),
        _input("mask", MASK, "BOOL", binary=binary),
    ]
    outputs = [
        tritonclient_http.InferRequestedOutput(name, binary_data=binary) for name in ("output", "scores")
    ]
    result = triton.infer("attention", inputs, outputs=outputs, parameters={"causal": True})
    precision = "float64" if datatype == "FP64" else "float32"
    expected = v1(
        server,
        "/v1/attention",
        {
            "query": QUERY.astype(dtype).tolist(),
            "key": KEY.astype(dtype).tolist(),
            "value": VALUE.astype(dtype).tolist(),
            "mask": MASK.tolist(),
            "causal": True,
            "include": ["scores"],
            "precision": precision,
        },
    )
    assert result.as_numpy("output").dtype == dtype
    assert result.as_numpy("weights") is None  # not asked for
    for name in ("output", "scores"):
        assert_same(result.as_numpy(name), as_array(expected[name]))


def test_tritonclient_softmax_with_parameters_and_a_subset_of_outputs(server: Server, triton: Any) -> None:
    parameters = {"temperature": 0.7, "top_k": 5, "top_p": 0.95}
    inputs = [_input("logits", LOGITS, "FP64", binary=True)]
    outputs = [tritonclient_http.InferRequestedOutput(n) for n in ("log_probabilities", "argmax")]
    result = triton.infer("softmax", inputs, outputs=outputs, parameters=parameters)
    expected = v1(
        server, "/v1/softmax", {"logits": LOGITS.tolist(), **parameters, "include": ["log_probabilities"]}
    )
    assert_same(result.as_numpy("log_probabilities"), as_array(expected["log_probabilities"]))
    np.testing.assert_array_equal(result.as_numpy("argmax"), expected["argmax"])
    assert result.as_numpy("probabilities") is None


@pytest.mark.parametrize("binary", [True, False])
def test_tritonclient_log_likelihood_with_int64_targets(server: Server, triton: Any, binary: bool) -> None:
    inputs = [
        _input("logits", TOKEN_LOGITS, "FP64", binary=binary),
        _input("targets", TARGETS.astype(np.int64), "INT64", binary=binary),
    ]
    names = ("token_logprobs", "ranks", "log_likelihood", "perplexity", "is_greedy")
    outputs = [tritonclient_http.InferRequestedOutput(n, binary_data=binary) for n in names]
    result = triton.infer("log-likelihood", inputs, outputs=outputs, parameters={"shift": True})
    expected = v1(
        server,
        "/v1/log-likelihood",
        {"logits": TOKEN_LOGITS.tolist(), "targets": TARGETS.tolist(), "shift": True},
    )
    for name in ("token_logprobs", "log_likelihood", "perplexity"):
        assert_same(result.as_numpy(name), as_array(expected[name]))
    np.testing.assert_array_equal(result.as_numpy("ranks"), as_array(expected["ranks"], nulls=0))
    np.testing.assert_array_equal(result.as_numpy("is_greedy"), expected["is_greedy"])


@pytest.mark.parametrize(
    ("model", "inputs", "parameters", "names"),
    [
        ("softmax", [("logits", LOGITS, "FP64")], {"top_k": 0}, "top_k"),
        ("softmax", [("logits", LOGITS, "FP64")], {"temprature": 2.0}, "temprature"),
        (
            "attention",
            [("query", QUERY, "FP64"), ("key", KEY[..., :3], "FP64"), ("value", VALUE, "FP64")],
            {},
            "key",
        ),
        ("softmax", [("logits", LOGITS, "FP16")], {}, "logits"),
    ],
)
def test_tritonclient_shows_refusals_naming_the_tensor_or_parameter(
    triton: Any, model: str, inputs: list[tuple[str, np.ndarray, str]], parameters: dict[str, Any], names: str
) -> None:
    tensors = [
        _input(name, array.astype(np.float16) if datatype == "FP16" else array, datatype, binary=True)
        for name, array, datatype in inputs
    ]
    with pytest.raises(InferenceServerException) as refused:
        triton.infer(model, tensors, parameters=parameters)
    assert names in refused.value.message()
    assert refused.value.status() in ("400", "422")


# ---- the project's client ----


def test_the_python_client_equals_v1(server: Server) -> None:
    with Client(server.url("").rstrip("/")) as service:
        attention = service.attention(
            QUERY, KEY, VALUE, mask=MASK, causal=True, include=("weights", "logsumexp")
        )
        softmax = service.softmax(LOGITS, temperature=0.5, include=["log_probabilities"])
        scored = service.log_likelihood(TOKEN_LOGITS, TARGETS, shift=True, top_logprobs=3)
    expected = v1(
        server,
        "/v1/attention",
        {
            "query": QUERY.tolist(),
            "key": KEY.tolist(),
            "value": VALUE.tolist(),
            "mask": MASK.tolist(),
            "causal": True,
            "include": ["weights", "logsumexp"],
        },
    )
    assert_same(attention.output, as_array(expected["output"]))
    assert attention.weights is not None
    assert attention.logsumexp is not None
    assert_same(attention.weights, as_array(expected["weights"]))
    assert_same(attention.logsumexp, as_array(expected["logsumexp"]))
    assert attention.scores is None
    assert attention.scale == expected["scale"]

    expected = v1(
        server,
        "/v1/softmax",
        {"logits": LOGITS.tolist(), "temperature": 0.5, "include": ["log_probabilities"]},
    )
    assert_same(softmax.probabilities, as_array(expected["probabilities"]))
    assert softmax.log_probabilities is not None
    assert_same(softmax.log_probabilities, as_array(expected["log_probabilities"]))
    np.testing.assert_array_equal(softmax.argmax, expected["argmax"])

    expected = v1(
        server,
        "/v1/log-likelihood",
        {"logits": TOKEN_LOGITS.tolist(), "targets": TARGETS.tolist(), "shift": True, "top_logprobs": 3},
    )
    assert_same(scored.token_logprobs, as_array(expected["token_logprobs"]))
    np.testing.assert_array_equal(scored.num_tokens, expected["num_tokens"])
    assert scored.top_tokens is not None
    assert scored.top_tokens[1, 1].tolist() == [entry["token"] for entry in expected["top_logprobs"][1][1]]


def test_the_async_client_equals_the_sync_one(server: Server) -> None:
    async def call() -> Any:
        async with AsyncClient(server.url("").rstrip("/")) as service:
            return await asyncio.gather(
                service.attention(QUERY.astype(np.float32), KEY.astype(np.float32), VALUE.astype(np.float32)),
                service.softmax(LOGITS, top_k=3),
            )

    # A thread of its own: the browser tests' Playwright may leave an event loop running in this one.
    with ThreadPoolExecutor(max_workers=1) as thread:
        attention, softmax = thread.submit(lambda: asyncio.run(call())).result(timeout=60)
    with Client(server.url("").rstrip("/")) as service:
        np.testing.assert_array_equal(
            attention.output,
            service.attention(
                QUERY.astype(np.float32), KEY.astype(np.float32), VALUE.astype(np.float32)
            ).output,
        )
        np.testing.assert_array_equal(softmax.probabilities, service.softmax(LOGITS, top_k=3).probabilities)
    assert attention.output.dtype == np.float32


def test_the_python_client_raises_api_error_naming_the_field(server: Server) -> None:
    with Client(server.url("").rstrip("/")) as service, pytest.raises(ApiError) as refused:
        service.attention(QUERY, KEY[..., :3], VALUE)
    assert refused.value.status == 422
    assert "key" in refused.value.errors
    assert refused.value.title == "Invalid request"
    assert refused.value.request_id


def test_a_refused_connection_raises_connection_failed_with_httpx_s_error_chained() -> None:
    # (after the transport's retries: an answer from the service is never retried, a failed connect is)
    with (
        refusing_url() as url,
        Client(url, retries=1, timeout=2) as service,
        pytest.raises(ConnectionFailed) as failed,
    ):
        service.softmax([1.0, 2.0])
    assert isinstance(failed.value.__cause__, httpx.ConnectError)
