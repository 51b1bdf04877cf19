"""Softmax kernel against scipy and a plain-Python reference of masking, temperature, top-k and top-p."""

from __future__ import annotations

import math
import tracemalloc
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from scipy.special import log_softmax as scipy_log_softmax
from scipy.special import softmax as scipy_softmax

from service.kernels import (
    EmptyRowError,
    KernelError,
    NumericalOverflowError,
    ShapeError,
    Truncation,
    log_softmax,
    softmax,
    softmax_shapes,
    tempered_log_softmax,
)
from tests.kernel_calls import with_truncation
from tests.references import logits_cases, nucleus_is_ambiguous, reference_row

FAST = settings(max_examples=50, deadline=None)
Array = NDArray[Any]


@FAST
@given(logits_cases())
def test_matches_loop_reference(case: dict[str, Any]) -> None:
    logits, mask = case["logits"], case["mask"]
    visible = np.ones(logits.shape, dtype=bool) if mask is None else mask
    options = {key: case[key] for key in ("temperature", "top_k", "top_p")}
    rows = [index for index in np.ndindex(*logits.shape[:-1])]
    if case["top_p"] is not None:
        for index in rows:
            assume(not nucleus_is_ambiguous(list(logits[index]), list(visible[index]), **options))
    result = softmax(logits, mask=mask, **with_truncation(options))
    for index in rows:
        probs, kept = reference_row(list(logits[index]), visible=list(visible[index]), **options)
        np.testing.assert_allclose(result.probabilities[index], probs, rtol=1e-12, atol=1e-300)
        np.testing.assert_array_equal(result.log_probabilities[index] == -np.inf, [not k for k in kept])
        # A subnormal probability has lost relative precision, so its log is no reference for the kernel's
        # log-sum-exp (which gives e.g. exactly -730 where log(p) says -729.9999998).
        normal = [p >= np.finfo(np.float64).tiny for p in probs]
        np.testing.assert_allclose(
            result.log_probabilities[index][normal],
            np.log(np.array(probs)[normal]),
            rtol=1e-12,
            atol=1e-12,
        )
        entropy = -sum(p * math.log(p) for p in probs if p > 0)
        np.testing.assert_allclose(result.entropy[index], entropy, rtol=1e-12, atol=1e-12)
        assert result.argmax[index] == max(range(len(probs)), key=lambda i: (probs[i], -i))
    assert result.argmax.dtype == np.int64
    assert result.temperature == case["temperature"]
    np.testing.assert_allclose(result.probabilities.sum(axis=-1), 1.0, rtol=1e-12)
    assert (result.probabilities[~visible] == 0).all()


@FAST
@given(logits_cases())
def test_plain_softmax_agrees_with_scipy(case: dict[str, Any]) -> None:
    logits, temperature = case["logits"], case["temperature"]
    assume(temperature > 0)
    result = softmax(logits, temperature=temperature)
    np.testing.assert_allclose(result.probabilities, scipy_softmax(logits / temperature, axis=-1), rtol=1e-12)
    expected_log = scipy_log_softmax(logits / temperature, axis=-1)
    np.testing.assert_allclose(result.log_probabilities, expected_log, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        log_softmax(logits, temperature=temperature), expected_log, rtol=1e-12, atol=1e-12
    )


@FAST
@given(logits_cases(), st.floats(-1e3, 1e3))
def test_shift_invariance(case: dict[str, Any], offset: float) -> None:
    logits = case["logits"]
    options = {key: case[key] for key in ("temperature", "top_k")}
    plain = softmax(logits, mask=case["mask"], **with_truncation(options))
    shifted = softmax(logits + offset, mask=case["mask"], **with_truncation(options))
    np.testing.assert_allclose(shifted.probabilities, plain.probabilities, rtol=1e-9, atol=1e-12)


