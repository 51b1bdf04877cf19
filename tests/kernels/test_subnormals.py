"""The products of attention and the multi-head layer flush subnormal numbers to zero (issue #18: arithmetic
on them is 30-160× slower, so a 50 KB body took 10 s of CPU whatever the work limits said); the thread's
floating-point environment is IEEE again afterwards, also when the kernel raises."""

from __future__ import annotations

import numpy as np
import pytest

from service.kernels import (
    AttentionOptions,
    MultiHeadWeights,
    NumericalOverflowError,
    attention,
    multi_head_attention,
)
from service.kernels._common import FLUSHES_SUBNORMALS

pytestmark = pytest.mark.skipif(not FLUSHES_SUBNORMALS, reason="flush-to-zero is set on x86-64 glibc only")

SUBNORMAL = 1e-310  # below float64's smallest normal number, 2.2e-308


def ieee_arithmetic_is_back() -> bool:
    return bool((np.array([SUBNORMAL]) * 1.0)[0] == SUBNORMAL)


def test_weights_that_underflow_are_zero_not_subnormal() -> None:
    # scores 0 and -710 (scale 1): the second weight is exp(-710) = 4.5e-309, subnormal
    result = attention(
        [1.0], [[0.0], [-710.0]], [[1.0], [2.0]], AttentionOptions(scale=1.0), include=frozenset({"weights"})
    )
    assert result.weights is not None
    assert result.weights.tolist() == [1.0, 0.0]
    assert result.output.tolist() == [1.0]
    assert ieee_arithmetic_is_back()


def test_subnormal_values_count_as_zero_in_the_output() -> None:
    result = attention([[0.0]], [[0.0], [0.0]], [[SUBNORMAL], [SUBNORMAL]])
    assert result.output.tolist() == [[0.0]]  # IEEE arithmetic gives 1e-310
    assert ieee_arithmetic_is_back()


def test_projections_whose_products_underflow_are_zero() -> None:
    # 1e-160 × 1e-160 = 1e-320, subnormal: flushed, so the projected query is exactly 0
    tiny = [[1e-160]]
    weights = MultiHeadWeights(w_q=tiny, w_k=tiny, w_v=tiny, w_o=[[1.0]], num_heads=1)
    result = multi_head_attention([[1e-160]], weights=weights, include={"q"})
    assert result.q is not None
    assert result.q.tolist() == [[[0.0]]]
    assert ieee_arithmetic_is_back()


def test_the_environment_is_restored_when_the_kernel_raises() -> None:
    with pytest.raises(NumericalOverflowError):
        attention([[1.0]], [[1.0]], [[1e39]], dtype=np.float32)  # 1e39 is beyond float32: a 422
    assert ieee_arithmetic_is_back()


def test_a_subnormal_softcap_bounds_every_score_to_zero() -> None:
    # Every score lies within ±5e-324, so the two keys weigh alike. Read as 0 by the flush, the softcap would
    # divide by 0 (NaN, a 500 that schemathesis found): below the normal range it is 0 in the plan.
    result = attention(
        [0.0, 1.0],
        [[1.0, 0.0], [0.0, 1.0]],
        [[6.0, 0.0], [0.0, 3.0]],
        AttentionOptions(softcap=5e-324),
        include=frozenset({"scores"}),
    )
    assert result.output.tolist() == [3.0, 1.5]
    assert result.scores is not None
    assert result.scores.tolist() == [0.0, 0.0]
    assert ieee_arithmetic_is_back()


def test_scores_below_the_normal_range_are_flushed_too() -> None:
    # A scale of 1e-310 made every score subnormal, and the steps after the products (scaling, softcap,
    # softmax) ran on them 12× slower: the Transformer block's worst case took 7.8 s of CPU instead of 0.6.
    # The scores are 0 (IEEE: [0, 1e-310]); the weights are the same as IEEE's to the last bit.
    result = attention(
        [0.0, 1.0],
        [[1.0, 0.0], [0.0, 1.0]],
        [[6.0, 0.0], [0.0, 3.0]],
        AttentionOptions(scale=SUBNORMAL, softcap=30.0),
        include=frozenset({"scores", "weights"}),
    )
    assert result.scores is not None
    assert result.weights is not None
    assert result.scores.tolist() == [0.0, 0.0]
    assert result.weights.tolist() == [0.5, 0.5]
    assert result.scale == SUBNORMAL  # the scale used is the one asked for
    assert ieee_arithmetic_is_back()


@pytest.mark.parametrize("softcap", [1e300, 1e308])
def test_a_softcap_far_above_the_scores_leaves_them_as_they_are(softcap: float) -> None:
    # scores / softcap falls below the normal range, where the flush reads 0: every score came back 0.
    # softcap · tanh(s / softcap) is s to the last bit there, as IEEE arithmetic gives.
    args = ([0.0, 1.0], [[1.0, 0.0], [0.0, 1.0]], [[6.0, 0.0], [0.0, 3.0]])
    capped = attention(*args, AttentionOptions(softcap=softcap), include=frozenset({"scores", "weights"}))
    plain = attention(*args, include=frozenset({"scores", "weights"}))
    assert capped.scores is not None
    assert plain.scores is not None
    assert capped.scores.tolist() == plain.scores.tolist()
    np.testing.assert_allclose(capped.output, [1.9814, 2.0093], atol=5e-5)  # the worked example
    assert ieee_arithmetic_is_back()


@pytest.mark.parametrize(
    ("big", "scale", "dtype"), [(1.3e154, 2e-308, np.float64), (1.8e19, 1.1e-38, np.float32)]
)
def test_a_subnormal_scale_multiplies_as_itself(big: float, scale: float, dtype: type) -> None:
    # The flush reads a subnormal operand as 0: scores of ±big² · scale (±3.38, normal) came back 0, and the
    # weights [0.5, 0.5]. The scale is applied as its normal multiple by 2**64, then 2**-64.
    result = attention(
        [[big]],
        [[big], [-big]],
        [[1.0], [0.0]],
        AttentionOptions(scale=scale),
        include=frozenset({"scores", "weights"}),
        dtype=dtype,
    )
    score = big * big * scale  # in float64, where it is exact enough
    assert result.scores is not None
    assert result.weights is not None
    np.testing.assert_allclose(result.scores[0], [score, -score], rtol=1e-6)
    first = 1.0 / (1.0 + np.exp(-2 * score))
    np.testing.assert_allclose(result.weights[0], [first, 1.0 - first], rtol=1e-5)
    assert ieee_arithmetic_is_back()


def test_one_context_is_entered_once() -> None:
    from service.kernels._common import flush_subnormals

    context = flush_subnormals()
    with context, pytest.raises(RuntimeError, match="entered once"), context:
        pass
    assert ieee_arithmetic_is_back()
