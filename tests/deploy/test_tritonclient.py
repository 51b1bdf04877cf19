"""tritonclient[http] against gunicorn: Triton's extensions it calls besides infer (model configuration,
the repository index), compressed requests, and every model of the repository index answering as /v1.

Answers are compared with /v1's for the same inputs (relative 1e-12 in float64; NaN or -inf where /v1 writes
null), so the two protocols are one service.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from deploy.launch import MIB, Server, start

tritonclient_http = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = pytest.mark.gunicorn

TRITON_TYPES = {
    "BOOL": "TYPE_BOOL",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "FP32": "TYPE_FP32",
    "FP64": "TYPE_FP64",
}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    running = start(workers=1, keep_stdout=False)
    yield running
    assert running.terminate() == 0, running.log()


@pytest.fixture(scope="module")
def triton(server: Server) -> Iterator[Any]:
    client = tritonclient_http.InferenceServerClient(url=server.url("").removeprefix("http://").rstrip("/"))
    yield client
    client.close()


@pytest.fixture(scope="module")
def model_names(triton: Any) -> list[str]:
    index = triton.get_model_repository_index()
    return [entry["name"] for entry in index]


# ---- model configuration and the repository index ----


def test_the_repository_index_lists_every_model_ready(triton: Any, model_names: list[str]) -> None:
    index = triton.get_model_repository_index()
    assert {"attention", "softmax", "log-likelihood", "sample"} <= set(model_names)
    assert all(entry["state"] == "READY" and entry["version"] == "1" for entry in index)
    assert all(triton.is_model_ready(name) for name in model_names)


def test_every_model_config_is_its_metadata_in_tritons_terms(triton: Any, model_names: list[str]) -> None:
    for name in model_names:
        config = triton.get_model_config(name)
        assert triton.get_model_config(name, model_version="1") == config
        metadata = triton.get_model_metadata(name)
        assert config["name"] == name
        assert config["max_batch_size"] == 0
        for section, tensors in (("input", metadata["inputs"]), ("output", metadata["outputs"])):
            assert [(t["name"], t["data_type"], t["dims"]) for t in config[section]] == [
                (t["name"], TRITON_TYPES[t["datatype"]], t["shape"]) for t in tensors
            ]


def test_the_config_of_an_unknown_model_is_an_error_naming_it(triton: Any) -> None:
    with pytest.raises(InferenceServerException) as refused:
        triton.get_model_config("gpt")
    assert refused.value.status() == "404"
    assert "'gpt'" in refused.value.message()


# ---- compressed requests ----


def _v1(server: Server, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(server.url(path), json=body, timeout=30)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
@pytest.mark.parametrize("binary", [True, False])
def test_a_compressed_infer_answers_as_v1(server: Server, triton: Any, algorithm: str, binary: bool) -> None:
    logits = np.random.default_rng(5).normal(size=(3, 7, 11))
    tensor = tritonclient_http.InferInput("logits", list(logits.shape), "FP64")
    tensor.set_data_from_numpy(logits, binary_data=binary)
    outputs = [
        tritonclient_http.InferRequestedOutput(n, binary_data=binary) for n in ("probabilities", "argmax")
    ]
    result = triton.infer(
        "softmax",
        [tensor],
        outputs=outputs,
        parameters={"temperature": 0.8, "top_k": 4},
        request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )
    expected = _v1(server, "/v1/softmax", {"logits": logits.tolist(), "temperature": 0.8, "top_k": 4})
    np.testing.assert_allclose(
        result.as_numpy("probabilities"), expected["probabilities"], rtol=1e-12, atol=0
    )
    np.testing.assert_array_equal(result.as_numpy("argmax"), expected["argmax"])


def test_a_zip_bomb_is_413_and_the_worker_holds_no_more_than_the_body_limit(server: Server) -> None:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(MIB)
    bomb = b"".join([*(compressor.compress(zeros) for _ in range(2048)), compressor.flush()])  # 2 GiB
    before = server.reset_peak_memory()
    response = httpx.post(
        server.url("/v2/models/softmax/infer"),
        content=bomb,
        headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        timeout=60,
    )
    assert response.status_code == 413, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert "MAX_BODY_BYTES" in response.json()["detail"]
    after = server.memory()
    assert set(after) == set(before)  # the same worker, alive
    for pid, memory in after.items():
        # At most the 16 MiB limit inflated (and its join) on top of what the worker held before.
        assert memory.peak - before[pid].rss < 96 * MIB, f"worker {pid}: {memory.peak:,} bytes at its peak"
    assert httpx.get(server.url("/readyz"), timeout=10).status_code == 200