@FAST
@given(logits_cases())
def test_float32_is_close_to_float64(case: dict[str, Any]) -> None:
    options = {key: case[key] for key in ("temperature", "top_k")}
    double = softmax(case["logits"], mask=case["mask"], **with_truncation(options))
    single = softmax(
        case["logits"].astype(np.float32), mask=case["mask"], dtype=np.float32, **with_truncation(options)
    )
    assert single.probabilities.dtype == single.log_probabilities.dtype == single.entropy.dtype == np.float32
    # Rounding the logits to float32 moves each tempered logit by up to eps32·|x|/T, which is the error
    # the probabilities inherit (the condition number of softmax); below that, float32 must match.
    temperature = case["temperature"] or 1.0
    spread = float(np.finfo(np.float32).eps) * float(np.max(np.abs(case["logits"]))) / temperature
    np.testing.assert_allclose(single.probabilities, double.probabilities, rtol=1e-5 + 4 * spread, atol=1e-6)


def test_temperature_to_zero_approaches_greedy() -> None:
    logits = np.array([[1.0, 3.0, 2.0, 3.0], [0.5, -1.0, 0.25, 0.0]])
    greedy = softmax(logits, temperature=0.0)
    np.testing.assert_array_equal(greedy.probabilities, [[0, 0.5, 0, 0.5], [1, 0, 0, 0]])
    assert greedy.argmax.tolist() == [1, 0]
    np.testing.assert_allclose(greedy.entropy, [math.log(2), 0.0])
    np.testing.assert_array_equal(greedy.log_probabilities[1], [0, -np.inf, -np.inf, -np.inf])
    previous_gap = math.inf
    for temperature in (1.0, 0.1, 0.01, 1e-4):
        gap = np.abs(softmax(logits, temperature=temperature).probabilities - greedy.probabilities).max()
        assert gap < previous_gap
        previous_gap = gap
    # Tiny temperatures must not overflow: the limit is reached, not NaN.
    np.testing.assert_array_equal(softmax(logits, temperature=1e-300).probabilities, greedy.probabilities)


def test_high_temperature_tames_a_span_beyond_the_float_range() -> None:
    # (1e308 - -1e308) overflows, but at temperature 1e308 the tempered logits are just [1, -1].
    result = softmax([1e308, -1e308], temperature=1e308)
    np.testing.assert_allclose(result.probabilities, scipy_softmax([1.0, -1.0]), rtol=1e-12)
    np.testing.assert_allclose(result.log_probabilities, scipy_log_softmax([1.0, -1.0]), rtol=1e-12)


def test_log_softmax_is_exact_for_large_gaps() -> None:
    assert log_softmax([1000.0, 1.0]).tolist() == [0.0, -999.0]
    assert softmax([1000.0, 1.0]).log_probabilities.tolist() == [0.0, -999.0]
    assert log_softmax([[1.0, 1000.0]], axis=-1).tolist() == [[-999.0, 0.0]]
    assert log_softmax([[1000.0], [1.0]], axis=0).tolist() == [[0.0], [-999.0]]


def test_top_k_keeps_ties_at_the_boundary() -> None:
    result = softmax([3.0, 1.0, 2.0, 2.0, 0.0], truncation=Truncation(top_k=2))
    kept = result.probabilities > 0
    assert kept.tolist() == [True, False, True, True, False]
    np.testing.assert_allclose(result.probabilities[kept], scipy_softmax([3.0, 2.0, 2.0]), rtol=1e-15)
    assert (
        softmax([3.0, 1.0], truncation=Truncation(top_k=5)).probabilities.tolist()
        == softmax([3.0, 1.0]).probabilities.tolist()
    )


def test_top_k_counts_visible_entries_only() -> None:
    result = softmax([5.0, 1.0, 2.0, 3.0], truncation=Truncation(top_k=2), mask=[False, True, True, True])
    assert (result.probabilities > 0).tolist() == [False, False, True, True]


