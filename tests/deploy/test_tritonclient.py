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


@pytest.mark.parametrize(
    ("call", "extension"),
    [
        (lambda triton: triton.load_model("softmax"), "model_repository"),
        (lambda triton: triton.unload_model("softmax"), "model_repository"),
        (lambda triton: triton.get_system_shared_memory_status(), "system_shared_memory"),
        (lambda triton: triton.register_system_shared_memory("r", "/r", 24), "system_shared_memory"),
        (lambda triton: triton.get_cuda_shared_memory_status(), "cuda_shared_memory"),
        (lambda triton: triton.get_trace_settings(), "trace"),
        (lambda triton: triton.get_trace_settings(model_name="softmax"), "trace"),
        (lambda triton: triton.get_log_settings(), "logging"),
    ],
)
def test_tritons_extensions_this_server_lacks_are_named_in_a_404(
    triton: Any, call: Any, extension: str
) -> None:
    # They were werkzeug's "The requested URL was not found on the server. If you entered the URL manually…"
    with pytest.raises(InferenceServerException) as refused:
        call(triton)
    assert refused.value.status() == "404"
    assert f"does not implement Triton's {extension}" in refused.value.message()
    assert "binary_tensor_data" in refused.value.message()  # and which it has


def test_a_shared_memory_input_is_refused_naming_shared_memory(triton: Any) -> None:
    # It was told it had neither data nor binary_data_size.
    logits = tritonclient_http.InferInput("logits", [3], "FP64")
    logits.set_shared_memory("region", 24)
    with pytest.raises(InferenceServerException) as refused:
        triton.infer("softmax", [logits])
    assert refused.value.status() == "422"
    assert "shared_memory_" in refused.value.message()
    assert "no shared memory" in refused.value.message()


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


# ---- every model of the repository index, as /v1 answers it ----

_RNG = np.random.default_rng(20)


def _normal(*shape: int) -> list[Any]:
    values: list[Any] = _RNG.normal(size=shape).tolist()
    return values


# One /v1 body per model, with options, nested options and optional outputs (include) where the model has
# them: the /v2 request is made from it (arrays are the metadata's input tensors, nested objects flattened to
# dotted names, the rest parameters, include the outputs). A model the index lists without an example here
# fails the test: each new model gets one.
V1_EXAMPLES: dict[str, dict[str, Any]] = {
    "attention": {
        "query": _normal(2, 3, 4),
        "key": _normal(2, 5, 4),
        "value": _normal(2, 5, 3),
        "mask": (_RNG.random((3, 5)) > 0.2).tolist(),
        "causal": True,
        "softcap": 5.0,
        "include": ["weights", "scores", "logsumexp"],
    },
    "softmax": {"logits": _normal(3, 9), "temperature": 0.7, "top_k": 5, "include": ["log_probabilities"]},
    "log-likelihood": {"logits": _normal(2, 4, 6), "targets": _RNG.integers(0, 6, (2, 4)).tolist()},
    "sample": {"logits": _normal(2, 7), "temperature": 0.9, "top_p": 0.9, "num_samples": 3, "seed": 11},
    "multi-head-attention": {
        "query": _normal(3, 4),
        "w_q": _normal(4, 4),
        "w_k": _normal(4, 2),
        "w_v": _normal(4, 2),
        "w_o": _normal(4, 4),
        "b_o": _normal(4),
        "num_heads": 2,
        "num_kv_heads": 1,
        "causal": True,
        "rotary": {"base": 500.0},
        "include": ["weights", "heads"],
    },
    "positional-encoding": {
        "kind": "rotary",
        "x": _normal(2, 5, 6),
        "positions": [3, 4, 5, 6, 7],
        "base": 100.0,
        "include": ["tables"],
    },
    "layer-norm": {"x": _normal(2, 3, 5), "kind": "rms", "weight": _normal(5), "eps": 1e-3},
    "feed-forward": {
        "x": _normal(2, 3, 4),
        "w_1": _normal(4, 6),
        "w_3": _normal(4, 6),
        "w_2": _normal(6, 4),
        "b_2": _normal(4),
        "activation": "geglu",
        "include": ["hidden"],
    },
    "transformer-block": {
        "x": _normal(2, 3, 4),
        "attention": {
            "w_q": _normal(4, 4),
            "w_k": _normal(4, 2),
            "w_v": _normal(4, 2),
            "w_o": _normal(4, 4),
            "num_heads": 2,
            "num_kv_heads": 1,
            "causal": True,
            "rotary": {"base": 500.0},
        },
        "feed_forward": {"w_1": _normal(4, 8), "w_2": _normal(8, 4), "activation": "silu"},
        "norm_1": {"kind": "rms", "weight": _normal(4)},
        "norm_2": {"bias": _normal(4)},
        "norm_position": "post",
        "include": ["weights", "residual"],
    },
}


