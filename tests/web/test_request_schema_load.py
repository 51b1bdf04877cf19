"""RequestSchema.load and ResponseSchema.dump take shorter ways, with marshmallow's results.

The reference is ``marshmallow.Schema.load`` (``dump``) called on the same schema instance: its pre-load,
field and post-load steps and its error messages; the typed requests are compared field by field (arrays
by dtype, shape and values), the answers member by member, in order.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from marshmallow import Schema, ValidationError

from service.api import examples
from service.api.schemas.attention import AttentionRequestSchema
from service.api.schemas.likelihood import LikelihoodRequestSchema
from service.api.schemas.multihead import MultiHeadRequestSchema
from service.api.schemas.positions import PositionalEncodingRequestSchema
from service.api.schemas.sample import SampleRequestSchema
from service.api.schemas.softmax import SoftmaxRequestSchema
from service.kernels import KernelError
from service.web.schemas import RequestSchema

ATTENTION = examples.ATTENTION_EXAMPLE_REQUEST
SOFTMAX = examples.SOFTMAX_EXAMPLE_REQUEST
LIKELIHOOD = examples.LIKELIHOOD_EXAMPLE_REQUEST

BODIES: list[tuple[type[RequestSchema], Any]] = [
    (AttentionRequestSchema, ATTENTION),
    (AttentionRequestSchema, {**ATTENTION, "mask": None, "bias": None, "scale": None, "rotary": None}),
    (
        AttentionRequestSchema,
        {
            **ATTENTION,
            "mask": [[True, False], [True, True]],
            "bias": [[0.5, -0.5], [0.0, 1.0]],
            "causal": True,
            "causal_alignment": "upper_left",
            "scale": 0.25,
            "window": [1, None],
            "softcap": 30.0,
            "rotary": {"base": 100.0, "style": "interleaved", "dim": 2, "query_offset": 1, "key_offset": 0},
            "empty_rows": "zero",
            "precision": "float32",
            "include": ["scores", "weights", "logsumexp"],
        },
    ),
    (AttentionRequestSchema, {**ATTENTION, "rotary": {}}),
    (SoftmaxRequestSchema, SOFTMAX),
    (SoftmaxRequestSchema, {**SOFTMAX, "top_k": 2, "top_p": 0.9, "min_p": 0.05, "include": ["entropy"]}),
    (SoftmaxRequestSchema, {**SOFTMAX, "top_k": None, "mask": None, "include": None}),
    (LikelihoodRequestSchema, LIKELIHOOD),
    (LikelihoodRequestSchema, {**LIKELIHOOD, "ignore_index": 2, "top_logprobs": 2, "temperature": 2}),
    (MultiHeadRequestSchema, examples.MULTI_HEAD_EXAMPLE_REQUEST),
    (PositionalEncodingRequestSchema, examples.POSITIONAL_EXAMPLE_REQUEST),
    (SampleRequestSchema, examples.SAMPLE_EXAMPLE_REQUEST),
    # Errors: marshmallow's messages, from its own load
    (AttentionRequestSchema, {**ATTENTION, "query": "x"}),
    (AttentionRequestSchema, {**ATTENTION, "query": None}),
    (AttentionRequestSchema, {"key": ATTENTION["key"], "value": ATTENTION["value"]}),
    (AttentionRequestSchema, {**ATTENTION, "temprature": 1, "causal": "yes"}),
    (AttentionRequestSchema, {**ATTENTION, "rotary": {"base": -1, "colour": 2}}),
    (AttentionRequestSchema, {**ATTENTION, "window": [1]}),
    (AttentionRequestSchema, {**ATTENTION, "include": ["weights", "weights"]}),
    (AttentionRequestSchema, [1, 2]),
    (AttentionRequestSchema, None),
    (AttentionRequestSchema, {}),
    (SoftmaxRequestSchema, {**SOFTMAX, "temperature": 0}),
    (SoftmaxRequestSchema, {**SOFTMAX, "top_k": 2.5, "precision": "float16"}),
    (LikelihoodRequestSchema, {**LIKELIHOOD, "targets": [0, 1.5, 2]}),
    (SampleRequestSchema, {**examples.SAMPLE_EXAMPLE_REQUEST, "seed": 2**60}),
    # Rules of the typed request (raised from post_load, not by marshmallow)
    (AttentionRequestSchema, {**ATTENTION, "key": [[1, 0, 0], [0, 1, 0]]}),
    (SoftmaxRequestSchema, {**SOFTMAX, "mask": [True, False]}),
]


def _outcome(load: Any, data: Any) -> Any:
    try:
        return ("loaded", load(data))
    except ValidationError as error:
        return ("invalid", error.messages, error.valid_data)
    except KernelError as error:
        return ("refused", type(error), str(error), error.field)


def _assert_same(ours: Any, theirs: Any) -> None:
    if isinstance(theirs, np.ndarray):
        assert isinstance(ours, np.ndarray)
        assert (ours.dtype, ours.shape) == (theirs.dtype, theirs.shape)
        np.testing.assert_array_equal(ours, theirs)
    elif dataclasses.is_dataclass(theirs) and not isinstance(theirs, type):
        assert type(ours) is type(theirs)
        for field in dataclasses.fields(theirs):
            _assert_same(getattr(ours, field.name), getattr(theirs, field.name))
    elif isinstance(theirs, tuple | list):
        assert type(ours) is type(theirs)
        assert len(ours) == len(theirs)
        for mine, reference in zip(ours, theirs, strict=True):
            _assert_same(mine, reference)
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs)
        for key in theirs:
            _assert_same(ours[key], theirs[key])
    else:
        assert ours == theirs
        assert type(ours) is type(theirs)


@pytest.mark.parametrize(("schema_class", "body"), BODIES)
def test_the_plain_load_gives_what_marshmallow_gives(schema_class: type[RequestSchema], body: Any) -> None:
    schema = schema_class()
    theirs = _outcome(lambda data: Schema.load(schema, data), body)
    ours = _outcome(schema.load, body)
    _assert_same(ours, theirs)


def test_the_plain_way_is_taken_for_valid_bodies() -> None:
    """Not a fall-back every time: a valid body never reaches marshmallow's per-field machinery."""
    schema = AttentionRequestSchema()
    calls = []
    original = schema._deserialize

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    schema._deserialize = counting  # type: ignore[method-assign]
    schema.load(dict(ATTENTION))
    assert calls == []
    with pytest.raises(ValidationError):
        schema.load({**ATTENTION, "query": "x"})
    assert calls == [1]


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
    ("/v1/softmax", {**SOFTMAX, "include": ["log_probabilities"]}),
    ("/v1/log-likelihood", {**LIKELIHOOD, "top_logprobs": 2}),
    ("/v1/multi-head-attention", examples.MULTI_HEAD_EXAMPLE_REQUEST),
    ("/v1/positional-encoding", examples.POSITIONAL_EXAMPLE_REQUEST),
    ("/v1/positional-encoding", {"kind": "rotary", "x": [[1.0, 0.0], [0.0, 1.0]], "include": ["tables"]}),
    ("/v1/sample", examples.SAMPLE_EXAMPLE_REQUEST),
]


@pytest.mark.parametrize(("path", "body"), ANSWERED)
def test_the_plain_dump_gives_what_marshmallow_gives(path: str, body: dict[str, Any]) -> None:
    from service import create_app
    from service.web import dispatch

    app = create_app({"TESTING": True, "ACCESS_LOG": False})
    with app.test_request_context(path, method="POST", json=body):
        endpoint = app.url_map.bind("localhost").match(path, method="POST")[0]
        layers = dispatch._read_stack(app.view_functions[endpoint].__wrapped__)
        assert layers is not None
        view, arguments, answer = layers
        assert arguments is not None
        assert answer is not None
        assert answer.schema is not None
        answered = view(arguments.schema.load(body))
        _assert_same(answer.schema.dump(answered), Schema.dump(answer.schema, answered))
