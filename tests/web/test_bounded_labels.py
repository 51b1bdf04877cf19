"""Hostile clients cannot grow /metrics: thousands of made-up methods, paths and ids add no series."""

from __future__ import annotations

import json

import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from service import create_app
from service.web.metrics import OTHER, ROUTED_METHODS, UNMATCHED, method_label, status_label

FLOOD = 1500  # requests per flood; two floods with fresh values each


@pytest.fixture(scope="module")
def plain_client() -> FlaskClient:
    return create_app({"TESTING": True}).test_client()


def _series(client: FlaskClient) -> list[dict[str, str]]:
    text = client.get("/metrics").get_data(as_text=True)
    return [
        sample.labels
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("attention_http_")
    ]


def _flood(client: FlaskClient, round_: int) -> None:
    for n in range(FLOOD):
        token = f"R{round_}X{n}"
        client.open(
            f"/{token}/x?{token}",
            method=f"M{token}"[:20],
            headers={"X-Request-ID": token, "Origin": f"https://{token}.example"},
            data=b"{}",
        )
        # a method made up for a real route, and a real method on an unknown path
        client.open("/livez", method=f"Z{token}"[:20])
        client.get(f"/v1/{token}")


def test_method_and_status_labels_are_bounded() -> None:
    assert {method_label(m) for m in ["GET", "HEAD", "POST", "OPTIONS"]} == ROUTED_METHODS
    assert {method_label(m) for m in ["get", "PROPFIND", "BREW", "X" * 20, ""]} == {OTHER}
    assert status_label(200) == "200"
    assert status_label(599) == OTHER


def test_a_flood_of_made_up_methods_paths_and_ids_adds_no_series(
    plain_client: FlaskClient, app: Flask
) -> None:
    _series(plain_client)  # the scrape's own series exist from the first scrape on
    _flood(plain_client, 1)
    after_first = _series(plain_client)
    _flood(plain_client, 2)
    after_second = _series(plain_client)
    assert len(after_second) == len(after_first)
    assert sorted(map(json.dumps, after_second)) == sorted(map(json.dumps, after_first))
    routes = {rule.rule for rule in app.url_map.iter_rules()} | {UNMATCHED}
    for labels in after_second:
        assert labels.get("endpoint", UNMATCHED) in routes
        assert labels.get("method", "GET") in ROUTED_METHODS | {OTHER}
        assert labels.get("status", "200").isdigit()
    methods = {labels.get("method") for labels in after_second}
    assert OTHER in methods
    assert not any("R1X" in json.dumps(labels) or "R2X" in json.dumps(labels) for labels in after_second)
