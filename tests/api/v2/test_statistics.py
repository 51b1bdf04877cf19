"""/v2's statistics extension: Triton's document, counted from the same samples as /metrics."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from service.protocols.v2.models import MODELS

LOGITS = {"inputs": [{"name": "logits", "shape": [2, 3], "datatype": "FP64", "data": [1, 2, 3, 0, 0, 1]}]}


def _stat(client: FlaskClient, path: str) -> dict[str, Any]:
    response = client.get(path)
    assert response.status_code == 200
    (stat,) = response.get_json()["model_stats"]
    return stat  # type: ignore[no-any-return]


def _metric(client: FlaskClient, name: str, **labels: str) -> float:
    text = client.get("/metrics").get_data(as_text=True)
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def test_counts_after_requests_on_both_protocols(client: FlaskClient) -> None:
    before = _stat(client, "/v2/models/softmax/stats")
    for _ in range(3):
        assert client.post("/v2/models/softmax/infer", json=LOGITS).status_code == 200
    assert client.post("/v1/softmax", json={"logits": [[1.0, 2.0]]}).status_code == 200
    assert client.post("/v2/models/softmax/infer", json={"inputs": {}}).status_code == 400
    after = _stat(client, "/v2/models/softmax/versions/1/stats")
    stats, old = after["inference_stats"], before["inference_stats"]

    assert (after["name"], after["version"], after["batch_stats"]) == ("softmax", "1", [])
    assert after["inference_count"] - before["inference_count"] == 4
    assert after["execution_count"] - before["execution_count"] == 4
    assert stats["success"]["count"] - old["success"]["count"] == 4
    assert stats["fail"]["count"] - old["fail"]["count"] == 1
    for member in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert stats[member]["count"] - old[member]["count"] == 4, member
        assert stats[member]["ns"] > old[member]["ns"], member
    assert stats["success"]["ns"] > old["success"]["ns"]
    assert stats["fail"]["ns"] > old["fail"]["ns"]
    assert after["last_inference"] >= before["last_inference"]
    assert after["last_inference"] > 1.7e12  # milliseconds since the epoch


def test_the_statistics_and_metrics_agree(client: FlaskClient) -> None:
    assert client.post("/v2/models/softmax/infer", json=LOGITS).status_code == 200
    stat = _stat(client, "/v2/models/softmax/stats")
    seconds = _metric(client, "attention_inference_compute_duration_seconds_sum", model="softmax")
    assert stat["execution_count"] == _metric(
        client, "attention_inference_compute_duration_seconds_count", model="softmax"
    )
    assert abs(stat["inference_stats"]["compute_infer"]["ns"] - seconds * 1e9) <= 1
    assert stat["inference_count"] == _metric(
        client, "attention_inference_requests_total", model="softmax", outcome="success"
    )


def test_every_model_and_unknown_ones(client: FlaskClient) -> None:
    everything = client.get("/v2/models/stats").get_json()["model_stats"]
    models = [model["name"] for model in client.get("/v2/models/stats").get_json()["model_stats"]]
    assert models == list(MODELS)
    assert len(everything) == len(MODELS) == 9
    unknown = client.get("/v2/models/nope/stats")
    assert unknown.status_code == 404
    assert "nope" in unknown.get_json()["errors"]["model"][0]
    assert client.get("/v2/models/softmax/versions/9/stats").status_code == 404
