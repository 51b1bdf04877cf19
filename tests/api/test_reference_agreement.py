"""Random requests through HTTP agree with the plain-loop references to 1e-12 relative.

The same hypothesis cases as the kernel tests (batched and multi-head shapes with broadcasting,
masks, causal masks in both alignments, bias, custom scale, temperature, top-k/top-p, shift,
padding), sent as JSON and read back: nothing is lost between the bytes and the arithmetic.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import assume, given, settings

from service import create_app
from tests.conftest import ContractCheckingClient
from tests.references import (
    attention_cases,
    likelihood_cases,
    logits_cases,
    nucleus_is_ambiguous,
    reference_for_case,
    reference_row,
    reference_sequence,
)

HTTP_CASES = settings(max_examples=30, deadline=None)
TOLERANCE = {"rtol": 1e-12, "atol": 1e-12}

app = create_app({"TESTING": True})
app.test_client_class = ContractCheckingClient


def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = app.test_client().post(path, json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    result: dict[str, Any] = response.get_json()
    return result


@HTTP_CASES
@given(attention_cases())
def test_attention_matches_the_loop_reference(case: dict[str, Any]) -> None:
    scale = case["scale"] if case["scale"] is None or case["scale"] > 0 else None
    body: dict[str, Any] = {
        "query": case["query"].tolist(),
        "key": case["key"].tolist(),
        "value": case["value"].tolist(),
        "scale": scale,
        "causal": case["causal"] is not None,
        "causal_alignment": case["causal"] or "lower_right",
        "empty_rows": "zero",
        "include": ["weights", "logsumexp"],
    }
    if scale is None:
        del body["scale"]
    for optional in ("mask", "bias"):
        if case.get(optional) is not None:
            body[optional] = case[optional].tolist()
    answer = post("/v1/attention", body)

    expected = reference_for_case(case, scale=scale)
    np.testing.assert_allclose(answer["output"], expected.output, **TOLERANCE)
    np.testing.assert_allclose(answer["weights"], expected.weights, **TOLERANCE)
    logsumexp = np.array(answer["logsumexp"], dtype=float)  # null (empty row) becomes NaN here
    np.testing.assert_array_equal(np.isnan(logsumexp), expected.empty)
    np.testing.assert_allclose(logsumexp[~expected.empty], expected.logsumexp[~expected.empty], **TOLERANCE)
    assert answer["empty_rows"] == [list(index) for index in np.argwhere(expected.empty).tolist()]


@HTTP_CASES
@given(logits_cases())
def test_softmax_matches_the_loop_reference(case: dict[str, Any]) -> None:
    logits, mask = case["logits"], case["mask"]
    body: dict[str, Any] = {"logits": logits.tolist(), "temperature": case["temperature"]}
    if mask is not None:
        body["mask"] = mask.tolist()
    for option in ("top_k", "top_p"):
        if case[option] is not None:
            body[option] = case[option]
    visible = np.ones(logits.shape, dtype=bool) if mask is None else mask
    for index in np.ndindex(*logits.shape[:-1]):
        if case["top_p"] is not None:
            assume(
                not nucleus_is_ambiguous(
                    logits[index].tolist(),
                    visible[index].tolist(),
                    case["temperature"],
                    case["top_k"],
                    case["top_p"],
                )
            )
    answer = post("/v1/softmax", body)
    probabilities = np.asarray(answer["probabilities"])
    for index in np.ndindex(*logits.shape[:-1]):
        expected, _ = reference_row(
            logits[index].tolist(),
            visible=visible[index].tolist(),
            temperature=case["temperature"],
            top_k=case["top_k"],
            top_p=case["top_p"],
        )
        np.testing.assert_allclose(probabilities[index], expected, **TOLERANCE)


@HTTP_CASES
@given(likelihood_cases())
def test_log_likelihood_matches_the_loop_reference(case: dict[str, Any]) -> None:
    logits, targets = case["logits"], case["targets"]
    answer = post(
        "/v1/log-likelihood",
        {
            "logits": logits.tolist(),
            "targets": targets.tolist(),
            "shift": case["shift"],
            "temperature": case["temperature"],
        },
    )
    token_logprobs = np.array(answer["token_logprobs"], dtype=float)
    log_likelihood = np.asarray(answer["log_likelihood"])
    ranks = np.array(answer["ranks"], dtype=object)
    for index in np.ndindex(*logits.shape[:-2]):
        expected = reference_sequence(
            logits[index], targets[index], shift=case["shift"], temperature=case["temperature"], top_k=0
        )
        scored = np.array(expected["scored"])
        np.testing.assert_array_equal(~np.isnan(token_logprobs[index]), scored)
        np.testing.assert_allclose(
            token_logprobs[index][scored], [v for v in expected["logprobs"] if v is not None], **TOLERANCE
        )
        assert [r for r in ranks[index].tolist() if r is not None] == [
            r for r, s in zip(expected["ranks"], expected["scored"], strict=True) if s
        ]
        np.testing.assert_allclose(log_likelihood[index], expected["log_likelihood"], **TOLERANCE)