def test_top_p_keeps_the_smallest_nucleus() -> None:
    probabilities = np.array([0.5, 0.3, 0.15, 0.05])
    logits = np.log(probabilities)
    assert (softmax(logits, truncation=Truncation(top_p=0.6)).probabilities > 0).tolist() == [
        True,
        True,
        False,
        False,
    ]
    assert (softmax(logits, truncation=Truncation(top_p=0.4)).probabilities > 0).tolist() == [
        True,
        False,
        False,
        False,
    ]
    assert (softmax(logits, truncation=Truncation(top_p=1.0)).probabilities > 0).all()
    nucleus = softmax(logits, truncation=Truncation(top_p=0.9)).probabilities
    np.testing.assert_allclose(nucleus, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0], rtol=1e-12)
    # Equal probabilities: the first index wins, and at least one entry is always kept.
    assert (softmax([1.0, 1.0, 1.0], truncation=Truncation(top_p=0.01)).probabilities > 0).tolist() == [
        True,
        False,
        False,
    ]
    assert (
        softmax([1.0, 1.0, 1.0, 1.0], truncation=Truncation(top_p=0.5), temperature=0.0).probabilities > 0
    ).tolist() == [
        True,
        True,
        False,
        False,
    ]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_top_p_below_the_smallest_float32_keeps_the_most_probable_entry(dtype: type) -> None:
    # Found by schemathesis: 1e-308 rounds to 0 in float32, and "mass before < 0" kept nothing (0/0).
    result = softmax([1.0, 2.0, 0.5], truncation=Truncation(top_p=1e-308), dtype=dtype)
    np.testing.assert_array_equal(result.probabilities, [0.0, 1.0, 0.0])
    assert result.entropy == 0


def test_mask_excludes_entries() -> None:
    result = softmax([[1.0, 2.0, 3.0]], mask=[True, False, True])
    visible = scipy_softmax([1.0, 3.0])
    np.testing.assert_allclose(result.probabilities, [[visible[0], 0.0, visible[1]]], rtol=1e-15)
    assert result.probabilities[0, 1] == 0
    assert result.log_probabilities[0, 1] == -np.inf


def test_all_hidden_row_raises_empty_row_error() -> None:
    mask = np.array([[[True, False], [False, False]], [[False, False], [True, True]]])
    with pytest.raises(EmptyRowError) as raised:
        softmax(np.zeros((2, 2, 2)), mask=mask)
    assert raised.value.rows == [[0, 1], [1, 0]]
    assert raised.value.count == 2
    assert raised.value.field == "mask"
    assert raised.value.message.startswith("2 logits rows have no visible entry: [0, 1], [1, 0]")
    with pytest.raises(EmptyRowError) as single:
        softmax([1.0, 2.0], mask=[False, False])
    assert single.value.rows == [[]]
    assert single.value.count == 1


def test_many_empty_rows_are_counted_and_only_the_first_listed() -> None:
    rng = np.random.default_rng(4)
    mask = rng.random((6, 7, 3)) < 0.3
    expected = ~mask.any(axis=-1)
    assert expected.sum() > 10
    with pytest.raises(EmptyRowError) as raised:
        softmax(np.zeros((6, 7, 3)), mask=mask)
    assert raised.value.count == int(expected.sum())
    assert raised.value.rows == np.argwhere(expected)[:10].tolist()
    first = ", ".join(str(row) for row in raised.value.rows[:3])
    count = f"{int(expected.sum()):,}"
    assert f"{count} logits rows have no visible entry; the first: {first}" in raised.value.message


def test_a_million_empty_rows_are_not_all_indexed() -> None:
    logits = np.broadcast_to(np.zeros(1), (1024, 1024, 1))  # a view: no 8 MB of input
    tracemalloc.start()
    try:
        with pytest.raises(EmptyRowError) as raised:
            softmax(logits, mask=[False])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 24 * 2**20  # the flags take 1 MB; indexing every row took over 100 MB
    assert raised.value.count == 1024 * 1024
    assert raised.value.rows == [[0, column] for column in range(10)]
    assert raised.value.message.startswith(
        "1,048,576 logits rows have no visible entry; the first: [0, 0], [0, 1], [0, 2]"
    )


