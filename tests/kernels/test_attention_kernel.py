"""Attention kernel against a plain-Python reference, plus its shape, empty-row and overflow rules."""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from scipy.special import logsumexp, softmax

from service.kernels import (
    AttentionOptions,
    AttentionShapes,
    EmptyRowError,
    KernelError,
    NumericalOverflowError,
    ShapeError,
    _common,
    attention,
    attention_shapes,
)
from tests.kernel_calls import with_options
from tests.references import Reference, attention_cases, reference_attention, reference_for_case

FAST = settings(max_examples=50, deadline=None)
Array = NDArray[Any]


def run_both(case: dict[str, Any], **kwargs: Any) -> tuple[Any, Reference]:
    causal = case["causal"]
    result = attention(
        case["query"],
        case["key"],
        case["value"],
        AttentionOptions(
            mask=case.get("mask"),
            bias=case.get("bias"),
            causal=causal is not None,
            causal_alignment=causal or "lower_right",
            scale=case["scale"],
            empty_rows="zero",
        ),
        **kwargs,
    )
    return result, reference_for_case(case, scale=case["scale"])


@FAST
@given(attention_cases())
def test_matches_loop_reference(case: dict[str, Any]) -> None:
    result, reference = run_both(case, include={"weights", "scores", "logsumexp"})
    np.testing.assert_allclose(result.output, reference.output, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(result.weights, reference.weights, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(result.logsumexp == -np.inf, reference.empty)
    visible_rows = ~reference.empty
    np.testing.assert_allclose(result.logsumexp[visible_rows], reference.logsumexp[visible_rows], rtol=1e-12)
    # Hidden entries: weight exactly 0 and score -inf; visible rows sum to 1; empty rows are all zero.
    hidden = result.scores == -np.inf
    assert (result.weights[hidden] == 0).all()
    np.testing.assert_allclose(result.weights.sum(axis=-1)[visible_rows], 1.0, rtol=1e-12)
    assert (result.weights[reference.empty] == 0).all()
    assert (result.output[reference.empty] == 0).all()
    assert result.empty_rows.dtype == np.int64
    assert result.empty_rows.shape == (int(reference.empty.sum()), reference.empty.ndim)
    np.testing.assert_array_equal(result.empty_rows, np.argwhere(reference.empty))


@FAST
@given(attention_cases())
def test_scores_and_logsumexp_agree_with_scipy(case: dict[str, Any]) -> None:
    result, reference = run_both(case, include={"weights", "scores", "logsumexp"})
    scores = result.scores
    rows = ~reference.empty
    with np.errstate(invalid="ignore"):  # empty rows are all -inf; only visible rows are compared
        expected_weights = softmax(scores, axis=-1)
        expected_lse = logsumexp(scores, axis=-1)
    np.testing.assert_allclose(result.weights[rows], expected_weights[rows], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(result.logsumexp[rows], expected_lse[rows], rtol=1e-12)
    np.testing.assert_allclose(
        result.output, result.weights @ np.asarray(case["value"]), rtol=1e-12, atol=1e-12
    )


@FAST
@given(attention_cases(), st.integers(1, 8))
def test_blocked_equals_unblocked(case: dict[str, Any], block_rows: int) -> None:
    whole, _ = run_both(case, include={"logsumexp"}, block_rows=10**6)
    blocked, _ = run_both(case, include={"logsumexp"}, block_rows=block_rows)
    automatic, _ = run_both(case, include={"logsumexp"})
    for result in (blocked, automatic):
        np.testing.assert_allclose(result.output, whole.output, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(result.logsumexp, whole.logsumexp, rtol=1e-12)
        np.testing.assert_array_equal(result.empty_rows, whole.empty_rows)
    # Blocks may also fill requested weights.
    with_weights, _ = run_both(case, include={"weights"}, block_rows=block_rows)
    np.testing.assert_allclose(with_weights.output, whole.output, rtol=1e-12, atol=1e-15)


@FAST
@given(attention_cases())
def test_float32_is_close_to_float64(case: dict[str, Any]) -> None:
    double, _ = run_both(case, include={"weights", "logsumexp"})
    single, _ = run_both(case, include={"weights", "logsumexp"}, dtype=np.float32)
    assert single.output.dtype == np.float32
    assert single.weights.dtype == np.float32
    assert single.logsumexp.dtype == np.float32
    np.testing.assert_allclose(single.output, double.output, rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(single.weights, double.weights, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(single.logsumexp, double.logsumexp, rtol=1e-5, atol=1e-5)


def test_worked_examples() -> None:
    keys = [[1.0, 0.0], [0.0, 1.0]]
    first = attention([0, 1], keys, [[6, 0], [0, 3]], include={"weights"})
    np.testing.assert_allclose(first.weights, [0.3302, 0.6698], atol=5e-5)
    np.testing.assert_allclose(first.output, [1.9814, 2.0093], atol=5e-5)
    e = math.exp(1 / math.sqrt(2))
    np.testing.assert_allclose(first.weights, [1 / (1 + e), e / (1 + e)], rtol=1e-15)
    assert first.output.shape == (2,)
    assert first.scale == 1 / math.sqrt(2)

    second = attention([1, 0], keys, [[2, 0], [0, 4]])
    np.testing.assert_allclose(second.output, [1.3395, 1.3210], atol=5e-5)
    masked = attention([1, 0], keys, [[2, 0], [0, 4]], AttentionOptions(mask=[True, False]))
    assert masked.output.tolist() == [2.0, 0.0]


def test_single_query_drops_the_row_axis() -> None:
    rng = np.random.default_rng(1)
    query, key, value = rng.normal(size=(3, 4)), rng.normal(size=(3, 5, 4)), rng.normal(size=(3, 5, 2))
    mask = np.array([[True, False, True, True, True]] * 3)
    bias = rng.normal(size=(3, 5))
    single = attention(
        query[0],
        key,
        value,
        AttentionOptions(mask=mask, bias=bias),
        include={"weights", "scores", "logsumexp"},
    )
    rows = attention(
        query[0][np.newaxis],
        key,
        value,
        AttentionOptions(mask=mask[:, np.newaxis], bias=bias[:, np.newaxis]),
        include={"weights", "scores", "logsumexp"},
    )
    assert single.output.shape == (3, 2)
    assert single.weights.shape == single.scores.shape == (3, 5)
    assert single.logsumexp.shape == (3,)
    np.testing.assert_array_equal(single.output, rows.output[:, 0])
    np.testing.assert_array_equal(single.weights, rows.weights[:, 0])
    np.testing.assert_array_equal(single.scores, rows.scores[:, 0])
    assert (single.weights[:, 1] == 0).all()


def test_single_query_empty_row_indexes_the_batch_only() -> None:
    mask = [[True, True], [False, False]]
    with pytest.raises(EmptyRowError) as raised:
        attention([1.0, 0.0], np.ones((2, 2, 2)), np.ones((2, 2, 3)), AttentionOptions(mask=mask))
    assert raised.value.rows == [[1]]
    assert raised.value.count == 1
    assert raised.value.field == "mask"
    result = attention(
        [1.0, 0.0], np.ones((2, 2, 2)), np.ones((2, 2, 3)), AttentionOptions(mask=mask, empty_rows="zero")
    )
    assert result.empty_rows.tolist() == [[1]]
    assert result.output.tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
    with pytest.raises(EmptyRowError) as raised:
        attention([1.0, 0.0], np.ones((2, 2)), np.ones((2, 3)), AttentionOptions(mask=[False, False]))
    assert raised.value.rows == [[]]
    assert raised.value.count == 1


def test_empty_rows_error_lists_the_rows() -> None:
    mask = np.ones((2, 3, 4), dtype=bool)
    mask[0, 1] = False
    mask[1, 2] = False
    with pytest.raises(EmptyRowError) as raised:
        attention(np.ones((2, 3, 2)), np.ones((4, 2)), np.ones((4, 2)), AttentionOptions(mask=mask))
    assert raised.value.rows == [[0, 1], [1, 2]]
    assert raised.value.count == 2
    assert raised.value.message.startswith("2 query rows have no visible key: [0, 1], [1, 2]")
    assert raised.value.field == "mask"
    assert "[0, 1]" in raised.value.message
    assert "[1, 2]" in raised.value.message
    assert "no visible key" in raised.value.message


def test_lower_right_causal_with_more_queries_than_keys_leaves_first_rows_empty() -> None:
    rng = np.random.default_rng(2)
    query, key, value = rng.normal(size=(5, 3)), rng.normal(size=(3, 3)), rng.normal(size=(3, 2))
    with pytest.raises(EmptyRowError) as raised:
        attention(query, key, value, AttentionOptions(causal=True))
    assert raised.value.rows == [[0], [1]]
    assert raised.value.count == 2
    assert raised.value.field == "causal"
    assert "[0]" in raised.value.message
    result = attention(
        query, key, value, AttentionOptions(causal=True, empty_rows="zero"), include={"weights"}
    )
    assert result.empty_rows.tolist() == [[0], [1]]
    assert (result.output[:2] == 0).all()
    # Row 2 sees key 0 only; the last row sees every key.
    np.testing.assert_array_equal(result.weights[2], [1.0, 0.0, 0.0])
    upper_left = attention(
        query, key, value, AttentionOptions(causal=True, causal_alignment="upper_left"), include={"weights"}
    )
    assert upper_left.empty_rows.shape == (0, 1)
    np.testing.assert_array_equal(upper_left.weights[0], [1.0, 0.0, 0.0])


def test_zero_keys_make_every_row_empty() -> None:
    result = attention(
        np.ones((2, 3)),
        np.ones((0, 3)),
        np.ones((0, 4)),
        AttentionOptions(empty_rows="zero"),
        include={"logsumexp"},
    )
    assert result.output.tolist() == [[0.0] * 4] * 2
    assert result.logsumexp.tolist() == [-math.inf, -math.inf]
    assert result.empty_rows.tolist() == [[0], [1]]


def test_large_but_finite_scores_stay_stable() -> None:
    # Scores of about ±1e150 overflow a naive exp but not the max-shifted one.
    result = attention([[1e75, 0.0]], [[1e75, 0.0], [-1e75, 0.0]], [[1.0], [2.0]], include={"weights"})
    assert result.weights.tolist() == [[1.0, 0.0]]
    assert result.output.tolist() == [[1.0]]


@pytest.mark.parametrize(
    ("inputs", "options", "field"),
    [
        (([[1e200, 0.0]], [[1e200, 0.0]], [[1.0]]), {}, "query"),
        (([[1.0, 0.0]], [[1.0, 0.0]], [[1e39]]), {"dtype": np.float32}, "value"),
        (([[1.0, 0.0]], [[1e39, 0.0]], [[1.0]]), {"dtype": np.float32}, "key"),
        (([[1.0, 0.0]], [[1.0, 0.0]], [[1.0]]), {"dtype": np.float32, "bias": [[1e39]]}, "bias"),
        (([[1.0, 0.0]], [[1.0, 0.0], [2.0, 0.0]], [[1.0], [math.inf]]), {}, "value"),
        # q·k = 1e10 is finite; times the scale it is not.
        (([[1e5, 0.0]], [[1e5, 0.0]], [[1.0]]), {"scale": 1e300}, "scale"),
        # q·k = 1e38 is finite in float32; adding the bias 3e38 is not.
        (
            ([[1e19, 0.0]], [[1e19, 0.0]], [[1.0]]),
            {"dtype": np.float32, "scale": 1.0, "bias": [[3e38]]},
            "bias",
        ),
    ],
)
def test_overflow_raises(inputs: tuple[Any, Any, Any], options: dict[str, Any], field: str) -> None:
    with pytest.raises(NumericalOverflowError) as raised:
        attention(*inputs, **with_options(options))
    assert raised.value.field == field
    assert "overflow" in raised.value.message
    assert "smaller" in raised.value.message


def test_values_near_the_float_limit_do_not_overflow() -> None:
    result = attention([[1.0, 0.0]], [[1.0, 0.0], [2.0, 0.0]], [[1.5e308], [1.7e308]])
    assert 1.5e308 < result.output[0, 0] < 1.7e308


def test_overflow_in_a_hidden_key_is_ignored() -> None:
    result = attention(
        [[1.0, 0.0]],
        [[1.0, 0.0], [1e39, 0.0]],
        [[3.0], [1.0]],
        AttentionOptions(mask=[True, False]),
        dtype=np.float32,
    )
    assert result.output.tolist() == [[3.0]]


@pytest.mark.parametrize(
    ("query", "key", "value", "extra", "field", "mentions"),
    [
        ((2, 2), (4, 3), (4, 5), {}, "key", ["d_k=3", "d_k=2", "[2, 2]", "[4, 3]"]),
        ((2, 3), (4, 3), (5, 2), {}, "value", ["m=5", "m=4", "[4, 3]", "[5, 2]"]),
        ((2, 2, 3), (3, 4, 3), (4, 2), {}, "key", ["[2, 2, 3]", "[3, 4, 3]"]),
        ((2, 2, 3), (4, 3), (3, 4, 2), {}, "value", ["[2, 2, 3]", "[3, 4, 2]"]),
        ((2, 3), (4, 3), (4, 2), {"mask_shape": (3,)}, "mask", ["[3]", "[2, 4]"]),
        ((2, 3), (4, 3), (4, 2), {"mask_shape": (3, 2, 4)}, "mask", ["[3, 2, 4]", "[2, 4]"]),
        ((2, 2, 3), (4, 3), (4, 2), {"bias_shape": (2, 3, 4)}, "bias", ["[2, 3, 4]", "[2, 2, 4]"]),
        ((3,), (2, 4, 3), (4, 2), {"mask_shape": (2, 1, 4)}, "mask", ["[2, 1, 4]", "[2, 4]"]),
        ((), (4, 3), (4, 2), {}, "query", ["scalar"]),
        ((2, 3), (3,), (4, 2), {}, "key", ["[3]"]),
        ((2, 3), (4, 3), (4,), {}, "value", ["[4]"]),
        ((2, 0), (4, 0), (4, 2), {}, "query", ["d_k=0"]),
    ],
)
def test_shape_errors_name_the_field_and_shapes(
    query: tuple[int, ...],
    key: tuple[int, ...],
    value: tuple[int, ...],
    extra: dict[str, tuple[int, ...]],
    field: str,
    mentions: list[str],
) -> None:
    with pytest.raises(ShapeError) as raised:
        attention_shapes(query, key, value, **extra)
    assert raised.value.field == field
    for text in mentions:
        assert text in raised.value.message
    # The kernel itself raises the same error.
    arrays = {name: np.zeros(shape, dtype=bool) for name, shape in extra.items()}
    with pytest.raises(ShapeError) as from_kernel:
        attention(
            np.zeros(query),
            np.zeros(key),
            np.zeros(value),
            AttentionOptions(
                mask=arrays.get("mask_shape"),
                bias=None if "bias_shape" not in arrays else arrays["bias_shape"].astype(float),
            ),
        )
    assert from_kernel.value.field == field
    assert from_kernel.value.message == raised.value.message


def test_shapes_describe_the_call() -> None:
    shapes = attention_shapes((2, 3, 5, 8), (3, 7, 8), (1, 7, 4), mask_shape=(7,), bias_shape=(5, 7))
    assert shapes == AttentionShapes(batch=(2, 3), n=5, m=7, d_k=8, d_v=4, single_query=False)
    assert shapes.scores_elements == 2 * 3 * 5 * 7
    assert shapes.output_elements == 2 * 3 * 5 * 4
    assert shapes.output_shape == (2, 3, 5, 4)
    assert shapes.weights_shape == (2, 3, 5, 7)
    single = attention_shapes((8,), (3, 7, 8), (7, 4))
    assert single.output_shape == (3, 4)
    assert single.weights_shape == (3, 7)
    assert single.scores_elements == 3 * 7


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"scale": math.inf}, "scale"),
        ({"block_rows": 0}, "block_rows"),
        ({"empty_rows": "skip"}, "empty_rows"),
        ({"causal_alignment": "diagonal"}, "causal_alignment"),
        ({"dtype": np.int32}, "dtype"),
        ({"mask": [0.5, 1.0]}, "mask"),
    ],
)
def test_invalid_options_raise_kernel_error(options: dict[str, Any], field: str) -> None:
    with pytest.raises(KernelError) as raised:
        attention([[1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]], [[1.0], [2.0]], **with_options(options))
    assert raised.value.field == field


def test_integer_mask_is_accepted() -> None:
    as_int = attention([[1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]], [[1.0], [2.0]], AttentionOptions(mask=[1, 0]))
    assert as_int.output.tolist() == [[1.0]]


def peak_bytes(call: Callable[[], Any]) -> tuple[Any, int]:
    """``call()`` and the peak memory NumPy and Python allocated during it."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@FAST
@given(attention_cases(), st.sampled_from([1, 2, 3, 5, 16]))
def test_batch_blocks_equal_the_unblocked_result(case: dict[str, Any], block_elements: int) -> None:
    whole, reference = run_both(case, include={"logsumexp"})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_common, "BLOCK_ELEMENTS", block_elements)
        blocked, _ = run_both(case, include={"logsumexp"})
    np.testing.assert_allclose(blocked.output, reference.output, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(blocked.output, whole.output, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(blocked.logsumexp, whole.logsumexp, rtol=1e-12)
    np.testing.assert_array_equal(blocked.empty_rows, whole.empty_rows)


@pytest.mark.parametrize("causal", [None, "lower_right", "upper_left"])
@pytest.mark.parametrize("block_elements", [1, 4, 7])
def test_batch_blocks_of_a_single_query_match_the_reference(causal: str | None, block_elements: int) -> None:
    rng = np.random.default_rng(5)
    query, key, value = rng.normal(size=3), rng.normal(size=(2, 3, 5, 3)), rng.normal(size=(3, 5, 2))
    mask = rng.random((3, 5)) < 0.6
    mask[1] = False  # an empty row in every batch entry
    bias = rng.normal(size=(2, 1, 5))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_common, "BLOCK_ELEMENTS", block_elements)
        result = attention(
            query,
            key,
            value,
            AttentionOptions(
                mask=mask,
                bias=bias,
                causal=causal is not None,
                causal_alignment=causal or "lower_right",
                empty_rows="zero",
            ),
            include={"logsumexp"},
        )
    reference = reference_attention(
        np.broadcast_to(query, (2, 3, 1, 3)),
        key,
        np.broadcast_to(value, (2, 3, 5, 2)),
        mask=np.broadcast_to(mask[:, np.newaxis, :], (2, 3, 1, 5)),
        bias=np.broadcast_to(bias[..., np.newaxis, :], (2, 3, 1, 5)),
        causal=causal,
    )
    np.testing.assert_allclose(result.output, reference.output[..., 0, :], rtol=1e-12, atol=1e-12)
    visible = ~reference.empty[..., 0]
    np.testing.assert_allclose(result.logsumexp[visible], reference.logsumexp[..., 0][visible], rtol=1e-12)
    np.testing.assert_array_equal(result.empty_rows, np.argwhere(reference.empty[..., 0]))


def test_a_large_batch_is_processed_in_blocks_of_bounded_size() -> None:
    # The reported case scaled down: a batch of single rows, one row per block is still batch x m scores.
    batch = m = 512
    query, key, value = np.full((batch, 1, 1), 0.5), np.full((m, 1), 0.25), np.ones((m, 1))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_common, "BLOCK_ELEMENTS", 1024)
        result, peak = peak_bytes(lambda: attention(query, key, value, include={"logsumexp"}))
    # Every score is 0.5 * 0.25 * scale 1: uniform weights over values that are all 1.
    np.testing.assert_array_equal(result.output, np.ones((batch, 1, 1)))
    np.testing.assert_allclose(result.logsumexp, 0.125 + math.log(m), rtol=1e-15)
    # Unblocked the scores alone take batch * m * 8 = 2 MB; in blocks a few times 1024 * 8 bytes.
    assert peak < 16 * 1024 * 8


def test_many_empty_rows_are_counted_and_only_the_first_listed() -> None:
    query = np.broadcast_to(np.zeros(1), (2048, 2048, 1))  # a view: 4,194,304 rows without 32 MB of input
    tracemalloc.start()
    try:
        with pytest.raises(EmptyRowError) as raised:
            attention(query, [[1.0]], [[1.0]], AttentionOptions(mask=[False]))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20  # the flags take 4 MB; indexing every row took hundreds
    assert raised.value.count == 2048 * 2048
    assert raised.value.rows == [[0, column] for column in range(10)]
    assert raised.value.message.startswith(
        "4,194,304 query rows have no visible key; the first: [0, 0], [0, 1], [0, 2];"
    )
    assert "[0, 3]" not in raised.value.message


def test_empty_rows_error_lists_the_first_ten() -> None:
    rng = np.random.default_rng(6)
    mask = rng.random((4, 5, 6, 3)) < 0.4
    expected = ~mask.any(axis=-1)
    assert expected.sum() > 10
    with pytest.raises(EmptyRowError) as raised:
        attention(np.ones((4, 5, 6, 2)), np.ones((3, 2)), np.ones((3, 2)), AttentionOptions(mask=mask))
    assert raised.value.count == int(expected.sum())
    assert raised.value.rows == np.argwhere(expected)[:10].tolist()
    first = ", ".join(str(row) for row in raised.value.rows[:3])
    assert (
        f"{int(expected.sum()):,} query rows have no visible key; the first: {first};" in raised.value.message
    )
    result = attention(
        np.ones((4, 5, 6, 2)),
        np.ones((3, 2)),
        np.ones((3, 2)),
        AttentionOptions(mask=mask, empty_rows="zero"),
    )
    np.testing.assert_array_equal(result.empty_rows, np.argwhere(expected))


@pytest.mark.parametrize(
    ("query_shape", "key_shape", "mask", "expected"),
    [
        ((2,), (3, 2), None, np.empty((0, 0))),
        ((2,), (3, 2), [False, False, False], np.empty((1, 0))),
        ((2,), (4, 3, 2), None, np.empty((0, 1))),
        ((5, 2), (3, 2), None, np.empty((0, 1))),
        ((4, 5, 2), (3, 2), None, np.empty((0, 2))),
        ((4, 5, 2), (3, 2), [[False] * 3] + [[True] * 3] * 4, [[i, 0] for i in range(4)]),
    ],
)
def test_empty_rows_are_an_int64_array_of_row_indices(
    query_shape: tuple[int, ...], key_shape: tuple[int, ...], mask: Any, expected: Any
) -> None:
    value_shape = (*key_shape[:-1], 1)
    result = attention(
        np.ones(query_shape),
        np.ones(key_shape),
        np.ones(value_shape),
        AttentionOptions(mask=mask, empty_rows="zero"),
    )
    assert result.empty_rows.dtype == np.int64
    expected = np.asarray(expected, dtype=np.int64)
    assert result.empty_rows.shape == expected.shape
    np.testing.assert_array_equal(result.empty_rows, expected)


@pytest.mark.parametrize("scale", [1e300, -1e39])
def test_a_scale_beyond_float32_is_blamed(scale: float) -> None:
    with pytest.raises(NumericalOverflowError) as raised:
        attention([[1.0, 0.0]], [[1.0, 0.0]], [[1.0]], AttentionOptions(scale=scale), dtype=np.float32)
    assert raised.value.field == "scale"
    assert "scale" in raised.value.message
    assert "float64" in raised.value.message


def test_a_scale_that_underflows_float32_gives_uniform_weights() -> None:
    rng = np.random.default_rng(7)
    query, key, value = rng.normal(size=(2, 3, 4)) * 10, rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    mask = np.array([True, True, False, True, True])
    result = attention(
        query,
        key,
        value,
        AttentionOptions(mask=mask, scale=1e-50),
        include={"weights", "logsumexp"},
        dtype=np.float32,
    )
    # 1e-50 is 0 in float32: every visible score is 0.
    reference = reference_attention(
        query,
        np.broadcast_to(key, (2, 5, 4)),
        np.broadcast_to(value, (2, 5, 2)),
        mask=np.broadcast_to(mask, (2, 3, 5)),
        scale=0.0,
    )
    np.testing.assert_allclose(result.weights, reference.weights, rtol=1e-6)
    np.testing.assert_allclose(result.output, reference.output, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result.logsumexp, math.log(4), rtol=1e-6)
    double = attention(query, key, value, AttentionOptions(mask=mask, scale=1e-50))
    np.testing.assert_allclose(result.output, double.output, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("softcap", [3.5e38, 1e39, 1e308])
def test_a_softcap_beyond_float32_is_blamed(softcap: float) -> None:
    # It was cast to inf: inf / inf made the scores NaN, and the 422 blamed alibi_slopes, never sent.
    with pytest.raises(NumericalOverflowError) as raised:
        attention(
            [0.0, 1.0],
            [[1.0, 0.0], [0.0, 1.0]],
            [[6.0, 0.0], [0.0, 3.0]],
            AttentionOptions(softcap=softcap),
            dtype=np.float32,
        )
    assert raised.value.field == "softcap"
    assert "softcap" in raised.value.message
    assert "float64" in raised.value.message
    # float64 holds it: a cap that large changes nothing (the worked example's weights)
    double = attention(
        [0.0, 1.0],
        [[1.0, 0.0], [0.0, 1.0]],
        [[6.0, 0.0], [0.0, 3.0]],
        AttentionOptions(softcap=softcap),
        include={"weights"},
    )
    assert double.weights is not None
    np.testing.assert_allclose(double.weights, [0.3302, 0.6698], atol=5e-5)


@pytest.mark.parametrize("softcap", [1e-300, 1e-46])
def test_a_softcap_that_underflows_float32_gives_uniform_weights(softcap: float) -> None:
    # 0 in float32: every capped score lies within ±0. A zero score (the worked example's first) gave 0 / 0.
    query, key, value = (
        [0.0, 1.0],
        [[1.0, 0.0], [0.0, 1.0], [2.0, -3.0]],
        [[6.0, 0.0], [0.0, 3.0], [3.0, 3.0]],
    )
    mask = [True, True, False]
    result = attention(
        query, key, value, AttentionOptions(softcap=softcap, mask=mask), include={"weights"}, dtype=np.float32
    )
    assert result.weights is not None
    np.testing.assert_allclose(result.weights, [0.5, 0.5, 0.0], rtol=1e-6)
    np.testing.assert_allclose(result.output, [3.0, 1.5], rtol=1e-6)
    # float64 computes the cap itself: scores within ±1e-300 (or ±1e-46) of 0 round to the same weights
    double = attention(query, key, value, AttentionOptions(softcap=softcap, mask=mask), include={"weights"})
    assert double.weights is not None
    np.testing.assert_allclose(double.weights, [0.5, 0.5, 0.0], rtol=1e-12)


def test_an_underflowed_softcap_keeps_the_nan_of_a_key_beyond_float32() -> None:
    # 1e39 is inf in float32, and 0 · inf is NaN: the 0 bound must not hide it (it was served: [3, 1.5]).
    with pytest.raises(NumericalOverflowError) as raised:
        attention(
            [0.0, 1.0],
            [[1e39, 1.0], [0.0, 1.0]],
            [[6.0, 0.0], [0.0, 3.0]],
            AttentionOptions(softcap=1e-46),
            dtype=np.float32,
        )
    assert raised.value.field == "key"


@pytest.mark.parametrize("field", ["query", "key"])
def test_an_input_beyond_float32_is_blamed_under_a_softcap_too(field: str) -> None:
    # 1e39 is inf once cast to float32: the softcap bounded its scores to 30 and the answer was a 200. A
    # product of finite inputs that overflows is still bounded (the softcap's purpose).
    inputs = {"query": [[1.0]], "key": [[1.0], [2.0]]} | {
        field: [[1e39]] if field == "query" else [[1e39], [2.0]]
    }
    with pytest.raises(NumericalOverflowError) as raised:
        attention(
            inputs["query"], inputs["key"], [[1.0], [0.0]], AttentionOptions(softcap=30.0), dtype=np.float32
        )
    assert raised.value.field == field
    bounded = attention(
        [[1e30]],
        [[1e30], [2.0]],
        [[1.0], [0.0]],
        AttentionOptions(softcap=30.0),
        include={"scores"},
        dtype=np.float32,
    )
    assert bounded.scores is not None
    assert bounded.scores[0, 0] == np.float32(30.0)
