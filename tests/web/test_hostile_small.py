"""The smaller hostile-client findings: redirects, encodings, failed preconditions."""

from __future__ import annotations

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


def test_a_content_encoding_the_service_does_not_decode_is_415(client: FlaskClient) -> None:
    for encoding in ("gzip", "br", "deflate, gzip", "x-made-up"):
        response = client.post(
            "/v1/softmax",
            data=b'{"logits": [1.0, 2.0]}',
            content_type="application/json",
            headers={"Content-Encoding": encoding},
        )
        problem = assert_problem(response, 415)
        assert "Content-Encoding" in problem["detail"]
        assert response.headers["Accept-Encoding"] == "identity"
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