def _flattened(body: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``body``'s members by dotted path (``rotary.base``), nested objects flattened, lists kept whole."""
    flat: dict[str, Any] = {}
    for name, value in body.items():
        if isinstance(value, dict):
            flat.update(_flattened(value, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = value
    return flat


_DTYPES = {"FP64": np.float64, "INT64": np.int64, "BOOL": np.bool_}


def _v1_as_array(value: Any) -> np.ndarray:
    """A /v1 answer's value as an array: null as NaN (where /v2's binary floats hold NaN or -inf)."""

    def replace(item: Any) -> Any:
        return [replace(i) for i in item] if isinstance(item, list) else (np.nan if item is None else item)

    return np.asarray(replace(value))


def _expected_outputs(v1_answer: dict[str, Any], output_names: set[str]) -> dict[str, np.ndarray]:
    """The /v2 outputs /v1's answer stands for: its members of the same names, and log-likelihood's
    ``top_logprobs`` objects split into the ``top_logprobs`` and ``top_tokens`` tensors."""
    expected: dict[str, np.ndarray] = {}
    for name, value in v1_answer.items():
        if name == "top_logprobs" and "top_tokens" in output_names:
            expected["top_logprobs"] = _v1_as_array([[[e["logprob"] for e in p] for p in s] for s in value])
            expected["top_tokens"] = _v1_as_array([[[e["token"] for e in p] for p in s] for s in value])
        elif name in output_names:
            expected[name] = _v1_as_array(value)
    return expected


def test_tritonclient_calls_every_model_and_each_answers_as_v1(
    server: Server, triton: Any, model_names: list[str]
) -> None:
    missing = sorted(set(model_names) - set(V1_EXAMPLES))
    assert not missing, f"models without an example in V1_EXAMPLES: {missing}"
    for name in model_names:
        body = V1_EXAMPLES[name]
        metadata = triton.get_model_metadata(name)
        inputs = {tensor["name"]: tensor["datatype"] for tensor in metadata["inputs"]}
        outputs = {tensor["name"] for tensor in metadata["outputs"]}
        flat = _flattened(body)
        flat.pop("include", None)  # the outputs requested below stand for it
        tensors = []
        for path, datatype in inputs.items():
            if path in flat:
                array = np.asarray(flat.pop(path), dtype=_DTYPES[datatype])
                tensor = tritonclient_http.InferInput(path, list(array.shape), datatype)
                tensor.set_data_from_numpy(array, binary_data=True)
                tensors.append(tensor)
        v1_answer = _v1(server, f"/v1/{name}", body)
        expected = _expected_outputs(v1_answer, outputs)
        requested = [tritonclient_http.InferRequestedOutput(n, binary_data=True) for n in expected]
        result = triton.infer(name, tensors, outputs=requested, parameters=flat)
        assert {output["name"] for output in result.get_response()["outputs"]} == set(expected), name
        for output, want in expected.items():
            got = result.as_numpy(output)
            assert got.shape == want.shape or got.size == want.size == 0, (
                name,
                output,
                got.shape,
                want.shape,
            )
            if got.dtype.kind == "f":
                got = np.where(np.isneginf(got), np.nan, got)  # /v1 writes a hidden score as null
                np.testing.assert_allclose(got, want.astype(np.float64), rtol=1e-12, atol=0, equal_nan=True)
            else:
                np.testing.assert_array_equal(got.reshape(want.shape), want, err_msg=f"{name}.{output}")


# ---- metadata honest about rank ----


def _conforms(shape: tuple[int, ...], tensor: dict[str, Any]) -> bool:
    """Whether a tensor of ``shape`` is one the metadata allows: its rank within the stated range (``shape``
    gives the least, its ``parameters`` the most) and each stated trailing size matched (-1: any)."""
    declared = tensor["shape"]
    if not len(declared) <= len(shape) <= tensor["parameters"]["max_rank"]:
        return False
    return all(size in (-1, got) for size, got in zip(declared[::-1], shape[::-1], strict=False))


@pytest.mark.parametrize("query_shape", [(4,), (3, 4), (2, 3, 4), (2, 2, 3, 4)])
def test_a_query_of_any_rank_the_metadata_allows_is_answered_as_v1(
    server: Server, triton: Any, query_shape: tuple[int, ...]
) -> None:
    metadata = triton.get_model_metadata("attention")
    tensors = {tensor["name"]: tensor for tensor in metadata["inputs"]}
    query = tensors["query"]
    # The least rank (a 1-D query is a single query row), -1 for each dimension; the most in parameters.
    assert query["shape"] == [-1]
    assert query["parameters"]["min_rank"] == 1
    assert query["parameters"]["max_rank"] == 4
    assert "broadcast" in metadata["parameters"]["leading_dimensions"]
    rng = np.random.default_rng(len(query_shape))
    arrays = {
        "query": rng.normal(size=query_shape),
        "key": rng.normal(size=(2, 5, 4)),
        "value": rng.normal(size=(5, 3)),
    }
    for name, array in arrays.items():
        assert _conforms(array.shape, tensors[name]), (name, array.shape, tensors[name])
    inputs = []
    for name, array in arrays.items():
        tensor = tritonclient_http.InferInput(name, list(array.shape), "FP64")
        tensor.set_data_from_numpy(array, binary_data=True)
        inputs.append(tensor)
    result = triton.infer("attention", inputs, outputs=[tritonclient_http.InferRequestedOutput("output")])
    expected = _v1(server, "/v1/attention", {name: array.tolist() for name, array in arrays.items()})
    np.testing.assert_allclose(result.as_numpy("output"), expected["output"], rtol=1e-12, atol=0)


def test_a_query_beyond_the_stated_rank_is_refused_naming_it(triton: Any) -> None:
    query = next(t for t in triton.get_model_metadata("attention")["inputs"] if t["name"] == "query")
    shape = (1, 1, 2, 3, 4)
    assert not _conforms(shape, query)
    inputs = []
    for name, array in {"query": np.ones(shape), "key": np.ones((5, 4)), "value": np.ones((5, 3))}.items():
        tensor = tritonclient_http.InferInput(name, list(array.shape), "FP64")
        tensor.set_data_from_numpy(array, binary_data=True)
        inputs.append(tensor)
    with pytest.raises(InferenceServerException) as refused:
        triton.infer("attention", inputs)
    assert "query" in refused.value.message()