@pytest.mark.parametrize(
    ("logits", "options", "error", "field"),
    [
        ([1e39, 1.0], {"dtype": np.float32}, NumericalOverflowError, "logits"),
        ([math.inf, 1.0], {}, NumericalOverflowError, "logits"),
        ([1.0, 2.0], {"temperature": -1.0}, KernelError, "temperature"),
        ([1.0, 2.0], {"top_k": 0}, KernelError, "top_k"),
        ([1.0, 2.0], {"top_k": True}, KernelError, "top_k"),
        ([1.0, 2.0], {"top_p": 0.0}, KernelError, "top_p"),
        ([1.0, 2.0], {"top_p": 1.5}, KernelError, "top_p"),
        ([1.0, 2.0], {"mask": [True, False, True]}, ShapeError, "mask"),
        ([], {}, ShapeError, "logits"),
        (1.0, {}, ShapeError, "logits"),
    ],
)
def test_invalid_inputs(logits: Any, options: dict[str, Any], error: type[Exception], field: str) -> None:
    with pytest.raises(error) as raised:
        softmax(logits, **with_truncation(options))
    assert getattr(raised.value, "field", None) == field


def test_hidden_overflow_is_ignored() -> None:
    result = softmax([1e39, 1.0, 1.0], mask=[False, True, True], dtype=np.float32)
    np.testing.assert_allclose(result.probabilities, [0.0, 0.5, 0.5])


def test_log_softmax_validates_inputs() -> None:
    with pytest.raises(NumericalOverflowError) as overflow:
        log_softmax([1e39, 2.0], dtype=np.float32)
    assert overflow.value.field == "logits"
    with pytest.raises(NumericalOverflowError):
        log_softmax([math.inf, 2.0])
    with pytest.raises(KernelError) as zero:
        log_softmax([1.0, 2.0], temperature=0.0)
    assert zero.value.field == "temperature"
    assert log_softmax(np.zeros((2, 0))).shape == (2, 0)


def test_softmax_shapes() -> None:
    assert softmax_shapes((2, 3, 5), mask_shape=(3, 1)) == (2, 3, 5)
    with pytest.raises(ShapeError) as raised:
        softmax_shapes((2, 5), mask_shape=(3, 5))
    assert raised.value.field == "mask"
    assert "[3, 5]" in raised.value.message
    assert "[2, 5]" in raised.value.message


LIMIT_LOGITS = [[1.0, 3.0, 2.0, 3.0], [0.5, -1.0, 0.25, 0.0]]


@pytest.mark.parametrize(
    ("temperature", "dtype"),
    [(1e-46, np.float32), (1e-300, np.float32), (1e-40, np.float32), (1e-320, np.float64)],
)
@pytest.mark.parametrize(("top_k", "top_p"), [(None, None), (3, None), (None, 0.4)])
def test_a_temperature_below_the_dtype_gives_the_greedy_limit(
    temperature: float, dtype: type, top_k: int | None, top_p: float | None
) -> None:
    # 1e-46 and 1e-300 are 0 in float32 (0/0 was NaN), 1e-40 a subnormal; the reference divides in float64.
    result = softmax(
        LIMIT_LOGITS, truncation=Truncation(top_k=top_k, top_p=top_p), temperature=temperature, dtype=dtype
    )
    expected = [
        reference_row(row, visible=[True] * 4, temperature=temperature, top_k=top_k, top_p=top_p)[0]
        for row in LIMIT_LOGITS
    ]
    assert not np.isnan(result.probabilities).any()
    np.testing.assert_allclose(result.probabilities, expected, rtol=1e-7)
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(result.log_probabilities, np.log(expected), rtol=1e-7)
    greedy = 0.0 if top_p is not None else math.log(2)  # top_p 0.4 keeps the first of the two maxima
    np.testing.assert_allclose(result.entropy, [greedy, 0.0], atol=1e-7)
    assert result.argmax.tolist() == [1, 0]
    assert result.temperature == temperature


