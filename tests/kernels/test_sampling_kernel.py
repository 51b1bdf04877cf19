"""Sampling: the truncated distribution against Hugging Face's warpers, the draws against it, and the
reproducibility of the draws (the algorithm in service/kernels/_sampling.py)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from service.kernels import MAX_SEED, KernelError, ShapeError, Truncation, _sampling, sample, softmax
from service.kernels._sampling import draw, uniforms
from service.kernels._truncation import portable_exp
from tests.kernel_calls import with_truncation
from tests.references import (
    reference_sample,
    reference_warpers_row,
    sampling_cases,
    warpers_are_ambiguous,
)

FAST = settings(max_examples=60, deadline=None)
TINY = float(np.finfo(np.float64).tiny)

# Significance of the chi-square tests. The seeds are fixed, so each test's outcome is fixed too: a
# failure is a real change in the draws, never bad luck on one run.
SIGNIFICANCE = 1e-3
SEEDS = (0, 1, 2, 3, 42, 2024, 123456789, MAX_SEED)


# --- portable_exp: the same bits everywhere, within an ulp of the truth -----------------------------


def test_portable_exp_is_within_one_ulp_of_math_exp() -> None:
    rng = np.random.default_rng(7)
    x = np.concatenate(
        [-rng.random(20_000) * 746, -rng.random(5_000) * 1e-3, -rng.random(5_000) * 40, [-709.78, -745.13]]
    )
    result = portable_exp(x)
    expected = np.array([math.exp(value) for value in x])
    normal = expected >= TINY
    np.testing.assert_allclose(result[normal], expected[normal], rtol=np.finfo(np.float64).eps, atol=0)
    # Subnormal results hold fewer digits: within one unit of the smallest subnormal.
    assert np.abs(result[~normal] - expected[~normal]).max() <= 5e-324


def test_portable_exp_edges() -> None:
    assert portable_exp(np.array([0.0, -0.0, -np.inf, -746.0, -1e300])).tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert portable_exp(np.array([[-1.0]])).shape == (1, 1)
    # Monotone across the range-reduction seams, where a polynomial could step backwards.
    seams = np.array([(k + 0.5) * math.log(2) for k in range(-40, 0)])
    around = np.sort(np.concatenate([np.nextafter(seams, -np.inf), seams, np.nextafter(seams, 0)]))
    assert (np.diff(portable_exp(around)) >= 0).all()


# --- uniforms and the inverse-CDF draw ---------------------------------------------------------------


def test_uniforms_are_numpys_random_on_pcg64() -> None:
    for seed in (0, 5, MAX_SEED):
        expected = np.random.Generator(np.random.PCG64(seed)).random(1000)
        assert uniforms(seed, (10, 100)).reshape(-1).tobytes() == expected.tobytes()


def test_a_draw_on_a_boundary_goes_to_the_token_after_it() -> None:
    weights = np.array([[1.0, 1.0], [1.0, 1.0]])
    # c = [1, 2]: u = 0.5 lands exactly on c[0] = 1 and draws token 1; just below draws token 0.
    below = np.nextafter(0.5, 0.0)
    assert draw(weights, np.array([[0.5, below], [0.0, 1 - 2**-53]])).tolist() == [[1, 0], [0, 1]]


def test_a_token_of_probability_zero_is_never_drawn_even_on_its_boundary() -> None:
    weights = np.array([[0.0, 1.0, 0.0, 0.0, 1.0, 0.0]])  # c = [0, 1, 1, 1, 2, 2]
    edges = np.array([[0.0, 0.5, np.nextafter(0.5, 0.0), 1 - 2**-53]])
    assert draw(weights, edges).tolist() == [[1, 4, 1, 4]]


def test_one_token_distributions() -> None:
    assert draw(np.array([[1.0]]), uniforms(3, (1, 50))).tolist() == [[0] * 50]
    result = sample([[2.0, 7.0, 1.0]], truncation=Truncation(top_k=1), num_samples=20, seed=9)
    assert result.tokens.tolist() == [[1] * 20]
    assert result.logprobs.tolist() == [[0.0] * 20]
    assert sample([[4.0]], num_samples=3, seed=1).tokens.tolist() == [[0, 0, 0]]


# --- the truncated distribution: the same as softmax's and as Hugging Face's warpers ----------------


def _options(case: dict[str, Any]) -> dict[str, Any]:
    return {key: case[key] for key in ("temperature", "top_k", "top_p", "min_p")}


@FAST
@given(sampling_cases())
def test_kept_tokens_are_what_hugging_faces_warpers_keep(case: dict[str, Any]) -> None:
    logits, mask = case["logits"], case["mask"]
    visible = np.ones(logits.shape, dtype=bool) if mask is None else mask
    rows = list(np.ndindex(*logits.shape[:-1]))
    for index in rows:
        assume(not warpers_are_ambiguous(list(logits[index]), visible=list(visible[index]), **_options(case)))
    shown = softmax(logits, mask=mask, **with_truncation(_options(case)))
    for index in rows:
        probs, _ = reference_warpers_row(list(logits[index]), visible=list(visible[index]), **_options(case))
        expected = np.array(probs)
        clear = (expected == 0) | (expected >= TINY)  # a subnormal probability may round either way
        np.testing.assert_array_equal((shown.probabilities[index] > 0)[clear], (expected > 0)[clear])
        np.testing.assert_allclose(shown.probabilities[index], expected, rtol=1e-12, atol=1e-300)


@FAST
@given(sampling_cases())
def test_draws_only_tokens_the_distribution_keeps(case: dict[str, Any]) -> None:
    logits, mask = case["logits"], case["mask"]
    shown = softmax(logits, mask=mask, **with_truncation(_options(case)))
    result = sample(logits, mask=mask, num_samples=64, seed=11, **with_truncation(_options(case)))
    assert result.tokens.shape == (*logits.shape[:-1], 64)
    assert result.tokens.dtype == np.int64
    drawn_probabilities = np.take_along_axis(shown.probabilities, result.tokens, axis=-1)
    assert (drawn_probabilities > 0).all()
    if mask is not None:
        assert np.take_along_axis(np.broadcast_to(mask, logits.shape), result.tokens, axis=-1).all()
    expected_logprobs = np.take_along_axis(shown.log_probabilities, result.tokens, axis=-1)
    np.testing.assert_array_equal(result.logprobs, expected_logprobs)


def test_temperature_zero_is_the_argmax_lowest_index_on_ties() -> None:
    logits = np.array([[1.0, 3.0, 2.0, 3.0], [0.5, -1.0, 0.25, 0.0], [-2.0, -2.0, -2.0, -2.0]])
    result = sample(logits, temperature=0, num_samples=5, seed=4)
    assert result.tokens.tolist() == [[1] * 5, [0] * 5, [0] * 5]
    # The log-probability under the distribution softmax shows: tied maxima share it.
    np.testing.assert_allclose(result.logprobs[:, 0], [math.log(0.5), 0.0, math.log(0.25)], rtol=1e-15)
    masked = sample(logits, temperature=0, mask=[False, False, True, True], seed=4)
    assert masked.tokens.tolist() == [[3], [2], [2]]


def test_filters_apply_in_order_each_on_what_the_last_left() -> None:
    # probabilities at T=1 of [3, 2, 1, 0, -5]: 0.6364, 0.2341, 0.0861, 0.0317, 0.0002
    logits = [3.0, 2.0, 1.0, 0.0, -5.0]
    kept = lambda **options: (softmax(logits, **with_truncation(options)).probabilities > 0).tolist()  # noqa: E731
    assert kept(top_k=4) == [True, True, True, True, False]
    assert kept(top_k=4, top_p=0.9) == [True, True, True, False, False]  # 0.6640 + 0.2443 of the 4
    assert kept(top_k=4, top_p=0.9, min_p=0.3) == [True, True, False, False, False]  # 0.0861/0.6364 < 0.3
    assert kept(min_p=0.1) == [True, True, True, False, False]
    assert kept(min_p=1.0) == [True, False, False, False, False]
    assert kept(min_p=0.0) == [True] * 5
    # min_p compares with the largest probability, so it keeps ties with the maximum.
    assert (softmax([2.0, 2.0, 0.0], truncation=Truncation(min_p=1.0)).probabilities > 0).tolist() == [
        True,
        True,
        False,
    ]


# --- the draws follow the distribution ---------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_draws_follow_the_truncated_distribution(seed: int) -> None:
    logits = np.array([[2.0, 1.5, 0.3, -1.0, 0.9, -4.0, 1.5, 0.0], [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]])
    options = {"temperature": 0.8, "top_k": 7, "top_p": 0.95, "min_p": 0.05}
    shown = softmax(logits, **with_truncation(options))
    result = sample(logits, num_samples=20_000, seed=seed, **with_truncation(options))
    for row in range(2):
        kept = shown.probabilities[row] > 0
        counts = np.bincount(result.tokens[row], minlength=8)
        assert (counts[~kept] == 0).all()
        statistic = chisquare(counts[kept], 20_000 * shown.probabilities[row][kept])
        assert statistic.pvalue > SIGNIFICANCE, (seed, row, counts, statistic)


def test_rows_and_samples_are_independent_draws() -> None:
    # 40,000 draws from a fair pair: every (row, sample) pair of neighbours is uniform over 4 outcomes.
    result = sample(np.zeros((200, 2)), num_samples=200, seed=5)
    pairs = result.tokens[:, :-1] * 2 + result.tokens[:, 1:]
    assert chisquare(np.bincount(pairs.reshape(-1), minlength=4)).pvalue > SIGNIFICANCE
    across_rows = result.tokens[:-1, 0] * 2 + result.tokens[1:, 0]
    assert chisquare(np.bincount(across_rows, minlength=4)).pvalue > SIGNIFICANCE


def test_draws_split_into_blocks_of_rows_by_their_count_are_the_same_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 100,000 draws a row: blocks of 10 rows by the draws, where the logits alone (3 a row) made one block
    logits = np.random.default_rng(3).standard_normal((25, 3))
    blocked = sample(logits, num_samples=100_000, seed=11)
    monkeypatch.setattr(_sampling, "rows_per_block", lambda elements_per_row, total_rows: total_rows)
    whole = sample(logits, num_samples=100_000, seed=11)
    np.testing.assert_array_equal(blocked.tokens, whole.tokens)
    np.testing.assert_array_equal(blocked.logprobs, whole.logprobs)  # bit for bit: the same arithmetic


# --- reproducibility ---------------------------------------------------------------------------------

# Fixed (request, seed) → tokens, committed. These are the numbers a client relies on: they must come out
# the same on every machine, Python and SIMD path (CI runs them with NumPy's dispatch narrowed too).
REPRODUCIBLE = [
    (
        {"logits": [[1.0, 2.0, 3.0, 0.5], [0.0, 0.0, 0.0, 0.0]], "num_samples": 8, "seed": 0},
        [[2, 1, 0, 0, 2, 2, 2, 2], [2, 3, 3, 0, 3, 0, 2, 0]],
    ),
    (
        {
            "logits": [[0.3, -1.2, 2.2, 2.2, 0.0, 1.7]],
            "temperature": 0.7,
            "top_k": 5,
            "top_p": 0.9,
            "min_p": 0.1,
            "num_samples": 10,
            "seed": 2024,
        },
        [[3, 2, 2, 3, 5, 2, 2, 2, 2, 2]],
    ),
    (
        {
            "logits": [[5.0, 4.0, 3.0, 2.0, 1.0]],
            "temperature": 2.5,
            "mask": [True, False, True, True, True],
            "num_samples": 12,
            "seed": MAX_SEED,
        },
        [[3, 2, 2, 0, 0, 0, 2, 0, 0, 3, 0, 0]],
    ),
]


@pytest.mark.parametrize(("request_", "expected"), REPRODUCIBLE)
def test_a_seed_fixes_the_tokens(request_: dict[str, Any], expected: list[list[int]]) -> None:
    options = dict(request_)
    logits = options.pop("logits")
    assert sample(logits, **with_truncation(options)).tokens.tolist() == expected
    # The committed tokens are the documented algorithm's, not just this code's: a plain loop agrees.
    assert reference_sample(logits, **options) == expected


@FAST
@given(sampling_cases(), st.integers(0, MAX_SEED))
def test_draws_are_the_documented_algorithm(case: dict[str, Any], seed: int) -> None:
    size = case["logits"].shape[-1]
    logits = case["logits"].reshape(-1, size)
    mask = None if case["mask"] is None else case["mask"].reshape(-1, size)
    visible = np.ones(logits.shape, dtype=bool) if mask is None else mask
    for row, row_visible in zip(logits, visible, strict=True):
        assume(not warpers_are_ambiguous(row.tolist(), visible=row_visible.tolist(), **_options(case)))
    result = sample(logits, mask=mask, num_samples=5, seed=seed, **with_truncation(_options(case)))
    expected = reference_sample(logits.tolist(), mask=mask, num_samples=5, seed=seed, **_options(case))
    assert result.tokens.tolist() == expected


def test_a_hard_case_draws_the_same_tokens_with_numpys_dispatch_narrowed() -> None:
    """Logits whose np.exp differs in the last bit between AVX-512 and AVX2 still draw the same tokens.

    The child process runs with NumPy's AVX-512 paths disabled (``NPY_DISABLE_CPU_FEATURES``, the groups
    NumPy 2.4 accepts); on a machine without AVX-512 both runs take the same path and agree trivially.
    """
    script = (
        "import json, numpy as np\n"
        "from service.kernels import Truncation, sample\n"
        "logits = np.random.default_rng(3).normal(size=(64, 257)) * 4\n"
        "truncation = Truncation(top_p=0.97, min_p=0.001)\n"
        "r = sample(logits, temperature=0.9, truncation=truncation, num_samples=64, seed=77)\n"
        "print(json.dumps(r.tokens.tolist()))\n"
    )
    environment = {**os.environ, "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"}
    child = subprocess.run(
        [sys.executable, "-c", script],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    logits = np.random.default_rng(3).normal(size=(64, 257)) * 4
    here = sample(
        logits, truncation=Truncation(top_p=0.97, min_p=0.001), temperature=0.9, num_samples=64, seed=77
    )
    assert json.loads(child.stdout) == here.tokens.tolist()


def test_tokens_and_kept_sets_do_not_depend_on_np_exp(monkeypatch: pytest.MonkeyPatch) -> None:
    """np.exp's last bit varies with the CPU, so no decision may rest on it: even an np.exp that is off
    by up to 1e-3 leaves every token and every kept set as it was (only the log-probabilities move)."""
    logits = np.random.default_rng(12).normal(size=(50, 40)) * 2
    options = {"temperature": 0.8, "top_k": 30, "top_p": 0.9, "min_p": 0.02}
    tokens = sample(logits, num_samples=200, seed=3, **with_truncation(options)).tokens
    kept = softmax(logits, **with_truncation(options)).probabilities > 0
    true_exp = np.exp

    def wrong_exp(values: Any, *args: Any, **kwargs: Any) -> Any:
        result = true_exp(values, *args, **kwargs)
        return result * (1 + 1e-3 * np.cos(np.arange(np.size(result)))).reshape(np.shape(result))

    monkeypatch.setattr(np, "exp", wrong_exp)
    moved = sample(logits, num_samples=200, seed=3, **with_truncation(options))
    assert moved.tokens.tolist() == tokens.tolist()
    assert ((softmax(logits, **with_truncation(options)).probabilities > 0) == kept).all()


def test_different_seeds_draw_differently_and_a_missing_seed_is_fresh_and_returned() -> None:
    logits = np.zeros((1, 1000))
    first, second = sample(logits, num_samples=20, seed=1), sample(logits, num_samples=20, seed=2)
    assert first.tokens.tolist() != second.tokens.tolist()
    fresh = sample(logits, num_samples=20)
    assert 0 <= fresh.seed <= MAX_SEED
    assert sample(logits, num_samples=20, seed=fresh.seed).tokens.tolist() == fresh.tokens.tolist()
    assert sample(logits, num_samples=20).seed != fresh.seed  # 2^-53 odds of a false alarm


def test_shapes_broadcast_masks_and_batch_dims() -> None:
    logits = np.random.default_rng(0).normal(size=(2, 3, 5))
    result = sample(logits, mask=[True, True, False, True, True], num_samples=4, seed=8)
    assert result.tokens.shape == result.logprobs.shape == (2, 3, 4)
    assert not (result.tokens == 2).any()
    # A row's draws depend on its position in the uniform stream, not on the rows around it.
    alone = sample(logits.reshape(6, 5), mask=[True, True, False, True, True], num_samples=4, seed=8)
    assert alone.tokens.reshape(2, 3, 4).tolist() == result.tokens.tolist()


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"seed": -1}, "seed"),
        ({"seed": MAX_SEED + 1}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"min_p": 1.5}, "min_p"),
        ({"min_p": -0.1}, "min_p"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_k": 0}, "top_k"),
        ({"num_samples": 0}, "num_samples"),
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": math.inf}, "temperature"),
    ],
)
def test_bad_options_name_the_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(KernelError) as raised:
        sample([1.0, 2.0], **with_truncation(options))
    assert raised.value.field == field


def test_bad_shapes_name_the_field() -> None:
    with pytest.raises(ShapeError) as raised:
        sample([[1.0, 2.0]], mask=[True, False, True])
    assert raised.value.field == "mask"
    with pytest.raises(ShapeError):
        sample(np.zeros((2, 0)))
