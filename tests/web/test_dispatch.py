"""The plain views of service/web/dispatch.py answer exactly as flask-smorest's and webargs' wrappers do.

The reference is the same app with every route given back its decorated stack (the one flask-smorest
built: webargs' ``use_args``, the response wrapper, the documentation wrappers), preceded by the JSON-body
check that the plain views run first. Both answer the same requests; status, headers and bytes must match.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from flask import Flask, request

from service import create_app
from service.api import examples
from service.web import dispatch
from service.web.blueprint import Blueprint, _require_json_body

CONFIG = {"TESTING": True, "ACCESS_LOG": False}
SEEDS = {
    "/v1/attention": examples.ATTENTION_EXAMPLE_REQUEST,
    "/v1/softmax": examples.SOFTMAX_EXAMPLE_REQUEST,
    "/v1/log-likelihood": examples.LIKELIHOOD_EXAMPLE_REQUEST,
    "/v1/multi-head-attention": examples.MULTI_HEAD_EXAMPLE_REQUEST,
    "/v1/positional-encoding": examples.POSITIONAL_EXAMPLE_REQUEST,
    "/v1/sample": examples.SAMPLE_EXAMPLE_REQUEST,
}
JSON = "application/json"


def _with_their_stacks(app: Flask) -> Flask:
    """``app`` routed through the decorated stacks, as flask-smorest would route them."""
    for endpoint, view in list(app.view_functions.items()):
        stack = getattr(view, "__wrapped__", None)
        if stack is None:
            continue
        checks = endpoint.split(".")[0] != "v2"

        def reference(*args: Any, _stack: Any = stack, _checks: bool = checks, **kwargs: Any) -> Any:
            if _checks:
                _require_json_body(request)
            return _stack(*args, **kwargs)

        app.view_functions[endpoint] = reference
    return app


def _bodies(path: str, seed: dict[str, Any]) -> list[tuple[bytes, dict[str, str]]]:
    first = next(iter(seed))
    cases: list[tuple[bytes, dict[str, str]]] = [
        (orjson.dumps(seed), {}),
        (orjson.dumps({**seed, first: "x"}), {}),  # a wrong type
        (orjson.dumps({**seed, first: None}), {}),  # null for a (required) field
        (orjson.dumps({k: v for k, v in seed.items() if k != first}), {}),  # a field missing
        (orjson.dumps({**seed, "temprature": 0.5}), {}),  # an unknown field, with a hint
        (orjson.dumps({**seed, **{f"extra{i}": i for i in range(30)}}), {}),  # more unknown than listed
        (b"", {}),
        (b"   ", {}),
        (b"null", {}),
        (b"[1, 2]", {}),
        (b"{", {}),
        (b'{"' + first.encode() + b'": [NaN, 1.0]}', {}),  # rescued by the standard library, then refused
        (b'{"' + first.encode() + b'": "\xff"}', {}),  # not UTF-8
        (b"[" * 2000 + b"]" * 2000, {}),  # deeper than orjson parses
        (orjson.dumps(seed), {"Content-Type": "text/plain"}),
        (orjson.dumps(seed), {"Content-Encoding": "gzip"}),
    ]
    return cases


@pytest.mark.parametrize("path", list(SEEDS))
def test_plain_views_answer_byte_for_byte_as_the_decorated_stacks(path: str) -> None:
    ours = create_app(CONFIG).test_client()
    theirs = _with_their_stacks(create_app(CONFIG)).test_client()
    for number, (body, headers) in enumerate(_bodies(path, SEEDS[path])):
        sent = {"Content-Type": JSON, "X-Request-ID": f"case-{number}", **headers}
        expected = theirs.post(path, data=body, headers=sent)
        answered = ours.post(path, data=body, headers=sent)
        assert answered.status_code == expected.status_code, (number, answered.get_data()[:300])
        assert answered.headers.to_wsgi_list() == expected.headers.to_wsgi_list(), number
        assert answered.get_data() == expected.get_data(), number
        if number == 0:
            assert answered.status_code == 200


@pytest.mark.parametrize(
    "path", ["/livez", "/healthz", "/readyz", "/", "/openapi.json", "/v2", "/v2/models/attention"]
)
def test_plain_get_views_answer_as_the_decorated_stacks(path: str) -> None:
    ours = create_app(CONFIG).test_client()
    theirs = _with_their_stacks(create_app(CONFIG)).test_client()
    headers = {"X-Request-ID": "same"}
    expected, answered = theirs.get(path, headers=headers), ours.get(path, headers=headers)
    assert (answered.status_code, answered.headers.to_wsgi_list()) == (
        expected.status_code,
        expected.headers.to_wsgi_list(),
    )
    assert answered.get_data() == expected.get_data()


def test_every_stack_of_the_service_runs_plain() -> None:
    """Each routed stack is read whole (no silent fall-back to the wrappers after an upgrade): the compute
    views parse their body and dump their answer themselves, with nothing in between."""
    app = create_app(CONFIG)
    stacks = {
        endpoint: view.__wrapped__
        for endpoint, view in app.view_functions.items()
        if hasattr(view, "__wrapped__")
    }
    assert {f"{name}" for name in stacks} >= {
        "attention.attention_view",
        "softmax.softmax_view",
        "likelihood.likelihood_view",
        "v2.attention_infer",
    }
    for endpoint, stack in stacks.items():
        layers = dispatch._read_stack(stack)
        assert layers is not None, endpoint
        view, arguments, answer = layers
        assert not hasattr(view, "__wrapped__"), endpoint
        methods = app.url_map._rules_by_endpoint[endpoint][0].methods or set()
        if "POST" in methods and not endpoint.startswith("v2."):
            assert arguments is not None, endpoint
            assert answer is not None, endpoint


def test_stacks_it_does_not_know_are_called_as_they_are() -> None:
    blueprint = Blueprint("unknown_stack", __name__)

    def view() -> dict[str, int]:
        return {"answer": 42}

    def other_decorator(function: Any) -> Any:
        def wrapper() -> Any:
            return {**function(), "wrapped": True}

        wrapper.__wrapped__ = function  # type: ignore[attr-defined]
        return wrapper

    stack = blueprint.response(200)(other_decorator(view))
    assert dispatch._read_stack(stack) is None
    app = Flask(__name__)
    with app.test_request_context("/", method="GET"):
        response = dispatch.plain_view(stack)()
        assert response.get_json() == {"answer": 42, "wrapped": True}
