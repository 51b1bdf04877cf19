"""The rules every endpoint shares: content types, malformed bodies, limits, unknown fields."""

from __future__ import annotations

import difflib
import io
import json
import tracemalloc
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import orjson
import pytest
import yaml
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from service import create_app
from service.protocols.declarations.attention import EXAMPLE as ATTENTION_EXAMPLE_REQUEST
from service.web.problems import did_you_mean
from tests.conftest import CONTRACT_PATH
from tests.problems import assert_problem

SEED = ATTENTION_EXAMPLE_REQUEST  # the course's worked example
T = TypeVar("T")
NAME = "a" * 2_000_000  # a field, tensor or output name no schema knows, and far longer than any it does
V2_SOFTMAX = {"inputs": [{"name": "logits", "shape": [2], "datatype": "FP64", "data": [1.0, 2.0]}]}


def _v1_required_fields() -> dict[str, set[str]]:
    """Every /v1 computation in the contract, with its request's required fields (read, not hand-kept: a
    new endpoint is in these tests as soon as it is in the contract)."""
    spec = yaml.safe_load(CONTRACT_PATH.read_text())
    required = {}
    for path, item in spec["paths"].items():
        if path.startswith("/v1/") and "post" in item:
            reference = item["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            schema = spec["components"]["schemas"][reference.rsplit("/", 1)[1]]
            required[path] = set(schema.get("required", []))
    return required


REQUIRED = _v1_required_fields()
ENDPOINTS = list(REQUIRED)


def test_the_endpoint_list_holds_every_computation() -> None:
    assert {"/v1/attention", "/v1/multi-head-attention", "/v1/positional-encoding", "/v1/sample"} <= set(
        ENDPOINTS
    )
    assert all(REQUIRED.values())  # each has required fields, so an empty body is refused below


@pytest.mark.parametrize("path", ENDPOINTS)
def test_body_that_is_not_json_gets_415(client: FlaskClient, path: str) -> None:
    response = client.post(path, data="query=1", content_type="application/x-www-form-urlencoded")
    body = assert_problem(response, 415)
    assert "application/json" in body["detail"]


def test_missing_content_type_gets_415(client: FlaskClient) -> None:
    assert_problem(client.post("/v1/attention", data=b'{"query": [1]}'), 415, says="sent no Content-Type")


@pytest.mark.parametrize("path", ["/v1/attention", "/v2/models/attention/infer"])
def test_a_content_type_without_a_media_type_is_415_saying_so(client: FlaskClient, path: str) -> None:
    # It had been taken for no label at all: "sent no Content-Type", and on /v2 (where a body may go
    # unlabelled) read as JSON.
    response = client.post(path, data=b'{"inputs": []}', headers={"Content-Type": ";;;==="})
    assert_problem(response, 415, says="sent a Content-Type without a media type, ';;;==='")


# The worked example as each protocol's JSON body.
SEED_BODIES = {
    "/v1/attention": SEED,
    "/v2/models/attention/infer": {
        "inputs": [
            {"name": "query", "shape": [2], "datatype": "FP64", "data": [0, 1]},
            {"name": "key", "shape": [2, 2], "datatype": "FP64", "data": [1, 0, 0, 1]},
            {"name": "value", "shape": [2, 2], "datatype": "FP64", "data": [6, 0, 0, 3]},
        ]
    },
}
CURL_DEFAULT = "application/x-www-form-urlencoded"  # what `curl -d` sends without -H 'Content-Type: …'


@pytest.mark.parametrize("path", list(SEED_BODIES))
@pytest.mark.parametrize(
    ("content_type", "sender"),
    [
        (CURL_DEFAULT, "curl -d"),
        ("multipart/form-data; boundary=x", "curl -F"),
        ("text/plain", "fetch()"),  # said "as curl -d does", which sends the form label
    ],
)
def test_a_json_body_labelled_as_a_form_or_text_is_415_on_both_protocols(
    client: FlaskClient, path: str, content_type: str, sender: str
) -> None:
    # The body is JSON, but its label says otherwise: both protocols refuse it alike (issue #20), and say
    # who sends that label and how to send it with curl.
    body = json.dumps(SEED_BODIES[path])
    response = client.post(path, data=body, content_type=content_type)
    problem = assert_problem(response, 415, says="application/json")
    assert f"as {sender} does" in problem["detail"]
    assert "-H 'Content-Type: application/json'" in problem["detail"]
    assert problem["type"] == "urn:attention-service:problem:unsupported-media-type"
    assert "application/json" in response.headers["Accept-Post"]
    # The same bytes labelled as JSON are the worked example.
    answer = client.post(path, data=body, content_type="application/json")
    assert answer.status_code == 200, answer.get_data(as_text=True)


def test_v2_reads_an_unlabelled_body_as_tritonclient_sends_it(client: FlaskClient) -> None:
    path = "/v2/models/attention/infer"
    answer = client.post(path, data=json.dumps(SEED_BODIES[path]))
    assert answer.status_code == 200, answer.get_data(as_text=True)
    weights = next(o for o in answer.get_json()["outputs"] if o["name"] == "output")
    assert weights["data"] == pytest.approx([1.9814307040400587, 2.0092846479799706], rel=1e-12)


@pytest.mark.parametrize("path", ["/v1/attention", "/v2/models/attention/infer"])
def test_a_body_labelled_with_an_undeclared_type_is_415_naming_it(client: FlaskClient, path: str) -> None:
    """Neither protocol's contract lists it: refused on /v2 as on /v1, with what to send instead."""
    answer = client.post(path, data=json.dumps(SEED_BODIES[path]), content_type="image/png")
    assert answer.status_code == 415
    problem = answer.get_json()
    assert problem["type"] == "urn:attention-service:problem:unsupported-media-type"
    assert "image/png" in problem["detail"]
    expected = "application/json" if path.startswith("/v1") else "application/json, application/octet-stream"
    assert answer.headers["Accept-Post"] == expected


@pytest.mark.parametrize(
    "raw",
    [b'{"query": [1, 2', b"{'query': 1}", b"\xff\xfe{}", b"", b"   ", b"[" * 5000 + b"]" * 5000],
    ids=["truncated", "single-quotes", "bad-utf8", "empty", "blank", "deep-nesting"],
)
def test_malformed_json_gets_400(client: FlaskClient, raw: bytes) -> None:
    response = client.post("/v1/attention", data=raw, content_type="application/json")
    assert_problem(response, 400)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_literal_is_422_naming_the_field(client: FlaskClient, literal: str) -> None:
    raw = f'{{"query": [0, {literal}], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}}'
    response = client.post("/v1/attention", data=raw, content_type="application/json")
    assert_problem(response, 422, field="query", says="finite")


def test_json_that_is_not_an_object_gets_422(client: FlaskClient) -> None:
    response = client.post("/v1/softmax", json=[1, 2, 3])
    assert_problem(response, 422, field="body")


@pytest.mark.parametrize(
    ("path", "body", "typo", "suggestion"),
    [
        ("/v1/softmax", {"logits": [1.0, 2.0], "temprature": 0.5}, "temprature", "temperature"),
        ("/v1/attention", {**SEED, "casual": True}, "casual", "causal"),
        ("/v1/log-likelihood", {"logits": [[1.0, 2.0]], "targets": [0], "shfit": True}, "shfit", "shift"),
    ],
)
def test_unknown_field_is_named_with_a_suggestion(
    client: FlaskClient, path: str, body: dict[str, object], typo: str, suggestion: str
) -> None:
    problem = assert_problem(client.post(path, json=body), 422, field=typo)
    assert suggestion in problem["errors"][typo][0]


@pytest.mark.parametrize("path", ENDPOINTS)
def test_missing_required_fields_are_named(client: FlaskClient, path: str) -> None:
    problem = assert_problem(client.post(path, json={}), 422)
    assert set(problem["errors"]) == REQUIRED[path]


def test_unknown_path_is_404_problem(client: FlaskClient) -> None:
    problem = assert_problem(client.get("/v1/nope"), 404)
    assert "base URL" not in problem["detail"]  # the hint below is for a repeated prefix only


@pytest.mark.parametrize(
    ("method", "path", "meant"),
    [
        ("POST", "/v2/v2/models/softmax/infer", "/v2/models/softmax/infer"),
        ("GET", "/v2/v2", "/v2"),
        ("POST", "/v1/v1/attention", "/v1/attention"),
        ("GET", "/v1/v2/health/ready", "/v2/health/ready"),
        ("POST", "/v2/v1/softmax", "/v1/softmax"),
    ],
)
def test_a_repeated_protocol_prefix_is_a_404_saying_the_base_url_is_the_server_root(
    client: FlaskClient, method: str, path: str, meant: str
) -> None:
    # A client given "http://host:8000/v2" as its base URL (issue #20) adds the prefix a second time.
    response = client.open(path, method=method, json={"inputs": []})
    problem = assert_problem(response, 404, field="base_url", says="the base URL must be the server's root")
    assert problem["type"] == "urn:attention-service:problem:wrong-base-url"
    assert f"Did you mean {meant}?" in problem["detail"]
    assert "If you entered the URL manually" not in problem["detail"]  # not werkzeug's generic text


def test_wrong_method_is_405_problem_with_allow(client: FlaskClient) -> None:
    response = client.get("/v1/attention")
    assert_problem(response, 405)
    assert "POST" in response.headers["Allow"]


def test_body_over_the_limit_is_413() -> None:
    app = create_app({"TESTING": True, "MAX_CONTENT_LENGTH": 100})
    response = app.test_client().post("/v1/softmax", json={"logits": list(range(100))})
    problem = assert_problem(response, 413)
    assert "100" in problem["detail"]
    # RFC 9110's phrase under every Python (3.11's http.HTTPStatus still says "Request Entity Too Large")
    assert problem["title"] == "Content Too Large"


@pytest.mark.parametrize(
    ("path", "body", "needed"),
    [
        ("/v1/attention", {"query": [[0.0] * 2] * 30, "key": [[0.0] * 2] * 40, "value": [[1.0]] * 40}, 1200),
        ("/v1/softmax", {"logits": [[0.0] * 50] * 30}, 1500),
        ("/v1/log-likelihood", {"logits": [[[0.0] * 40] * 30], "targets": [[0] * 30]}, 1200),
        ("/v1/sample", {"logits": [[0.0] * 50] * 30}, 1500),
        ("/v1/sample", {"logits": [[0.0] * 5] * 30, "num_samples": 40}, 3600),  # 3 arrays a draw
    ],
)
def test_work_over_the_limit_is_413_stating_limit_and_need(
    path: str, body: dict[str, object], needed: int
) -> None:
    app = create_app({"TESTING": True, "MAX_WORK_ELEMENTS": 1000})
    problem = assert_problem(app.test_client().post(path, json=body), 413)
    assert "1,000" in problem["detail"]
    assert f"{needed:,}" in problem["detail"]


@pytest.mark.parametrize("include", [["weights"], []], ids=["with-weights", "output-only"])
def test_work_counts_a_broadcast_output_wider_than_the_scores(include: list[str]) -> None:
    # Small inputs whose batch dims broadcast to 100 × 100 and whose output rows are 50 wide.
    app = create_app({"TESTING": True, "MAX_WORK_ELEMENTS": 100_000})
    body = {"query": [[[[1.0]]]] * 100, "key": [[[[1.0]]] * 100], "value": [[[0.5] * 50]], "include": include}
    problem = assert_problem(app.test_client().post("/v1/attention", json=body), 413)
    assert "500,000" in problem["detail"]


def test_work_at_the_limit_is_served() -> None:
    app = create_app({"TESTING": True, "MAX_WORK_ELEMENTS": 1200})
    body = {"query": [[0.0] * 2] * 30, "key": [[0.0] * 2] * 40, "value": [[1.0]] * 40}
    assert app.test_client().post("/v1/attention", json=body).status_code == 200


def test_output_only_attention_has_its_own_higher_limit() -> None:
    # 30 × 40 = 1,200 scores: over MAX_WORK_ELEMENTS, but output-only never holds them all at once.
    app = create_app({"TESTING": True, "MAX_WORK_ELEMENTS": 1000, "MAX_OUTPUT_ONLY_WORK_ELEMENTS": 1200})
    rng = np.random.default_rng(7)
    query, key, value = (
        rng.standard_normal((30, 2)),
        rng.standard_normal((40, 2)),
        rng.standard_normal((40, 3)),
    )
    body = {"query": query.tolist(), "key": key.tolist(), "value": value.tolist()}
    client = app.test_client()

    served = client.post("/v1/attention", json={**body, "include": ["logsumexp"]})
    assert served.status_code == 200
    scores = query @ key.T / np.sqrt(2)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(served.get_json()["output"], weights @ value, rtol=1e-12, atol=1e-14)

    for include in (["weights"], ["scores"]):  # materialized: the ordinary limit still applies
        problem = assert_problem(client.post("/v1/attention", json={**body, "include": include}), 413)
        assert "(MAX_WORK_ELEMENTS)" in problem["detail"]
    smaller = create_app({"TESTING": True, "MAX_OUTPUT_ONLY_WORK_ELEMENTS": 1000})
    problem = assert_problem(smaller.test_client().post("/v1/attention", json={**body, "include": []}), 413)
    assert "1,200" in problem["detail"]
    assert "(MAX_OUTPUT_ONLY_WORK_ELEMENTS)" in problem["detail"]


def test_unexpected_errors_are_500_problem_json(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.requests import AttentionRequest

    def explode(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(AttentionRequest, "run", explode)
    app.config["PROPAGATE_EXCEPTIONS"] = False
    problem = assert_problem(app.test_client().post("/v1/attention", json=SEED), 500)
    assert "boom" not in problem["detail"]


def _chunked(client: FlaskClient, body: bytes) -> TestResponse:
    return client.post(
        "/v1/softmax",
        input_stream=io.BytesIO(body),
        headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
        environ_overrides={"wsgi.input_terminated": True},  # as gunicorn marks a chunked body
    )


def test_chunked_body_over_the_limit_is_413_not_cut_short() -> None:
    client = create_app({"TESTING": True, "MAX_CONTENT_LENGTH": 1000}).test_client()
    # Cut at the limit, this body would parse (trailing blanks); it must be refused whole.
    assert_problem(_chunked(client, b'{"logits": [1, 2]}' + b" " * 2000 + b"not json"), 413)
    assert _chunked(client, b'{"logits": [1, 2]}').status_code == 200


def test_a_field_name_that_is_not_valid_unicode_is_422_not_500(client: FlaskClient) -> None:
    response = client.post(
        "/v1/softmax", data='{"logits": [1], "\\ud800": 1}', content_type="application/json"
    )
    problem = assert_problem(response, 422)
    assert list(problem["errors"]) == ["\\ud800"]  # escaped, since JSON text cannot carry a lone surrogate


def test_a_million_unknown_fields_get_a_short_answer(client: FlaskClient) -> None:
    body = {"logits": [1.0], **{f"field{i}": 0 for i in range(100_000)}}
    response = client.post("/v1/softmax", json=body)
    problem = assert_problem(response, 422, field="body", says="99,980 more fields")
    assert len(problem["errors"]) == 21  # 20 named fields and the summary under "body"
    # The detail's count is of the other entries, not of fields: "body" is one of them.
    assert problem["detail"].endswith("(and 18 more, listed in errors)")
    assert len(response.get_data()) < 10_000


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/softmax", {"logits": [1.0], NAME: 1}),
        ("/v1/attention", {**ATTENTION_EXAMPLE_REQUEST, "rotary": {NAME: 1}}),
        (
            "/v2/models/softmax/infer",
            {"inputs": [{"name": NAME, "shape": [1], "datatype": "FP64", "data": [1]}]},
        ),
        ("/v2/models/softmax/infer", {**V2_SOFTMAX, "outputs": [{"name": NAME}]}),
    ],
    ids=["v1-field", "v1-nested-field", "v2-input", "v2-output"],
)
def test_a_long_unknown_name_is_refused_without_a_search_for_names_like_it(
    client: FlaskClient, path: str, body: dict[str, object]
) -> None:
    # difflib indexes every character of the name it is given (about 40 bytes each) before its length check
    # could rule it out: a 15 MB name took a worker to 700 MB and held its loop 2 s for one 422.
    data = json.dumps(body).encode()
    _, parsing = _peak_allocation(lambda: orjson.loads(data))  # orjson's own: about 13 bytes per byte
    response, answering = _peak_allocation(
        lambda: client.post(path, data=data, content_type="application/json")
    )
    problem = assert_problem(response, 422)
    assert "Did you mean" not in json.dumps(problem)
    assert len(response.get_data()) < 4_000  # the name is not echoed whole
    # The body parsed and copied a few times; not an index of the name's characters (41 bytes each here).
    assert answering < parsing + 8 * len(NAME)


def _peak_allocation(call: Callable[[], T]) -> tuple[T, int]:
    """``call()``, and the most memory Python's allocators held at once during it (above what they held)."""
    tracemalloc.start()
    try:
        result = call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


@pytest.mark.parametrize("length", range(1, 40))
def test_names_are_suggested_as_difflib_suggests_them_whatever_their_length(length: int) -> None:
    allowed = ["logits", "temperature", "include"]
    for name in ("t" * length, ("temperature" * 4)[:length], ("logits" * 7)[:length]):
        close = difflib.get_close_matches(name, allowed, n=1)
        assert did_you_mean(name, allowed) == (f" Did you mean {close[0]!r}?" if close else "")


def test_include_lists_longer_than_the_choices_are_refused_before_checking_each(client: FlaskClient) -> None:
    response = client.post("/v1/softmax", json={"logits": [1.0], "include": ["zz"] * 100_000})
    problem = assert_problem(response, 422, field="include", says="at most 1 name")
    assert len(response.get_data()) < 2_000
    assert problem["errors"]["include"] == ["At most 1 name, from: log_probabilities."]


def test_each_held_attention_matrix_counts_against_the_work_limit() -> None:
    client = create_app({"TESTING": True, "MAX_WORK_ELEMENTS": 1000}).test_client()
    body = {"query": [[0.0]] * 25, "key": [[0.0]] * 30, "value": [[1.0]] * 30}  # 750 scores
    assert client.post("/v1/attention", json={**body, "include": ["weights"]}).status_code == 200
    problem = assert_problem(
        client.post("/v1/attention", json={**body, "include": ["weights", "scores"]}), 413, says="1,500"
    )
    assert "1,000" in problem["detail"]


def test_listing_empty_rows_counts_against_the_work_limit() -> None:
    client = create_app({"TESTING": True, "MAX_WORK_ELEMENTS": 1000}).test_client()
    # 20 batches × 30 rows, each row listed as [batch, row]: up to 1,200 integers
    body = {"query": [[[0.0]] * 30] * 20, "key": [[0.0]], "value": [[1.0]], "include": []}
    assert client.post("/v1/attention", json=body).status_code == 200
    assert_problem(client.post("/v1/attention", json={**body, "empty_rows": "zero"}), 413, says="1,200")


def test_top_logprobs_objects_count_against_the_work_limit() -> None:
    client = create_app({"TESTING": True, "MAX_WORK_ELEMENTS": 1000}).test_client()
    body = {"logits": [[0.0] * 10] * 5, "targets": [0] * 5}  # 50 logits
    assert (
        client.post("/v1/log-likelihood", json={**body, "top_logprobs": 5}).status_code == 200
    )  # 5·5·32 = 800
    assert_problem(client.post("/v1/log-likelihood", json={**body, "top_logprobs": 7}), 413, says="1,120")


def test_wide_rows_count_more_against_the_output_only_limit() -> None:
    client = create_app({"TESTING": True, "MAX_OUTPUT_ONLY_WORK_ELEMENTS": 1000}).test_client()
    body = {"query": [[0.0] * 64] * 25, "key": [[0.0] * 64] * 40, "value": [[1.0] * 64] * 40, "include": []}
    assert client.post("/v1/attention", json=body).status_code == 200  # 1,000 scores, d_k + d_v = 128
    wide = {**body, "query": [[0.0] * 192] * 25, "key": [[0.0] * 192] * 40}  # d_k + d_v = 256: twice the time
    assert_problem(client.post("/v1/attention", json=wide), 413, says="2,000")