@pytest.mark.parametrize(("temperature", "dtype"), [(1e-310, np.float64), (1e-46, np.float32)])
def test_log_softmax_of_a_tiny_temperature_is_the_limit(temperature: float, dtype: type) -> None:
    # Dividing first made 1/1e-310 overflow; shifted first, only the non-maximal entries go to -inf.
    result = log_softmax(LIMIT_LOGITS, temperature=temperature, dtype=dtype)
    expected = [
        reference_row(row, visible=[True] * 4, temperature=temperature, top_k=None, top_p=None)[0]
        for row in LIMIT_LOGITS
    ]
    assert result.dtype == dtype
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(result, np.log(expected), rtol=1e-7)


@pytest.mark.parametrize("temperature", [1e-3, 0.3, 1.0, 3.0, 1e5])
def test_log_softmax_agrees_with_scipy_across_temperatures(temperature: float) -> None:
    logits = np.random.default_rng(8).normal(size=(3, 7)) * 2
    np.testing.assert_allclose(
        log_softmax(logits, temperature=temperature),
        scipy_log_softmax(logits / temperature, axis=-1),
        rtol=1e-12,
        atol=1e-12,
    )
    # A span beyond the float range comes back into it at a high temperature.
    np.testing.assert_allclose(
        log_softmax([1e308, -1e308], temperature=1e308), scipy_log_softmax([1.0, -1.0]), rtol=1e-12
    )


@pytest.mark.parametrize("temperature", [0.25, 1.0, 2.5])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_rows_numbers_do_not_depend_on_the_other_rows(temperature: float, dtype: type) -> None:
    # The order of dividing and shifting depends on the temperature alone: a row beyond the float range
    # elsewhere in the batch (which once switched the whole batch to dividing first) changes nothing.
    row = np.random.default_rng(11).normal(scale=5.0, size=9)
    big = 0.9 * float(np.finfo(dtype).max)
    wide = [big, -big] + [0.0] * 7  # its span overflows
    alone = softmax([row], temperature=temperature, dtype=dtype)
    batched = softmax([row, wide], temperature=temperature, dtype=dtype)
    np.testing.assert_array_equal(batched.probabilities[0], alone.probabilities[0])
    np.testing.assert_array_equal(batched.log_probabilities[0], alone.log_probabilities[0])


@pytest.mark.parametrize("temperature", [0.0, 1e-3, 0.5, 1.0, 2.0, 40.0])
def test_tempered_log_softmax_hides_entries_and_agrees_with_scipy(temperature: float) -> None:
    logits = np.random.default_rng(12).normal(scale=3.0, size=(4, 6))
    visible = np.random.default_rng(13).random((4, 6)) < 0.7
    visible[:, 2] = True
    result = tempered_log_softmax(logits, temperature, visible=visible)
    for row, shown, got in zip(logits, visible, result, strict=True):
        assert np.isneginf(got[~shown]).all()
        if temperature == 0:  # the greedy limit: the maximum takes all (no ties in random normals)
            expected = np.where(row[shown] == row[shown].max(), 0.0, -np.inf)
        else:
            expected = scipy_log_softmax(row[shown] / temperature)
        np.testing.assert_allclose(got[shown], expected, rtol=1e-12, atol=1e-12)
    # Along another axis, as the library form log_softmax allows.
    np.testing.assert_allclose(
        tempered_log_softmax(logits, 2.0, axis=0), scipy_log_softmax(logits / 2.0, axis=0), rtol=1e-12
    )


@pytest.mark.parametrize("temperature", [3.5e38, 1e100, 1e308])
def test_float32_temperature_beyond_float32_range_divides_exactly(temperature: float) -> None:
    # float32 cannot hold these temperatures (the cast overflowed to inf, with a warning that the test
    # suite turns into an error); the quotients themselves are float32 numbers and must not be lost.
    logits = np.array([3e38, -3e38, 0.0], dtype=np.float32)
    result = softmax(logits, temperature=temperature, dtype=np.float32)
    expected = scipy_softmax(logits.astype(np.float64) / temperature)
    np.testing.assert_allclose(result.probabilities, expected, rtol=1e-6)
