"""tritonclient[http] against gunicorn: Triton's extensions it calls besides infer (model configuration,
the repository index), compressed requests, and every model of the repository index answering as /v1.

Answers are compared with /v1's for the same inputs (relative 1e-12 in float64; NaN or -inf where /v1 writes
null), so the two protocols are one service.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from deploy.launch import Server, start

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
