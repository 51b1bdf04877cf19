"""Attention's options (GQA, window, ALiBi, softcap, rotary) alone and combined, against loop references."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.kernels import (
    AttentionOptions,
    EmptyRowError,
    KernelError,
    NumericalOverflowError,
    Rotary,
    ShapeError,
    attention,
)
from tests.layer_references import (
    RopeSpec,
    option_cases,
    reference_attention_options,
    reference_for_options,
    reference_rope,
)

TOLERANCE = {"rtol": 1e-12, "atol": 1e-12}
CASES = settings(max_examples=150, deadline=None)


def rotary_of(spec: RopeSpec | None) -> Rotary | None:
    if spec is None:
        return None
    return Rotary(
        base=spec.base,
        style=spec.style,
        dim=spec.dim,
        query_offset=spec.query_offset,
        key_offset=spec.key_offset,
    )  # type: ignore[arg-type]


def run_case(case: dict[str, Any], **extra: Any) -> Any:
    return attention(
        case["query"],
        case["key"],
        case["value"],
        AttentionOptions(
            mask=case["kernel_mask"],
            bias=case["bias"],
            causal=case["causal"],
            causal_alignment=case["alignment"],
            scale=case["scale"],
            enable_gqa=case["gqa"],
            window=case["window"],
            alibi_slopes=case["kernel_slopes"],
            softcap=case["softcap"],
            rotary=rotary_of(case["rope"]),
            empty_rows="zero",
        ),
        **extra,
    )


@CASES
@given(option_cases())
def test_every_combination_matches_the_loop_reference(case: dict[str, Any]) -> None:
    result = run_case(case, include={"weights", "scores", "logsumexp"})
    expected = reference_for_options(case)
    np.testing.assert_allclose(result.output, expected.output, **TOLERANCE)
    np.testing.assert_allclose(result.weights, expected.weights, **TOLERANCE)
    hidden = np.isnan(expected.scores)
    np.testing.assert_array_equal(np.isneginf(result.scores), hidden)
    np.testing.assert_allclose(result.scores[~hidden], expected.scores[~hidden], **TOLERANCE)
    assert result.empty_rows.tolist() == np.argwhere(expected.empty).tolist()


@settings(max_examples=60, deadline=None)
@given(option_cases())
def test_output_only_blocks_agree_with_the_materialized_path(case: dict[str, Any]) -> None:
    # Without weights the kernel works in blocks of rows (and grouped heads): one row per block here.
    whole = run_case(case, include={"weights"})
    blocked = run_case(case, block_rows=1)
    np.testing.assert_allclose(blocked.output, whole.output, rtol=1e-13, atol=1e-14)


@settings(max_examples=60, deadline=None)
@given(option_cases())
def test_float32_is_close_to_float64(case: dict[str, Any]) -> None:
    double = run_case(case, include={"weights"})
    single = run_case(case, include={"weights"}, dtype=np.float32)
    assert single.output.dtype == np.float32
    np.testing.assert_allclose(single.weights, double.weights, rtol=2e-4, atol=2e-5)


def test_grouped_query_heads_read_their_key_value_head() -> None:
    # PyTorch's semantics: query head i reads key/value head i // (H_q / H_kv); the same as repeating each
    # key/value head H_q / H_kv times (repeat_interleave), written out here with np.repeat.
    rng = np.random.default_rng(1)
    query, key, value = (
        rng.normal(size=(2, 6, 3, 4)),
        rng.normal(size=(2, 2, 5, 4)),
        rng.normal(size=(2, 2, 5, 3)),
    )
    grouped = attention(
        query, key, value, AttentionOptions(enable_gqa=True, causal=True), include={"weights"}
    )
    repeated = attention(
        query, np.repeat(key, 3, axis=-3), np.repeat(value, 3, axis=-3), AttentionOptions(causal=True)
    )
    np.testing.assert_allclose(grouped.output, repeated.output, rtol=1e-13)
    # Multi-query attention: one key/value head for all.
    mqa = attention(query, key[:, :1], value[:, :1], AttentionOptions(enable_gqa=True))
    np.testing.assert_allclose(mqa.output, attention(query, key[:, :1], value[:, :1]).output, rtol=1e-13)


def test_a_window_hides_keys_outside_the_band() -> None:
    rng = np.random.default_rng(2)
    query, key, value = rng.normal(size=(4, 3)), rng.normal(size=(6, 3)), rng.normal(size=(6, 2))
    result = attention(
        query, key, value, AttentionOptions(window=(1, 0)), include={"weights"}
    )  # lower_right: i' = i + 2
    visible = result.weights > 0
    expected = [[j in (i + 1, i + 2) for j in range(6)] for i in range(4)]
    assert visible.tolist() == expected
    upper = attention(
        query, key, value, AttentionOptions(window=(0, 2), causal_alignment="upper_left"), include={"weights"}
    )
    assert (upper.weights > 0).tolist() == [[i <= j <= i + 2 for j in range(6)] for i in range(4)]


def test_alibi_adds_minus_slope_times_distance() -> None:
    query, key = np.zeros((1, 2, 1)), np.zeros((1, 3, 1))  # all scores 0 before ALiBi
    value = np.eye(3)
    result = attention(query, key, value, AttentionOptions(alibi_slopes=[0.5]), include={"scores", "weights"})
    # lower_right: query 0 sits at key position 1, query 1 at 2.
    np.testing.assert_allclose(result.scores[0], [[-0.5, 0.0, -0.5], [-1.0, -0.5, 0.0]], rtol=1e-15)
    expected = np.exp([[-0.5, 0, -0.5], [-1, -0.5, 0]])
    np.testing.assert_allclose(result.weights[0], expected / expected.sum(-1, keepdims=True), rtol=1e-13)


def test_softcap_bounds_the_scores() -> None:
    query, key, value = np.array([[100.0]]), np.array([[1.0], [-1.0]]), np.array([[1.0], [0.0]])
    result = attention(query, key, value, AttentionOptions(softcap=5.0, scale=1.0), include={"scores"})
    np.testing.assert_allclose(result.scores, [[5 * math.tanh(20), -5 * math.tanh(20)]], rtol=1e-15)
    # Soft-capping acts before the bias: a bias of 3 is added to the capped score.
    biased = attention(
        query, key, value, AttentionOptions(softcap=5.0, scale=1.0, bias=[[3.0, 0.0]]), include={"scores"}
    )
    np.testing.assert_allclose(biased.scores, [[5 * math.tanh(20) + 3, -5 * math.tanh(20)]], rtol=1e-15)


HUGE = 1.7e308  # [HUGE, HUGE] rotated to position 1 is [-5.1e307, 2.35e308]: beyond float64


@pytest.mark.parametrize("softcap", [None, 5.0])
def test_a_query_rotated_beyond_the_float_range_is_an_overflow_naming_query(softcap: float | None) -> None:
    # One query, two keys: under lower_right the query sits at position 1. With a soft-cap the overflowed
    # score used to be capped into a plausible answer (a 200 with weights [0.5, 0.5]).
    assert math.isinf(reference_rope([HUGE, HUGE], 1, base=10000.0, style="half", dim=2)[1])
    with pytest.raises(NumericalOverflowError, match="rotary") as error:
        attention(
            [[HUGE, HUGE]],
            [[1.0, 1.0], [1.0, 1.0]],
            [[1.0], [2.0]],
            AttentionOptions(rotary=Rotary(), softcap=softcap),
        )
    assert error.value.field == "query"


@pytest.mark.parametrize("softcap", [None, 5.0])
def test_a_key_rotated_beyond_the_float_range_is_an_overflow_naming_key(softcap: float | None) -> None:
    with pytest.raises(NumericalOverflowError, match="rotary") as error:
        attention(
            [[1.0, 1.0]],
            [[1.0, 1.0], [HUGE, HUGE]],
            [[1.0], [2.0]],
            AttentionOptions(rotary=Rotary(), softcap=softcap),
        )
    assert error.value.field == "key"


def test_a_float32_key_rotated_beyond_its_range_is_an_overflow() -> None:
    query, key = np.ones((1, 2), dtype=np.float32), np.array([[1.0, 1.0], [3e38, 3e38]], dtype=np.float32)
    with pytest.raises(NumericalOverflowError, match="float32") as error:
        attention(
            query,
            key,
            np.ones((2, 1)),
            AttentionOptions(rotary=Rotary(style="interleaved")),
            dtype=np.float32,
        )
    assert error.value.field == "key"


def test_a_hidden_key_beyond_float32_still_takes_no_part_with_rotary() -> None:
    # 1e39 is inf in float32 before any rotation; the mask hides that key from the only query.
    key = np.array([[1.0, 0.0], [1e39, 1e39]])
    result = attention(
        [[1.0, 0.0]],
        key,
        [[3.0], [5.0]],
        AttentionOptions(mask=[[True, False]], rotary=Rotary()),
        dtype=np.float32,
    )
    np.testing.assert_array_equal(result.output, [[3.0]])


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_rotary_scores_depend_on_the_distance_only(style: str) -> None:
    rng = np.random.default_rng(3)
    q_row, k_row = rng.normal(size=6), rng.normal(size=6)
    # The same query and key vectors at positions (p + 5, p): the score is the same for every p.
    scores = [
        attention(
            q_row[np.newaxis],
            k_row[np.newaxis],
            np.ones((1, 1)),
            AttentionOptions(rotary=Rotary(style=style, query_offset=p + 5, key_offset=p)),  # type: ignore[arg-type]
            include={"scores"},
        ).scores[0, 0]
        for p in (0, 7, 100, 12345)
    ]
    np.testing.assert_allclose(scores, scores[0], rtol=1e-10)
    rotated = attention(
        q_row[np.newaxis],
        k_row[np.newaxis],
        np.ones((1, 1)),
        AttentionOptions(
            rotary=Rotary(style=style, query_offset=5, key_offset=0),  # type: ignore[arg-type]
            scale=1.0,
        ),
        include={"scores"},
    ).scores[0, 0]
    q_rot = reference_rope(q_row.tolist(), 5, base=10000.0, style=style, dim=6)
    assert rotated == pytest.approx(sum(a * b for a, b in zip(q_rot, k_row, strict=True)), rel=1e-12)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"window": (-1, 0)}, "window"),
        ({"window": (0, 1, 2)}, "window"),
        ({"window": (1.5, None)}, "window"),
        ({"softcap": 0.0}, "softcap"),
        ({"softcap": -1.0}, "softcap"),
        ({"softcap": math.inf}, "softcap"),
        ({"rotary": Rotary(dim=3)}, "rotary.dim"),
        ({"rotary": Rotary(dim=6)}, "rotary.dim"),
        ({"rotary": Rotary(base=0.0)}, "rotary.base"),
        ({"rotary": Rotary(style="spiral")}, "rotary.style"),  # type: ignore[arg-type]
        ({"alibi_slopes": [0.5, 0.25, 0.1]}, "alibi_slopes"),
        ({"alibi_slopes": [math.nan, 0.25]}, "alibi_slopes"),
        # the last of the 3 query or 5 key positions past 2**53, where float64 no longer tells them apart
        ({"rotary": Rotary(query_offset=2**53 - 1)}, "rotary.query_offset"),
        ({"rotary": Rotary(key_offset=2**53 - 3)}, "rotary.key_offset"),
        ({"rotary": Rotary(key_offset=-(2**53) - 1)}, "rotary.key_offset"),
    ],
)
def test_bad_options_name_the_field(options: dict[str, Any], field: str) -> None:
    query, key, value = np.ones((2, 3, 4)), np.ones((2, 5, 4)), np.ones((2, 5, 2))
    with pytest.raises(KernelError) as error:
        attention(query, key, value, AttentionOptions(**options))
    assert error.value.field == field


def test_rotary_offsets_whose_positions_stay_exact_are_accepted_and_depend_on_distance_only() -> None:
    """The last positions within 2**53 are still exact: the same weights as at offset 0 (an attacker's
    2**53 with 3 keys answered other weights, two keys rotated as one)."""
    query, key = np.array([[0.0, 1.0]]), np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    value = np.eye(3)[:, :2]
    near_zero = attention(query, key, value, AttentionOptions(rotary=Rotary(query_offset=0, key_offset=0)))
    top = 2**53 - 2  # keys at 2**53 - 2 … 2**53
    near_top = attention(query, key, value, AttentionOptions(rotary=Rotary(query_offset=top, key_offset=top)))
    np.testing.assert_allclose(near_top.output, near_zero.output, rtol=1e-12, atol=1e-15)


def test_grouped_heads_must_divide() -> None:
    with pytest.raises(ShapeError) as error:
        attention(
            np.ones((3, 2, 4)), np.ones((2, 5, 4)), np.ones((2, 5, 4)), AttentionOptions(enable_gqa=True)
        )
    assert error.value.field == "key"
    assert "multiple" in error.value.message
    with pytest.raises(ShapeError) as error:
        attention(np.ones((2, 4)), np.ones((5, 4)), np.ones((5, 4)), AttentionOptions(enable_gqa=True))
    assert error.value.field == "query"
    with pytest.raises(ShapeError) as error:
        attention(
            np.ones((4, 2, 4)), np.ones((2, 5, 4)), np.ones((1, 5, 4)), AttentionOptions(enable_gqa=True)
        )
    assert error.value.field == "value"
    # Without the flag, head axes must broadcast as always.
    with pytest.raises(ShapeError):
        attention(np.ones((4, 2, 4)), np.ones((2, 5, 4)), np.ones((2, 5, 4)))


def test_a_window_that_empties_rows_is_blamed() -> None:
    # upper_left with a window reaching only forward: the last query rows of 4 over 2 keys see nothing.
    with pytest.raises(EmptyRowError) as error:
        attention(
            np.ones((4, 2)),
            np.ones((2, 2)),
            np.ones((2, 2)),
            AttentionOptions(window=(0, 0), causal_alignment="upper_left"),
        )
    assert error.value.field == "window"
    assert error.value.rows == [[2], [3]]
    with pytest.raises(EmptyRowError) as error:
        attention(
            np.ones((2, 2)),
            np.ones((2, 2)),
            np.ones((2, 2)),
            AttentionOptions(window=(0, None), mask=[[True, False], [True, False]]),
        )
    assert error.value.field == "mask"


# --- The KV cache: decoding the last k rows over the cache equals the last k rows of the full pass. ---


@settings(max_examples=80, deadline=None)
@given(option_cases(), st.integers(1, 5))
def test_decoding_over_a_cache_equals_the_last_rows_of_full_causal_attention(
    case: dict[str, Any], new_rows: int
) -> None:
    # Self-attention over the whole sequence: queries, keys and values for every position, causal.
    sequence = case["key"].shape[-2]
    new_rows = min(new_rows, sequence)
    heads = case["query"].shape[-3]
    rng = np.random.default_rng(int(sequence * 1000 + heads))
    query = rng.normal(size=(*case["query"].shape[:-2], sequence, case["query"].shape[-1]))
    options: dict[str, Any] = {
        "causal": True,
        "enable_gqa": case["gqa"],
        "window": case["window"],
        "alibi_slopes": case["kernel_slopes"],
        "softcap": case["softcap"],
        "rotary": None
        if case["rope"] is None
        else rotary_of(RopeSpec(case["rope"].base, case["rope"].style, case["rope"].dim)),
    }
    full = attention(query, case["key"], case["value"], AttentionOptions(**options), include={"weights"})
    # One decode step (or a chunk of k): the last k query rows over the full key/value cache, lower_right.
    step = attention(
        query[..., -new_rows:, :],
        case["key"],
        case["value"],
        AttentionOptions(**options, causal_alignment="lower_right"),
        include={"weights"},
    )
    np.testing.assert_allclose(step.output, full.output[..., -new_rows:, :], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(step.weights, full.weights[..., -new_rows:, :], rtol=1e-12, atol=1e-13)
    # And the loop reference says the same of the step.
    expected = reference_attention_options(
        query[..., -new_rows:, :],
        case["key"],
        case["value"],
        gqa=case["gqa"],
        slopes=case["slopes"],
        causal=True,
        window=case["window"],
        softcap=case["softcap"],
        rope=None
        if case["rope"] is None
        else RopeSpec(case["rope"].base, case["rope"].style, case["rope"].dim),
    )
    np.testing.assert_allclose(step.output, expected.output, **TOLERANCE)
