"""Typed requests: every rule holds whichever codec builds them; work() counts hand-worked sizes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, get_args

import numpy as np
import pytest
import yaml

from bench import cases
from service.kernels import CausalAlignment, EmptyRowPolicy, KernelError, ShapeError
from service.protocols.declarations.attention import AttentionRequestSchema
from service.requests import (
    PRECISIONS,
    AttentionOutput,
    AttentionRequest,
    LikelihoodRequest,
    Precision,
    RequestError,
    SoftmaxOutput,
    SoftmaxRequest,
)
from service.web.problems import problem_from_kernel_error

CONTRACT = Path(__file__).resolve().parent.parent.parent / "openapi.yaml"


def ones(*shape: int) -> np.ndarray:
    return np.ones(shape)


QKV = {"query": ones(2, 3), "key": ones(4, 3), "value": ones(4, 5)}
LOGITS = {"logits": ones(2, 3)}
SCORING = {"logits": ones(2, 3), "targets": np.array([0, 2])}


@pytest.mark.parametrize(
    ("kind", "change", "field"),
    [
        (AttentionRequest, {"query": np.ones((2, 3), dtype=np.bool_)}, "query"),
        (AttentionRequest, {"query": np.float64(1.0).reshape(())}, "query"),
        (AttentionRequest, {"query": ones(1, 1, 1, 2, 3)}, "query"),
        (AttentionRequest, {"query": ones(0, 3)}, "query"),
        (AttentionRequest, {"query": np.array([[np.nan, 0, 0]])}, "query"),
        (AttentionRequest, {"key": ones(3)}, "key"),
        (AttentionRequest, {"key": ones(4, 2)}, "key"),  # d_k differs: a shape rule
        (AttentionRequest, {"value": ones(3, 5)}, "value"),
        (AttentionRequest, {"mask": ones(2, 4)}, "mask"),  # numbers, not booleans
        (AttentionRequest, {"mask": np.ones(3, dtype=np.bool_)}, "mask"),
        (AttentionRequest, {"bias": ones(3, 4)}, "bias"),
        (AttentionRequest, {"causal": 1}, "causal"),
        (AttentionRequest, {"causal_alignment": "diagonal"}, "causal_alignment"),
        (AttentionRequest, {"scale": 0.0}, "scale"),
        (AttentionRequest, {"scale": float("inf")}, "scale"),
        (AttentionRequest, {"scale": "2"}, "scale"),
        (AttentionRequest, {"empty_rows": "skip"}, "empty_rows"),
        (AttentionRequest, {"include": ["weights", "weights"]}, "include"),
        (AttentionRequest, {"include": ["attention"]}, "include"),
        (AttentionRequest, {"include": ["weights"] * 4}, "include"),
        (AttentionRequest, {"precision": "float16"}, "precision"),
        (SoftmaxRequest, {"logits": ones(2, 0)}, "logits"),
        (SoftmaxRequest, {"temperature": -1.0}, "temperature"),
        (SoftmaxRequest, {"temperature": True}, "temperature"),
        (SoftmaxRequest, {"top_k": 0}, "top_k"),
        (SoftmaxRequest, {"top_k": 1.5}, "top_k"),
        (SoftmaxRequest, {"top_p": 0.0}, "top_p"),
        (SoftmaxRequest, {"top_p": 1.5}, "top_p"),
        (SoftmaxRequest, {"mask": np.ones(4, dtype=np.bool_)}, "mask"),
        (SoftmaxRequest, {"include": ["probabilities"]}, "include"),
        (LikelihoodRequest, {"logits": ones(3)}, "logits"),
        (LikelihoodRequest, {"targets": np.array([0.0, 1.0])}, "targets"),
        (LikelihoodRequest, {"targets": np.array([0, 1, 2])}, "targets"),
        (LikelihoodRequest, {"shift": "yes"}, "shift"),
        (LikelihoodRequest, {"ignore_index": 1.5}, "ignore_index"),
        (LikelihoodRequest, {"ignore_index": 2**63}, "ignore_index"),
        (LikelihoodRequest, {"temperature": 0}, "temperature"),
        (LikelihoodRequest, {"top_logprobs": 21}, "top_logprobs"),
        (LikelihoodRequest, {"top_logprobs": -1}, "top_logprobs"),
    ],
)
def test_each_rule_is_enforced_by_the_typed_request_naming_the_field(
    kind: type[Any], change: dict[str, Any], field: str
) -> None:
    """What /v2 relies on: no rule lives only in the /v1 schema."""
    base = {AttentionRequest: QKV, SoftmaxRequest: LOGITS, LikelihoodRequest: SCORING}[kind]
    with pytest.raises(KernelError) as caught:
        kind(**{**base, **change})
    assert caught.value.field == field
    assert field in caught.value.message
    assert problem_from_kernel_error(caught.value).slug == "validation-error"


def test_accepted_values_are_normalized() -> None:
    request = AttentionRequest(**QKV, scale=2, include=["scores", "weights"])
    assert request.scale == 2.0
    assert isinstance(request.scale, float)
    assert request.include == frozenset({"weights", "scores"})
    assert (request.shapes.n, request.shapes.m, request.shapes.d_k, request.shapes.d_v) == (2, 4, 3, 5)
    assert SoftmaxRequest(**LOGITS, top_k=3.0).top_k == 3
    scoring = LikelihoodRequest(**SCORING)
    assert (scoring.batch, scoring.length, scoring.vocabulary) == ((), 2, 3)


def test_shape_errors_are_one_problem_type_whichever_layer_finds_them() -> None:
    """A shape error from the kernel (at call time) and from a typed request render alike."""
    with pytest.raises(ShapeError) as from_request:
        AttentionRequest(**{**QKV, "key": ones(4, 2)})
    from_kernel = ShapeError("key has d_k=2 but query has d_k=3", field="key")
    for error in (from_request.value, from_kernel):
        problem = problem_from_kernel_error(error)
        assert (problem.status, problem.slug, dict(problem.errors or {})) == (
            422,
            "validation-error",
            {"key": [error.message]},
        )


def test_request_errors_are_kernel_errors_so_one_handler_renders_both() -> None:
    assert issubclass(RequestError, KernelError)


def test_attention_work_held_whole_and_output_only() -> None:
    # batch (2,), n = 3, m = 4, d_k = 5, d_v = 6
    arrays = {"query": ones(2, 3, 5), "key": ones(2, 4, 5), "value": ones(2, 4, 6)}
    held = AttentionRequest(**arrays, include=["weights", "scores", "logsumexp"]).work()
    # 2·3·4 = 24 scores, twice; 2·3·6 = 36 outputs; 6 logsumexp values
    assert held.elements == 48
    # and the arithmetic of the 24 scores, one reference score each (d_k + d_v = 11 is under 128)
    assert [(b.amount, b.setting) for b in held.bounds] == [
        (48, "MAX_WORK_ELEMENTS"),
        (24, "MAX_OUTPUT_ONLY_WORK_ELEMENTS"),
    ]
    assert held.answer_elements == 36 + 48 + 6

    output_only = AttentionRequest(**arrays, include=[], empty_rows="zero").work()
    # the output (36) or the listed rows (6 rows × 2 indices = 12), whichever is more; then 24 scores
    assert [(b.amount, b.setting) for b in output_only.bounds] == [
        (36, "MAX_WORK_ELEMENTS"),
        (24, "MAX_OUTPUT_ONLY_WORK_ELEMENTS"),
    ]
    assert output_only.elements == 24
    assert output_only.answer_elements == 36 + 12


def test_wide_rows_widen_the_output_only_work() -> None:
    arrays = {"query": ones(8, 200), "key": ones(4, 200), "value": ones(4, 56)}  # d_k + d_v = 256
    assert AttentionRequest(**arrays, include=[]).work().elements == 8 * 4 * 2
    # 3 query rows reuse each key row 3 times, not 8 or more: 8 / 3 times slower per multiply-add
    arrays["query"] = ones(3, 200)
    assert AttentionRequest(**arrays, include=[]).work().elements == math.ceil(3 * 4 * 2 * 8 / 3)


def test_softmax_and_likelihood_work() -> None:
    softmax = SoftmaxRequest(logits=ones(2, 3, 5), include=["log_probabilities"]).work()
    assert (softmax.elements, softmax.answer_elements) == (30, 30 * 2 + 6 * 2)
    scoring = LikelihoodRequest(
        logits=ones(2, 3, 5), targets=np.zeros((2, 3), dtype=np.int64), top_logprobs=4
    )
    work = scoring.work()
    # 6 positions: 30 log-probabilities, or 6 × 4 listed tokens × 32 = 768 for the listed objects
    assert work.elements == 768
    assert work.answer_elements == 2 * 6 + 5 * 2 + 2 * 6 * 4


def _request_schema(name: str) -> dict[str, Any]:
    contract = yaml.safe_load(CONTRACT.read_text())
    schema: dict[str, Any] = contract["components"]["schemas"][name]["properties"]
    return schema


def test_the_contracts_allowed_values_are_the_kernels_and_requests_literals() -> None:
    attention = _request_schema("AttentionRequest")
    # An optional field is "one of these names, or null": the names are the first alternative.
    assert tuple(attention["causal_alignment"]["anyOf"][0]["enum"]) == get_args(CausalAlignment)
    assert tuple(attention["empty_rows"]["anyOf"][0]["enum"]) == get_args(EmptyRowPolicy)
    assert tuple(attention["precision"]["anyOf"][0]["enum"]) == get_args(Precision)
    assert tuple(attention["include"]["items"]["enum"]) == get_args(AttentionOutput)
    assert tuple(_request_schema("SoftmaxRequest")["include"]["items"]["enum"]) == get_args(SoftmaxOutput)


def test_precisions_are_defined_once() -> None:
    assert cases.PRECISIONS is PRECISIONS
    assert tuple(PRECISIONS) == get_args(Precision)


def test_the_v1_schema_loads_a_typed_request() -> None:
    loaded = AttentionRequestSchema().load({"query": [[1.0, 0.0]], "key": [[1.0, 0.0]], "value": [[2.0]]})
    assert isinstance(loaded, AttentionRequest)
    assert loaded.include == frozenset({"weights"})
    np.testing.assert_array_equal(loaded.value, [[2.0]])
