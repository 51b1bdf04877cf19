"""The smaller hostile-client findings: redirects, encodings, failed preconditions."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from service import create_app
from tests.problems import assert_problem


def test_the_slash_merging_redirect_is_relative_whatever_the_host_header(client: FlaskClient) -> None:
    plain = create_app({"TESTING": True}).test_client()  # the contract documents no redirects
    response = plain.get("/static//client.js?v=2", headers={"Host": "evil.example"})
    problem = assert_problem(response, 308)
    assert response.headers["Location"] == "/static/client.js?v=2"
    assert "/static/client.js" in problem["detail"]
    assert "evil.example" not in response.get_data(as_text=True)
    assert response.headers["X-Request-ID"]


@pytest.mark.parametrize(
    "host",
    ["evil example", "<script>", "a@b", "a:b", "[::1", "ex%4", "caf\u00e9", "x\x7f", "[::1]x"],
)
def test_a_host_value_that_is_no_host_is_a_400_naming_it(host: str) -> None:
    # RFC 9112 section 3.2: a server MUST answer 400 to a Host field with an invalid value; they were served.
    # (A bracketed literal that is no IPv6 address fails in werkzeug's test client itself: through gunicorn in
    # tests/deploy/test_hostile_gunicorn.py.)
    plain = create_app({"TESTING": True}).test_client()
    problem = assert_problem(plain.get("/livez", headers={"Host": host}), 400)
    assert problem["type"].endswith("invalid-host")
    assert list(problem["errors"]) == ["Host"]


@pytest.mark.parametrize(
    "host",
    [
        "api",
        "attention_api:8000",
        "127.0.0.1:8000",
        "[::1]:80",
        "[fe80::1%25eth0]",
        "[v1.x]",
        "[V1.x]",
        "localhost:8000 ",
        "ex%41mple",
        "a:",
        "",
    ],
)
def test_every_host_value_rfc_3986_allows_is_served(host: str) -> None:
    # Underscores (compose and Kubernetes service names), IP literals, escapes, an empty port or host.
    plain = create_app({"TESTING": True}).test_client()
    assert plain.get("/livez", headers={"Host": host}).status_code == 200


def test_a_content_encoding_the_service_does_not_decode_is_415(client: FlaskClient) -> None:
    # gzip and deflate are inflated (tests/web/test_request_compression.py); others are refused unread.
    for encoding in ("br", "deflate, gzip", "x-made-up"):
        response = client.post(
            "/v1/softmax",
            data=b'{"logits": [1.0, 2.0]}',
            content_type="application/json",
            headers={"Content-Encoding": encoding},
        )
        problem = assert_problem(response, 415)
        assert "Content-Encoding" in problem["detail"]
        assert response.headers["Accept-Encoding"] == "gzip, deflate"
    plain = client.post(
        "/v1/softmax",
        data=b'{"logits": [1.0, 2.0]}',
        content_type="application/json",
        headers={"Content-Encoding": "identity"},
    )
    assert plain.status_code == 200


def test_a_failed_if_match_is_412_without_the_file_or_public_caching(client: FlaskClient) -> None:
    current = client.get("/static/client.js")
    etag = current.headers["ETag"]
    response = client.get("/static/client.js", headers={"If-Match": '"not-the-etag"'})
    problem = assert_problem(response, 412)
    assert "If-Match" in problem["detail"]
    assert "public" not in response.headers.get("Cache-Control", "")
    assert b"export" not in response.get_data()  # none of the module's source
    matching = client.get("/static/client.js", headers={"If-Match": etag})
    assert matching.status_code == 200
    assert matching.get_data() == current.get_data()


def _attention(client: FlaskClient, **body: object) -> tuple[int, dict[str, object]]:
    response = client.post("/v1/attention", json={"precision": "float32", **body})
    return response.status_code, response.get_json()


def test_a_value_beyond_float32_on_a_hidden_key_does_not_spoil_a_finite_answer(client: FlaskClient) -> None:
    query, key = [[1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]
    value = [[1.0, 2.0], [1e39, 1.0]]  # 1e39 is inf in float32
    # Hidden by the mask: key 0 is the only one seen, with weight 1, so the output is its value exactly.
    status, answer = _attention(client, query=query, key=key, value=value, mask=[True, False])
    assert status == 200, answer
    assert answer["output"] == [[1.0, 2.0]]
    assert answer["weights"] == [[1.0, 0.0]]
    # Hidden by causality (upper_left: query 0 sees key 0 only).
    status, answer = _attention(
        client, query=query, key=key, value=value, causal=True, causal_alignment="upper_left"
    )
    assert (status, answer["output"]) == (200, [[1.0, 2.0]])
    # Seen by the query: the answer is not finite in float32.
    status, answer = _attention(client, query=query, key=key, value=value)
    assert status == 422
    assert answer["errors"] == {"value": [answer["detail"]]}


def test_a_huge_value_on_a_visible_key_whose_weight_underflows_still_overflows(client: FlaskClient) -> None:
    # exp(-200) is 0 in float32, but 1e300 is not representable there: the weight × value of the exact
    # answer is not known to be small, so it is not left out.
    status, _ = _attention(client, query=[[1.0]], key=[[100.0], [-100.0]], value=[[1.0], [1e300]], scale=1.0)
    assert status == 422
