"""The views write their answers straight to JSON; the response schemas only document them.

So what a view returns must be what dumping it through its documented response schema gives: the same
JSON bytes, member for member and in the documented order (0-d arrays as numbers, NumPy scalars as
numbers, nothing added or lost).
"""

from __future__ import annotations

from typing import Any

import pytest

from service import create_app
from service.protocols.declarations.model import declared_models
from service.site.meta import ROUTES_EXTENSION
from service.web.json_provider import dumps_bytes

EXAMPLES = {name: dict(model.example) for name, model in declared_models().items()}
ATTENTION = EXAMPLES["attention"]
ANSWERED = [
    ("/v1/attention", {**ATTENTION, "include": ["scores", "weights", "logsumexp"]}),
    (
        "/v1/attention",
        {
            **ATTENTION,
            "query": [[0, 1], [1, 0]],
            "mask": [[False, False], [True, True]],
            "empty_rows": "zero",
        },
    ),
    ("/v1/attention", {**ATTENTION, "query": [0.5, 1], "include": ["logsumexp"]}),  # 0-d logsumexp
    ("/v1/softmax", {**EXAMPLES["softmax"], "include": ["log_probabilities"]}),
    ("/v1/softmax", {"logits": [1.0, 2.0, 3.0], "precision": "float32"}),  # 0-d entropy and argmax
    ("/v1/log-likelihood", {**EXAMPLES["log-likelihood"], "top_logprobs": 2}),
    ("/v1/multi-head-attention", EXAMPLES["multi-head-attention"]),
    ("/v1/positional-encoding", EXAMPLES["positional-encoding"]),
    ("/v1/positional-encoding", {"kind": "rotary", "x": [[1.0, 0.0], [0.0, 1.0]], "include": ["tables"]}),
    ("/v1/sample", EXAMPLES["sample"]),
]


@pytest.mark.parametrize(("path", "body"), ANSWERED)
def test_an_answer_is_what_its_response_schema_dumps(path: str, body: dict[str, Any]) -> None:
    app = create_app({"TESTING": True, "ACCESS_LOG": False})
    operation = next(
        op.operation
        for routes in app.extensions[ROUTES_EXTENSION]
        for op in routes.operations
        if op.path == path and op.method == "post"
    )
    schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
    endpoint = app.url_map.bind("localhost").match(path, method="POST")[0]
    with app.test_request_context(path, method="POST", json=body):
        answered = app.view_functions[endpoint]()
    assert isinstance(answered, dict)
    dumped = schema().dump(answered)
    assert list(answered) == list(dumped)  # the members in the documented order, as before
    assert dumps_bytes(answered) == dumps_bytes(dumped)
