"""CORS: widgets on other origins can call the API; preflights are answered and cacheable."""

from __future__ import annotations

from flask.testing import FlaskClient

from service import create_app

PREFLIGHT = {
    "Origin": "https://teaching.example",
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "Content-Type",
}


def test_preflight_is_answered_and_cached(client: FlaskClient) -> None:
    response = client.options("/v1/attention", headers=PREFLIGHT)
    assert response.status_code == 200
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert "POST" in response.headers["Access-Control-Allow-Methods"]
    assert "content-type" in response.headers["Access-Control-Allow-Headers"].lower()
    assert response.headers["Access-Control-Max-Age"] == "600"
    assert "Access-Control-Allow-Credentials" not in response.headers


def test_actual_response_and_errors_carry_the_header(client: FlaskClient) -> None:
    headers = {"Origin": "https://teaching.example"}
    ok = client.post("/v1/softmax", json={"logits": [1.0, 2.0]}, headers=headers)
    assert ok.headers["Access-Control-Allow-Origin"] == "*"
    problem = client.post("/v1/softmax", json={"logits": "x"}, headers=headers)
    assert problem.status_code == 422
    assert problem.headers["Access-Control-Allow-Origin"] == "*"


def test_configured_origins_only() -> None:
    app = create_app({"TESTING": True, "CORS_ORIGINS": ["https://allowed.example"]})
    client = app.test_client()
    allowed = client.options("/v1/attention", headers={**PREFLIGHT, "Origin": "https://allowed.example"})
    assert allowed.headers["Access-Control-Allow-Origin"] == "https://allowed.example"
    refused = client.options("/v1/attention", headers={**PREFLIGHT, "Origin": "https://other.example"})
    assert "Access-Control-Allow-Origin" not in refused.headers


def test_responses_vary_on_origin_when_origins_are_listed() -> None:
    client = create_app({"TESTING": True, "CORS_ORIGINS": ["https://allowed.example"]}).test_client()
    for headers in ({}, {"Origin": "https://other.example"}, {"Origin": "https://allowed.example"}):
        response = client.post("/v1/softmax", json={"logits": [1.0, 2.0]}, headers=headers)
        assert "Origin" in response.vary
