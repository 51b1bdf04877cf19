"""tritonclient reads /v2's statistics from two gunicorn workers: every worker's requests are counted, and
the answer agrees with /metrics (both read through prometheus_client's multiprocess collector)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from deploy.launch import Server, start
from tests.deploy import slow_app

tritonclient_http = pytest.importorskip("tritonclient.http")

pytestmark = pytest.mark.gunicorn

HELD = 4  # held requests at once on two single-threaded workers: both workers take some
LOGITS = {"inputs": [{"name": "logits", "shape": [1, 2], "datatype": "FP64", "data": [0, 1]}]}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    running = start(slow_app.APP, {"GUNICORN_WORKER_CLASS": "sync"}, workers=2)
    yield running
    assert running.terminate() == 0, running.log()


def _successes(server: Server) -> float:
    text = httpx.get(server.url("/metrics"), timeout=30).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "attention_inference_requests_total"
        and sample.labels == {"model": "softmax", "protocol": "v2", "outcome": "success"}
    )


def test_tritonclient_reads_every_workers_statistics(server: Server) -> None:
    ids = [f"stats-{n}" for n in range(HELD)]

    def call(request_id: str) -> int:
        headers = {"X-Request-ID": request_id, "X-Test-Delay": "0.4"}
        return httpx.post(server.url("/v2/models/softmax/infer"), json=LOGITS, headers=headers).status_code

    with ThreadPoolExecutor(max_workers=HELD) as pool:
        assert list(pool.map(call, ids)) == [200] * HELD

    def served() -> dict[str, int]:  # request id → the pid that logged it
        lines = [json.loads(line) for line in list(server.stdout) if line.startswith("{")]
        return {line["request_id"]: line["pid"] for line in lines if line.get("request_id") in ids}

    server.wait_for(lambda: len(served()) == HELD, "the held requests' access-log lines")
    assert len(set(served().values())) == 2

    client = tritonclient_http.InferenceServerClient(url=server.url("").removeprefix("http://").rstrip("/"))
    try:
        logits = tritonclient_http.InferInput("logits", [1, 4], "FP64")
        logits.set_data_from_numpy(np.array([[1.0, 2.0, 3.0, 4.0]]))
        client.infer("softmax", [logits])
        assert httpx.post(server.url("/v1/softmax"), json={"logits": "x"}, timeout=30).status_code == 422
        stats: dict[str, Any] = client.get_inference_statistics("softmax")
        versioned: dict[str, Any] = client.get_inference_statistics("softmax", "1")
        everything: dict[str, Any] = client.get_inference_statistics()
    finally:
        client.close()

    (stat,) = stats["model_stats"]
    assert (stat["name"], stat["version"]) == ("softmax", "1")
    assert stat["inference_count"] == HELD + 1
    assert stat["execution_count"] == HELD + 1
    inference = stat["inference_stats"]
    assert inference["success"]["count"] == HELD + 1
    assert inference["fail"]["count"] == 1  # the /v1 422: a model's statistics cover both protocols
    for member in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert inference[member]["count"] == HELD + 1, member
    # The held requests slept 0.4 s each before their view: their time counts in success, not in a step.
    assert inference["success"]["ns"] >= HELD * 400_000_000
    assert versioned["model_stats"][0]["inference_count"] == HELD + 1
    assert [m["name"] for m in everything["model_stats"]] == [
        "attention",
        "feed-forward",
        "layer-norm",
        "log-likelihood",
        "multi-head-attention",
        "positional-encoding",
        "sample",
        "softmax",
        "transformer-block",
    ]
    assert _successes(server) == HELD + 1
