"""Sequence log-likelihood against a plain-Python reference and scipy's log_softmax."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from numpy.typing import NDArray
from scipy.special import log_softmax

from service.kernels import (
    KernelError,
    NumericalOverflowError,
    ShapeError,
    likelihood_shapes,
    sequence_log_likelihood,
)
from tests.references import IGNORE, likelihood_cases, reference_sequence

FAST = settings(max_examples=50, deadline=None)
Array = NDArray[Any]


@FAST
@given(likelihood_cases())
def test_matches_loop_reference(case: dict[str, Any]) -> None:
    logits, targets = case["logits"], case["targets"]
    result = sequence_log_likelihood(
        logits,
        targets,
        shift=case["shift"],
        temperature=case["temperature"],
        top_logprobs=case["top_logprobs"],
    )
    k = min(case["top_logprobs"], logits.shape[-1])
    for index in np.ndindex(*logits.shape[:-2]):
        expected = reference_sequence(
            logits[index], targets[index], shift=case["shift"], temperature=case["temperature"], top_k=k
        )
        scored = np.array(expected["scored"])
        np.testing.assert_array_equal(result.scored[index], scored)
        np.testing.assert_allclose(
            result.token_logprobs[index][scored],
            [v for v in expected["logprobs"] if v is not None],
            rtol=1e-12,
            atol=1e-12,
        )
        assert np.isnan(result.token_logprobs[index][~scored]).all()
        assert result.ranks[index].tolist() == expected["ranks"]
        assert result.num_tokens[index] == expected["num_tokens"]
        np.testing.assert_allclose(
            result.log_likelihood[index], expected["log_likelihood"], rtol=1e-12, atol=1e-12
        )
        np.testing.assert_allclose(result.mean_nll[index], expected["mean_nll"], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(
            result.perplexity[index],
            math.exp(expected["mean_nll"]) if expected["num_tokens"] else math.nan,
            rtol=1e-12,
        )
        assert bool(result.is_greedy[index]) == expected["is_greedy"]
        if k == 0:
            assert result.top_ids is None
            assert result.top_values is None
            continue
        assert result.top_ids.shape[-1] == k
        for position, tops in enumerate(expected["tops"]):
            if tops is None:
                assert result.top_ids[index][position].tolist() == [-1] * k
                assert np.isnan(result.top_values[index][position]).all()
                continue
            assert result.top_ids[index][position].tolist() == [i for i, _ in tops]
            np.testing.assert_allclose(
                result.top_values[index][position], [v for _, v in tops], rtol=1e-12, atol=1e-12
            )


@FAST
@given(likelihood_cases())
def test_token_logprobs_agree_with_scipy(case: dict[str, Any]) -> None:
    logits, targets, shift = case["logits"], case["targets"], case["shift"]
    result = sequence_log_likelihood(logits, targets, shift=shift, temperature=case["temperature"])
    expected = log_softmax(logits / case["temperature"], axis=-1)
    if shift:
        expected, targets = expected[..., :-1, :], targets[..., 1:]
    counted = targets != IGNORE
    gathered = np.take_along_axis(expected, np.where(counted, targets, 0)[..., np.newaxis], axis=-1)[..., 0]
    observed = result.token_logprobs[..., 1:] if shift else result.token_logprobs
    np.testing.assert_allclose(observed[counted], gathered[counted], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        result.log_likelihood, np.where(counted, gathered, 0).sum(axis=-1), rtol=1e-12, atol=1e-12
    )


@FAST
@given(likelihood_cases())
def test_float32_is_close_to_float64(case: dict[str, Any]) -> None:
    options = {key: case[key] for key in ("shift", "temperature", "top_logprobs")}
    double = sequence_log_likelihood(case["logits"], case["targets"], **options)
    # exp(mean NLL) overflows float32 above about 88.7: that case is a NumericalOverflowError, tested apart
    assume(not np.any(double.mean_nll > 80))
    single = sequence_log_likelihood(case["logits"], case["targets"], dtype=np.float32, **options)
    assert single.token_logprobs.dtype == single.log_likelihood.dtype == single.perplexity.dtype == np.float32
    np.testing.assert_allclose(single.token_logprobs, double.token_logprobs, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(single.mean_nll, double.mean_nll, rtol=1e-5, atol=1e-4)


def test_shift_aligns_results_with_targets() -> None:
    logits = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.2, 0.7], [0.3, 0.3, 0.4]]))
    result = sequence_log_likelihood(logits, [0, 2, 1], shift=True, top_logprobs=2)
    assert result.scored.tolist() == [False, True, True]
    np.testing.assert_allclose(result.token_logprobs[1:], [math.log(0.25), math.log(0.2)], rtol=1e-14)
    assert result.ranks.tolist() == [0, 2, 2]
    assert result.num_tokens == 2
    np.testing.assert_allclose(result.perplexity, math.exp(-(math.log(0.25) + math.log(0.2)) / 2), rtol=1e-14)
    assert not result.is_greedy
    # Ties: 0.25 at ids 1 and 2, the lower id first.
    assert result.top_ids.tolist() == [[-1, -1], [0, 1], [2, 1]]
    unshifted = sequence_log_likelihood(logits, [0, 2, 1])
    np.testing.assert_allclose(unshifted.token_logprobs, np.log([0.5, 0.7, 0.3]), rtol=1e-14)
    assert unshifted.ranks.tolist() == [1, 1, 2]


def test_ignore_index_and_nothing_scored() -> None:
    logits = np.zeros((2, 3, 4))
    targets = np.array([[IGNORE, 1, IGNORE], [IGNORE, IGNORE, IGNORE]])
    result = sequence_log_likelihood(logits, targets)
    assert result.num_tokens.tolist() == [1, 0]
    np.testing.assert_allclose(result.log_likelihood, [-math.log(4), 0.0], rtol=1e-15)
    assert math.isnan(result.mean_nll[1])
    assert math.isnan(result.perplexity[1])
    np.testing.assert_allclose(result.perplexity[0], 4.0, rtol=1e-14)
    assert result.is_greedy.tolist() == [True, True]  # all-equal logits: every entry has rank 1
    custom = sequence_log_likelihood(logits, np.array([[7, 1, 7], [7, 7, 7]]), ignore_index=7)
    np.testing.assert_array_equal(custom.scored, result.scored)


def test_large_vocabulary_top_logprobs_matches_sort() -> None:
    rng = np.random.default_rng(3)
    logits = np.round(rng.normal(size=(4, 5000)), 1)  # rounding creates many ties at the top-k boundary
    targets = rng.integers(0, 5000, size=4)
    result = sequence_log_likelihood(logits, targets, top_logprobs=20)
    expected_ids = np.argsort(-logits, axis=-1, kind="stable")[:, :20]
    assert result.top_ids.tolist() == expected_ids.tolist()
    expected = log_softmax(logits, axis=-1)
    np.testing.assert_allclose(result.top_values, np.take_along_axis(expected, expected_ids, -1), rtol=1e-12)
    assert result.ranks.tolist() == [
        1 + int((row > row[t]).sum()) for row, t in zip(logits, targets, strict=True)
    ]


def test_top_logprobs_are_capped_at_the_vocabulary() -> None:
    result = sequence_log_likelihood([[0.0, 1.0]], [1], top_logprobs=20)
    assert result.top_ids.tolist() == [[1, 0]]


def test_target_out_of_range_names_position_and_value() -> None:
    with pytest.raises(KernelError) as raised:
        sequence_log_likelihood(np.zeros((2, 3, 5)), [[0, 1, 2], [3, 5, -1]])
    assert raised.value.field == "targets"
    assert "[1, 1]" in raised.value.message
    assert "5" in raised.value.message
    assert "V=5" in raised.value.message


@pytest.mark.parametrize(
    ("logits_shape", "targets_shape", "field", "mentions"),
    [
        ((3, 5), (4,), "targets", ["[4]", "[3, 5]"]),
        ((2, 3, 5), (3,), "targets", ["[3]", "[2, 3, 5]"]),
        ((2, 3, 5), (1, 3), "targets", ["[1, 3]", "[2, 3, 5]"]),
        ((5,), (), "logits", ["[5]"]),
        ((3, 0), (3,), "logits", ["[3, 0]"]),
    ],
)
def test_shape_errors(
    logits_shape: tuple[int, ...], targets_shape: tuple[int, ...], field: str, mentions: list[str]
) -> None:
    with pytest.raises(ShapeError) as raised:
        likelihood_shapes(logits_shape, targets_shape)
    assert raised.value.field == field
    for text in mentions:
        assert text in raised.value.message
    with pytest.raises(ShapeError) as from_kernel:
        sequence_log_likelihood(np.zeros(logits_shape), np.zeros(targets_shape, dtype=np.int64))
    assert from_kernel.value.message == raised.value.message


def test_overflow() -> None:
    with pytest.raises(NumericalOverflowError) as cast:
        sequence_log_likelihood([[1e39, 0.0]], [0], dtype=np.float32)
    assert cast.value.field == "logits"
    # The target sits 1e310 below the row max once divided by the temperature: log-probability -inf.
    with pytest.raises(NumericalOverflowError) as tempered:
        sequence_log_likelihood([[1e300, 0.0]], [1], temperature=1e-10)
    assert tempered.value.field == "logits"
    with pytest.raises(NumericalOverflowError):
        sequence_log_likelihood([[1.0, 2.0]], [0], temperature=1e-46, dtype=np.float32)
    # A target 2e308 below the best logit: its log-probability is -inf.
    with pytest.raises(NumericalOverflowError) as perplexity:
        sequence_log_likelihood([[1e308, -1e308]], [1])
    assert perplexity.value.field == "logits"
    with pytest.raises(NumericalOverflowError):
        sequence_log_likelihood([[100.0, 0.0]], [1], dtype=np.float32)  # exp(100) > float32 max


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"temperature": 0.0}, "temperature"),
        ({"top_logprobs": 21}, "top_logprobs"),
        ({"top_logprobs": -1}, "top_logprobs"),
        ({"dtype": np.float16}, "dtype"),
    ],
)
def test_invalid_options(options: dict[str, Any], field: str) -> None:
    with pytest.raises(KernelError) as raised:
        sequence_log_likelihood([[0.0, 1.0]], [1], **options)
    assert raised.value.field == field


def test_non_integer_targets_are_refused() -> None:
    with pytest.raises(KernelError) as raised:
        sequence_log_likelihood([[0.0, 1.0]], [0.5])
    assert raised.value.field == "targets"
    assert sequence_log_likelihood([[0.0, 1.0]], [1.0]).num_tokens == 1


@pytest.mark.parametrize(("temperature", "dtype"), [(1e-310, np.float64), (1e-46, np.float32)])
def test_a_tiny_temperature_scores_the_limit(temperature: float, dtype: type) -> None:
    # The limit of log_softmax(x / T) as T -> 0: -log(number of maxima) at a maximum, -inf elsewhere.
    logits = [[1.0, 3.0, 2.0, 3.0], [0.5, -1.0, 0.25, 0.0]]
    result = sequence_log_likelihood(logits, [1, 0], temperature=temperature, top_logprobs=4, dtype=dtype)
    np.testing.assert_allclose(result.token_logprobs, [-math.log(2), 0.0], rtol=1e-7)
    np.testing.assert_allclose(result.perplexity, [math.sqrt(2)], rtol=1e-7)
    assert result.ranks.tolist() == [1, 1]
    assert result.is_greedy.tolist() is True
    # Ties in the limit keep the order of the logits themselves.
    assert result.top_ids.tolist() == [[1, 3, 2, 0], [0, 2, 3, 1]]
    assert not np.isnan(result.top_values).any()
    half = -math.log(2)
    expected = [[half, half, -np.inf, -np.inf], [0.0, -np.inf, -np.inf, -np.inf]]
    np.testing.assert_allclose(result.top_values, expected, rtol=1e-7)


def test_a_small_temperature_with_a_finite_answer_is_not_refused() -> None:
    # Dividing before shifting overflowed: 2 / 1e-310 and 1e300 / 1e-10 are beyond the float range.
    result = sequence_log_likelihood([[1.0, 2.0]], [1], temperature=1e-310)
    assert result.token_logprobs.tolist() == [0.0]
    assert result.perplexity.tolist() == 1.0
    assert result.mean_nll.tolist() == 0.0
    large = sequence_log_likelihood([[1e300, 0.0, 1e300]], [2], temperature=1e-10)
    np.testing.assert_allclose(large.token_logprobs, [-math.log(2)], rtol=1e-15)
    assert large.ranks.tolist() == [1]


@pytest.mark.parametrize("temperature", [0.02, 0.3, 3.0])
def test_other_temperatures_match_the_loop_reference(temperature: float) -> None:
    rng = np.random.default_rng(9)
    logits, targets = rng.normal(size=(5, 6)), rng.integers(0, 6, size=5)
    result = sequence_log_likelihood(logits, targets, temperature=temperature, top_logprobs=3)
    expected = reference_sequence(logits, targets, shift=False, temperature=temperature, top_k=3)
    np.testing.assert_allclose(result.token_logprobs, expected["logprobs"], rtol=1e-12, atol=1e-12)
    assert result.ranks.tolist() == expected["ranks"]
    assert result.top_ids.tolist() == [[i for i, _ in tops] for tops in expected["tops"]]
    np.testing.assert_allclose(
        result.top_values, [[v for _, v in tops] for tops in expected["tops"]], rtol=1e-12, atol=1e-12
    )
