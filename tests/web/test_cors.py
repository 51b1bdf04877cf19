"""CORS: widgets on other origins can call the API; preflights are answered and cacheable."""

from __future__ import annotations

import gzip
import json
import struct

import pytest
from flask.testing import FlaskClient

from service import create_app
from service.web.admission import Reservation, admission_of
from service.web.cors import ALLOW_HEADERS, EXPOSE_HEADERS

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


def _reference_app(origins: list[str]) -> FlaskClient:
    """flask-cors as it comes, with the service's options, on a route that answers every method."""
    from flask import Flask
    from flask_cors import CORS

    app = Flask(__name__)
    app.add_url_rule("/livez", "livez", lambda: "ok", methods=["GET", "POST", "OPTIONS"])
    CORS(
        app,
        origins=origins,
        methods=["GET", "POST", "OPTIONS"],
        allow_headers=ALLOW_HEADERS,
        expose_headers=EXPOSE_HEADERS,
        max_age=600,
        supports_credentials=False,
        send_wildcard=origins == ["*"],
    )
    return app.test_client()


def _cors_headers(response: object) -> list[tuple[str, str]]:
    headers = response.headers  # type: ignore[attr-defined]
    return [(name, value) for name, value in headers.items() if name.startswith("Access-Control-")]


def test_cached_cors_headers_are_exactly_flask_cors_own() -> None:
    requests = [
        ("GET", {}),
        ("GET", {"Origin": "https://a.example"}),
        ("GET", {"Origin": "https://elsewhere.example"}),
        ("POST", {"Origin": "https://b.example"}),
        ("OPTIONS", PREFLIGHT | {"Origin": "https://a.example"}),
        ("OPTIONS", PREFLIGHT | {"Origin": "https://a.example", "Access-Control-Request-Headers": "X-Other"}),
        ("OPTIONS", {"Origin": "https://a.example", "Access-Control-Request-Method": "DELETE"}),
        ("GET", {"Origin": "https://a.example", "Access-Control-Request-Private-Network": "true"}),
    ]
    for origins in (["*"], ["https://a.example", "https://b.example"]):
        ours = create_app({"TESTING": True, "CORS_ORIGINS": origins, "ACCESS_LOG": False}).test_client()
        reference = _reference_app(origins)
        for _ in range(2):  # the second round is answered from the cache
            for method, headers in requests:
                expected = _cors_headers(reference.open("/livez", method=method, headers=headers))
                assert _cors_headers(ours.open("/livez", method=method, headers=headers)) == expected, (
                    origins,
                    method,
                    headers,
                )


def test_made_up_origins_do_not_grow_the_cache_without_bound() -> None:
    from service.web.cors import MAX_CACHED

    client = create_app({"TESTING": True, "ACCESS_LOG": False}).test_client()
    for n in range(MAX_CACHED + 50):
        response = client.get("/livez", headers={"Origin": f"https://{n}.example"})
        assert response.headers["Access-Control-Allow-Origin"] == "*"
    hook = next(h for h in client.application.after_request_funcs[None] if h.__name__ == "cors_headers")
    cache = next(cell.cell_contents for cell in hook.__closure__ if isinstance(cell.cell_contents, dict))
    assert len(cache) == MAX_CACHED


V2_PREFLIGHT = {
    "Origin": "https://teaching.example",
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "content-type,inference-header-content-length",
}


