"""X-Request-ID: the caller's sane id is kept, anything else replaced; echoed in headers and problems."""

from __future__ import annotations

import re
import uuid

import pytest
from flask.testing import FlaskClient

from tests.problems import assert_problem

GENERATED = re.compile(r"[0-9a-f]{32}")


def test_a_sane_caller_id_is_echoed_on_success_and_in_problems(client: FlaskClient) -> None:
    ok = client.post("/v1/softmax", json={"logits": [1.0, 2.0]}, headers={"X-Request-ID": "req-42.a:b/c"})
    assert ok.headers["X-Request-ID"] == "req-42.a:b/c"
    bad = client.post("/v1/softmax", json={"logits": "x"}, headers={"X-Request-ID": "trace=7+1"})
    assert bad.headers["X-Request-ID"] == "trace=7+1"
    assert assert_problem(bad, 422, field="logits")["request_id"] == "trace=7+1"


def test_an_id_is_generated_when_none_is_sent(client: FlaskClient) -> None:
    first = client.get("/livez").headers["X-Request-ID"]
    second = client.get("/livez").headers["X-Request-ID"]
    assert GENERATED.fullmatch(first)
    assert GENERATED.fullmatch(second)
    assert first != second


@pytest.mark.parametrize("sent", ["x" * 129, "has space", 'quote"d', "semi;colon", "ünï", ""])
def test_unsafe_or_overlong_ids_are_replaced(client: FlaskClient, sent: str) -> None:
    response = client.get("/nowhere", headers={"X-Request-ID": sent})
    body = assert_problem(response, 404)
    assert GENERATED.fullmatch(response.headers["X-Request-ID"])
    assert body["request_id"] == response.headers["X-Request-ID"]


def test_the_longest_acceptable_id_is_kept(client: FlaskClient) -> None:
    sent = "a" * 128
    assert client.get("/livez", headers={"X-Request-ID": sent}).headers["X-Request-ID"] == sent


def test_generated_ids_are_random_version_4_uuids() -> None:
    from service.web.request_id import fresh_id

    ids = [fresh_id() for _ in range(200)]
    assert len(set(ids)) == len(ids)
    for generated in ids:
        assert GENERATED.fullmatch(generated)
        parsed = uuid.UUID(hex=generated)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert parsed.hex == generated
