"""/metrics in single-process mode (no PROMETHEUS_MULTIPROC_DIR): counts, latency, body and work sizes."""

from __future__ import annotations

from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families


def _samples(client: FlaskClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.mimetype == "text/plain"
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.get_data(as_text=True))
        for sample in family.samples
    }


def _value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_requests_latency_body_and_work_are_counted_per_route(client: FlaskClient) -> None:
    before = _samples(client)
    body = b'{"query": [[0, 1]], "key": [[1, 0], [0, 1], [1, 1]], "value": [[6, 0], [0, 3], [1, 1]]}'
    for _ in range(3):
        ok = client.post("/v1/attention", data=body, content_type="application/json")
        assert ok.status_code == 200
    invalid = b'{"query": "x"}'
    assert client.post("/v1/attention", data=invalid, content_type="application/json").status_code == 422
    after = _samples(client)

    def delta(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    route = {"endpoint": "/v1/attention", "method": "POST"}
    assert delta("attention_http_requests_total", **route, status="200") == 3
    assert delta("attention_http_requests_total", **route, status="422") == 1
    assert delta("attention_http_request_duration_seconds_count", **route, status="200") == 3
    assert delta("attention_http_request_body_bytes_sum", endpoint="/v1/attention") == 3 * len(body) + len(
        invalid
    )
    # 1 query row × 3 keys = 3 score elements, for each accepted request; the 422 did no work.
    assert delta("attention_work_elements_count", endpoint="/v1/attention") == 3
    assert delta("attention_work_elements_sum", endpoint="/v1/attention") == 9
    assert delta("attention_work_elements_bucket", endpoint="/v1/attention", le="4.0") == 3


def test_unknown_paths_share_one_label(client: FlaskClient) -> None:
    before = _samples(client)
    for path in ("/a", "/b/c", "/v1/nothing"):
        assert client.get(path).status_code == 404
    after = _samples(client)
    labels = {"endpoint": "<unmatched>", "method": "GET", "status": "404"}
    assert (
        _value(after, "attention_http_requests_total", **labels)
        - _value(before, "attention_http_requests_total", **labels)
        == 3
    )
    assert not any(dict(key[1]).get("endpoint") in ("/a", "/b/c") for key in after)
