"""Per-model inference metrics on /metrics, after real requests on both protocols (single-process mode)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client import REGISTRY
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.parser import text_string_to_metric_families

import service.requests
from service import create_app
from service.web.admission import Reservation, admission_of
from service.web.inference import OUTCOMES, STEPS, model_route, outcome_of
from service.web.metrics import archive_dead_workers

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

SOFTMAX = {"logits": [[1.0, 2.0, 3.0]]}
ATTENTION_V2 = {
    "inputs": [
        {"name": "query", "shape": [1, 2], "datatype": "FP64", "data": [0, 1]},
        {"name": "key", "shape": [3, 2], "datatype": "FP64", "data": [1, 0, 0, 1, 1, 1]},
        {"name": "value", "shape": [3, 2], "datatype": "FP64", "data": [6, 0, 0, 3, 1, 1]},
    ]
}


def _samples(client: FlaskClient) -> Samples:
    text = client.get("/metrics").get_data(as_text=True)
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


class Delta:
    def __init__(self, before: Samples, after: Samples) -> None:
        self.before, self.after = before, after

    def __call__(self, name: str, **labels: str) -> float:
        key = (name, frozenset(labels.items()))
        return self.after.get(key, 0.0) - self.before.get(key, 0.0)


def test_model_routes_and_outcomes_come_from_fixed_sets() -> None:
    assert model_route("/v1/softmax", "POST") == ("softmax", "v1")
    assert model_route("/v2/models/log-likelihood/infer", "POST") == ("log-likelihood", "v2")
    assert model_route("/v2/models/attention/versions/1/infer", "POST") == ("attention", "v2")
    assert model_route("/v2/models/attention/ready", "GET") is None
    assert model_route("/v1/softmax", "OPTIONS") is None
    assert model_route("/livez", "GET") is None
    statuses = {200: "success", 401: "unauthorized", 408: "timeout", 413: "invalid", 415: "invalid"}
    statuses |= {422: "invalid", 503: "overloaded", 504: "timeout", 500: "error", 429: "overloaded"}
    # a transfer coding (gzip, chunked) or an HTTP version the client chose: its fault, not the server's
    statuses |= {501: "invalid", 505: "invalid", 502: "error"}
    assert {status: outcome_of(status) for status in statuses} == statuses
    assert set(statuses.values()) <= set(OUTCOMES)


def test_v1_and_v2_requests_are_counted_per_model_with_their_steps(client: FlaskClient) -> None:
    before = _samples(client)
    answers = [client.post("/v1/softmax", json=SOFTMAX) for _ in range(3)]
    assert [answer.status_code for answer in answers] == [200] * 3
    refused = client.post("/v1/softmax", json={"logits": "x"})
    assert refused.status_code == 422
    infers = [client.post("/v2/models/attention/infer", json=ATTENTION_V2) for _ in range(2)]
    assert [answer.status_code for answer in infers] == [200] * 2
    delta = Delta(before, _samples(client))

    v1 = {"model": "softmax", "protocol": "v1"}
    v2 = {"model": "attention", "protocol": "v2"}
    assert delta("attention_inference_requests_total", **v1, outcome="success") == 3
    assert delta("attention_inference_requests_total", **v1, outcome="invalid") == 1
    assert delta("attention_inference_requests_total", **v2, outcome="success") == 2
    assert delta("attention_inference_requests_total", **v2, outcome="invalid") == 0
    assert (
        delta("attention_inference_requests_total", model="attention", protocol="v1", outcome="success") == 0
    )
    # Each success decoded, queued, computed and encoded once; the 422 failed while decoding.
    for step in STEPS:
        assert delta(f"attention_inference_{step}_duration_seconds_count", **v1) == 3, step
        assert delta(f"attention_inference_{step}_duration_seconds_count", **v2) == 2, step
        assert delta(f"attention_inference_{step}_duration_seconds_sum", **v1) > 0, step
        assert delta(f"attention_inference_{step}_duration_seconds_bucket", **v1, le="+Inf") == 3, step
    # The values answered, counted from the answers themselves: probabilities, entropy and argmax per row.
    first = answers[0].get_json()
    per_answer = len(first["probabilities"][0]) + len(first["entropy"]) + len(first["argmax"])
    assert delta("attention_inference_values_total", **v1) == 3 * per_answer == 15
    assert delta("attention_inference_request_seconds_total", **v1, outcome="success") > 0
    assert delta("attention_inference_request_seconds_total", **v1, outcome="invalid") > 0
    after = _samples(client)
    assert after[("attention_inference_in_flight", frozenset(v1.items()))] == 0
    assert after[("attention_inference_last_success_timestamp_seconds", frozenset(v2.items()))] > 1.7e9


def test_a_request_is_in_flight_while_it_computes(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[float | None] = []
    run = service.requests.SoftmaxRequest.run

    def observed_run(self: Any) -> Any:
        seen.append(
            REGISTRY.get_sample_value("attention_inference_in_flight", {"model": "softmax", "protocol": "v2"})
        )
        return run(self)

    monkeypatch.setattr(service.requests.SoftmaxRequest, "run", observed_run)
    body = {"inputs": [{"name": "logits", "shape": [1, 3], "datatype": "FP64", "data": [1, 2, 3]}]}
    assert client.post("/v2/models/softmax/infer", json=body).status_code == 200
    assert seen == [1.0]
    labels = {"model": "softmax", "protocol": "v2"}
    assert REGISTRY.get_sample_value("attention_inference_in_flight", labels) == 0


def test_refusals_count_as_their_outcome_without_steps() -> None:
    # A budget that other requests hold: admission answers 503 from the headers, before the view runs (once
    # no room has come for the body within COMPUTE_QUEUE_SECONDS).
    app = create_app({"TESTING": True, "API_KEYS": ["secret"], "COMPUTE_QUEUE_SECONDS": 0.1})
    admission = admission_of(app)
    assert admission is not None
    others = Reservation(admission)
    assert others.take(admission.limits.memory_budget_bytes)
    client = app.test_client()
    before = _samples(client)
    body = json.dumps({"logits": [[1.0] * 40]})
    keyed = {"Authorization": "Bearer secret"}
    try:
        refused = client.post("/v1/softmax", data=body, content_type="application/json", headers=keyed)
        assert refused.status_code == 503
    finally:
        others.release()
    assert client.post("/v1/softmax", json=SOFTMAX).status_code == 401
    delta = Delta(before, _samples(client))
    v1 = {"model": "softmax", "protocol": "v1"}
    assert delta("attention_inference_requests_total", **v1, outcome="overloaded") == 1
    assert delta("attention_inference_requests_total", **v1, outcome="unauthorized") == 1
    assert delta("attention_inference_requests_total", **v1, outcome="success") == 0
    for step in STEPS:
        assert delta(f"attention_inference_{step}_duration_seconds_count", **v1) == 0


def test_made_up_models_and_paths_add_no_series(app: Flask) -> None:
    client = app.test_client()
    for model in ("softmax", "attention"):  # the real models' series exist first
        client.post(f"/v1/{model}", json={})
        client.post(f"/v2/models/{model}/infer", json={})

    def inference_series() -> set[tuple[str, frozenset[tuple[str, str]]]]:
        return {key for key in _samples(client) if key[0].startswith("attention_inference_")}

    known = inference_series()
    for n in range(300):
        token = f"zz{n}"
        assert client.post(f"/v1/{token}", json=SOFTMAX).status_code in (404, 405)
        assert client.post(f"/v2/models/{token}/infer", json=ATTENTION_V2).status_code == 404
        assert client.post(f"/v2/models/softmax/versions/{token}/infer", json=SOFTMAX).status_code == 404
        assert client.post(f"/v2/models/{token}/versions/1/infer", json=SOFTMAX).status_code == 404
    after = inference_series()
    assert after == known
    models = {dict(labels).get("model") for _, labels in after}
    routes = {rule.rule for rule in app.url_map.iter_rules()}
    for model in models:
        assert f"/v1/{model}" in routes or f"/v2/models/{model}/infer" in routes


def test_a_dead_workers_last_success_time_is_kept_as_the_largest(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)
    key = json.dumps(
        ["attention_inference_last_success_timestamp_seconds"] * 2
        + [{"model": "softmax", "protocol": "v1"}, "help"]
    )
    for name, value in ((f"gauge_max_{pid}.db", 5.0), ("gauge_max_archive.db", 7.0)):
        values = MmapedDict(str(tmp_path / name))
        values.write_value(key, value, 0.0)
        values.close()
    live = tmp_path / f"gauge_max_{os.getpid()}.db"
    values = MmapedDict(str(live))
    values.write_value(key, 9.0, 0.0)
    values.close()
    assert archive_dead_workers(tmp_path) == 1
    assert {path.name for path in tmp_path.glob("*.db")} == {"gauge_max_archive.db", live.name}
    kept = MmapedDict.read_all_values_from_file(str(tmp_path / "gauge_max_archive.db"))
    assert [(k, v) for k, v, _, _ in kept] == [(key, 7.0)]


def test_the_attack_suites_check_finds_labels_outside_the_fixed_sets(app: Flask) -> None:
    from deploy.attack import served_models, unbounded_inference_series

    models = served_models()
    routes = {rule.rule for rule in app.url_map.iter_rules()}
    assert models == {m for m in models if f"/v1/{m}" in routes or f"/v2/models/{m}/infer" in routes}
    assert {"attention", "softmax", "log-likelihood", "sample"} <= models
    client = app.test_client()
    client.post("/v1/softmax", json=SOFTMAX)
    client.post("/v2/models/zz-made-up/infer", json=SOFTMAX)
    assert unbounded_inference_series(client.get("/metrics").get_data(as_text=True), models) == []
    forged = 'attention_inference_requests_total{model="zz",protocol="v1",outcome="success"} 1.0\n'
    assert len(unbounded_inference_series(forged, models)) == 1
    forged = 'attention_inference_values_total{model="softmax",protocol="v9"} 1.0\n'
    assert len(unbounded_inference_series(forged, models)) == 1