def _binary_infer_body() -> tuple[bytes, dict[str, str]]:
    """softmax of [1, 2] as binary tensor data, every output asked for as binary."""
    head = json.dumps(
        {
            "inputs": [
                {"name": "logits", "shape": [2], "datatype": "FP64", "parameters": {"binary_data_size": 16}}
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    return head + struct.pack("<2d", 1.0, 2.0), {
        "Inference-Header-Content-Length": str(len(head)),
        "Content-Type": "application/octet-stream",
    }


@pytest.mark.parametrize("origins", [["*"], ["https://teaching.example"]])
def test_a_page_elsewhere_may_send_and_split_binary_v2_requests(origins: list[str]) -> None:
    client = create_app({"TESTING": True, "CORS_ORIGINS": origins, "ACCESS_LOG": False}).test_client()
    preflight = client.options("/v2/models/softmax/infer", headers=V2_PREFLIGHT)
    assert preflight.status_code == 200
    allowed = {name.strip().lower() for name in preflight.headers["Access-Control-Allow-Headers"].split(",")}
    assert {"content-type", "inference-header-content-length"} <= allowed

    body, headers = _binary_infer_body()
    answer = client.post(
        "/v2/models/softmax/infer", data=body, headers={**headers, "Origin": "https://teaching.example"}
    )
    assert answer.status_code == 200
    assert answer.mimetype == "application/octet-stream"
    length = int(answer.headers["Inference-Header-Content-Length"])
    assert json.loads(answer.get_data()[:length])["outputs"][0]["name"] == "probabilities"
    exposed = {name.strip().lower() for name in answer.headers["Access-Control-Expose-Headers"].split(",")}
    assert {"inference-header-content-length", "x-request-id"} <= exposed


@pytest.mark.parametrize("origins", [["*"], ["https://teaching.example"]])
def test_a_page_elsewhere_can_read_when_an_overloaded_service_says_to_come_back(origins: list[str]) -> None:
    """The 503's Retry-After is what the JS client waits for; unexposed, a page on another origin reads
    null (only CORS-safelisted response headers are readable unless exposed)."""
    app = create_app(
        {
            "TESTING": True,
            "CORS_ORIGINS": origins,
            "ACCESS_LOG": False,
            "MEMORY_BUDGET_BYTES": 64 << 20,
            "COMPUTE_QUEUE_SECONDS": 0.1,
        }
    )
    admission = admission_of(app)
    assert admission is not None
    holder = Reservation(admission)
    assert holder.take(64 << 20)  # the whole budget: the worked example's body waits, then is refused
    try:
        answer = app.test_client().post(
            "/v1/attention",
            json={"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]},
            headers={"Origin": "https://teaching.example"},
        )
    finally:
        holder.release()
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == "1"
    exposed = {name.strip().lower() for name in answer.headers["Access-Control-Expose-Headers"].split(",")}
    assert "retry-after" in exposed


@pytest.mark.parametrize("origins", [["*"], ["https://teaching.example"]])
def test_a_page_elsewhere_may_send_a_compressed_body(origins: list[str]) -> None:
    # Content-Encoding is not CORS-safelisted: without it in the preflight's answer a browser refused to send
    # a gzip body, which the service reads (as tritonclient's request compression sends it).
    client = create_app({"TESTING": True, "CORS_ORIGINS": origins, "ACCESS_LOG": False}).test_client()
    preflight = client.options(
        "/v1/softmax",
        headers={
            "Origin": "https://teaching.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type, content-encoding",
        },
    )
    assert preflight.status_code == 200
    allowed = {name.strip().lower() for name in preflight.headers["Access-Control-Allow-Headers"].split(",")}
    assert {"content-type", "content-encoding"} <= allowed
    answer = client.post(
        "/v1/softmax",
        data=gzip.compress(json.dumps({"logits": [1.0, 2.0]}).encode()),
        headers={
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
            "Origin": "https://teaching.example",
        },
    )
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert answer.get_json()["probabilities"] == pytest.approx(
        [0.2689414213699951, 0.7310585786300049], rel=1e-12
    )
    assert answer.headers["Access-Control-Allow-Origin"] in ("*", "https://teaching.example")


@pytest.mark.parametrize("origins", [["*"], ["https://teaching.example"]])
def test_a_preflight_to_a_path_without_a_route_succeeds_so_the_real_404_is_read(origins: list[str]) -> None:
    # It was a 404, so a browser blocked the real request: the page saw a network failure, not the 404.
    client = create_app({"TESTING": True, "CORS_ORIGINS": origins, "ACCESS_LOG": False}).test_client()
    preflight = client.options("/v1/v1/attention", headers=PREFLIGHT)
    assert preflight.status_code == 200
    assert preflight.headers["Access-Control-Allow-Origin"] == origins[0]
    assert "POST" in preflight.headers["Access-Control-Allow-Methods"]
    real = client.post("/v1/v1/attention", json={}, headers={"Origin": PREFLIGHT["Origin"]})
    assert real.status_code == 404
    assert real.headers["Content-Type"] == "application/problem+json"
    assert real.json is not None
    assert real.json["status"] == 404
    assert real.headers["Access-Control-Allow-Origin"] == origins[0]


def test_a_preflight_from_an_origin_not_allowed_or_no_preflight_is_still_a_404() -> None:
    client = create_app(
        {"TESTING": True, "CORS_ORIGINS": ["https://allowed.example"], "ACCESS_LOG": False}
    ).test_client()
    refused = client.options("/v1/nope", headers={**PREFLIGHT, "Origin": "https://other.example"})
    assert refused.status_code == 404
    assert "Access-Control-Allow-Origin" not in refused.headers
    plain = client.options("/v1/nope", headers={"Origin": "https://allowed.example"})
    assert plain.status_code == 404
