"""Truncating a distribution: top-k, top-p (nucleus) and min-p, in that order, each on what the last left.

Shared by ``softmax`` (which shows the truncated distribution) and ``sample`` (which draws from it), so
that the two can never disagree about which tokens survive.

The decisions are made on values computed only with correctly rounded IEEE-754 operations (+, −, ×,
comparisons, exact power-of-two scaling): :func:`portable_exp` instead of ``np.exp``, whose last bit
depends on the SIMD path NumPy dispatches to (AVX-512 and AVX2 machines round differently). A
cumulative sum is sequential (``np.cumsum``) and sorting compares exactly, so the same logits keep the
same tokens on every machine, and the same seed draws the same tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, TypeAlias, cast

import numpy as np
from numpy.typing import NDArray

from service.kernels._common import BoolArray, FloatArray, Range, check_finite_scalar, check_int

Float64Array: TypeAlias = NDArray[np.float64]

# exp(x) = 2^k · exp(r) with r = x − k·ln 2 and |r| ≤ ln(2)/2. ln 2 is split (Cody and Waite, as in
# fdlibm) into a head with 32 zero trailing bits, so that k·head is exact for |k| < 2^20, and a tail.
_LN2_HEAD = 6.93147180369123816490e-01
_LN2_TAIL = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e00
# Taylor coefficients 1/n! for n = 13 … 0: the remainder r^14/14! is below 4e-18 for |r| ≤ 0.347, far
# under half an ulp, so the error is the Horner rounding alone (a few ulps; measured in the tests).
_TAYLOR = tuple(1 / math.factorial(n) for n in range(13, -1, -1))
# exp(x) is 0 in float64 (below the smallest subnormal, 4.9e-324) for x < −745.14.
_EXP_UNDERFLOW = -746.0
# Elements per step of portable_exp: 128 KB of float64, so that its ~30 passes stay in the cache.
_CHUNK = 1 << 14


def portable_exp(values: FloatArray) -> Float64Array:
    """``exp(values)`` for ``values <= 0`` (−inf allowed) in float64, the same bits on every machine.

    Within one ulp of the true value (measured in the tests). Uses only ``rint``, +, −, × and powers of
    two built from their bits, each correctly rounded by IEEE 754, so no SIMD path or libm can change a
    bit of the result. About 10× the time of ``np.exp``; chunks that fit in the cache keep it there.
    """
    source = np.ascontiguousarray(values, dtype=np.float64)
    result = np.empty_like(source)
    flat_source, flat_result = source.reshape(-1), result.reshape(-1)
    for start in range(0, flat_source.size, _CHUNK):
        chunk = slice(start, start + _CHUNK)
        flat_result[chunk] = _portable_exp_chunk(flat_source[chunk])
    return result


def _portable_exp_chunk(values: Float64Array) -> Float64Array:
    x = np.maximum(values, _EXP_UNDERFLOW)  # −inf becomes a finite x whose exp is 0 all the same
    k = np.rint(x * _INV_LN2)
    r = x - k * _LN2_HEAD
    r -= k * _LN2_TAIL
    polynomial = np.full_like(r, _TAYLOR[0])
    for coefficient in _TAYLOR[1:]:
        polynomial *= r
        polynomial += coefficient
    # 2^k for k down to −1077 leaves the normal range, so scale in two steps of normal powers of two:
    # the first is exact, the second rounds once (into the subnormals when it must), as IEEE says.
    exponent = k.astype(np.int64)
    half = exponent // 2
    polynomial *= _power_of_two(half)
    polynomial *= _power_of_two(exponent - half)
    return polynomial


def _power_of_two(exponent: NDArray[np.int64]) -> Float64Array:
    """2.0**exponent for exponents in the normal range [−1022, 1023], assembled from the exponent bits."""
    bits = (exponent + 1023).astype(np.uint64) << np.uint64(52)
    return bits.view(np.float64)


@dataclass(frozen=True)
class Truncation:
    """Top-k, top-p and min-p, checked when made (None: that step is skipped); see :func:`truncate`.

    ``top_k >= 1``, ``top_p`` in (0, 1], ``min_p`` in [0, 1]: the ranges below are the one statement of
    these rules, which the typed requests and the contract take from here.
    """

    TOP_K: ClassVar[Range] = Range(minimum=1)
    TOP_P: ClassVar[Range] = Range(minimum=0, maximum=1, min_inclusive=False)
    MIN_P: ClassVar[Range] = Range(minimum=0, maximum=1)

    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: the checked, normalized values are set once, here
        if self.top_k is not None:
            set_(self, "top_k", self.TOP_K.check(check_int(self.top_k, field="top_k"), field="top_k"))
        if self.top_p is not None:
            top_p = check_finite_scalar(self.top_p, field="top_p")
            set_(self, "top_p", self.TOP_P.check(top_p, field="top_p"))
        if self.min_p is not None:
            min_p = check_finite_scalar(self.min_p, field="min_p")
            set_(self, "min_p", self.MIN_P.check(min_p, field="min_p"))


NO_TRUNCATION = Truncation()


def truncate(logits: FloatArray, scores: FloatArray, options: Truncation) -> BoolArray | None:
    """Which entries top-k, then top-p, then min-p keep over the last axis (None: all of them).

    ``logits`` are the masked logits (top-k compares them: exact, and a temperature keeps their order);
    ``scores`` are the tempered logits shifted so that each row's maximum is 0, -inf where hidden (as
    ``tempered_shift`` returns). Every step keeps each row's most probable entry, so no row is emptied.

    - top-k keeps every entry whose logit is at least the k-th largest: ties at the k-th value are all
      kept (Hugging Face's ``TopKLogitsWarper`` does the same: it removes what is *below* that value).
    - top-p keeps the smallest set of most probable entries whose mass reaches ``top_p``; entries of
      equal probability are taken lowest index first, so a tie at the edge of the nucleus keeps the
      first (Hugging Face's unstable sort leaves that choice open).
    - min-p keeps the entries whose probability is at least ``min_p`` × the largest one, as Hugging
      Face's ``MinPLogitsWarper`` and vLLM do. The ratio does not change when the distribution is
      renormalized, so min-p after top-p is the intersection of the two.
    """
    top_k, top_p, min_p = options.top_k, options.top_p, options.min_p
    keep: BoolArray | None = None
    if top_k is not None and top_k < logits.shape[-1]:
        # cast: NumPy's stubs lose the dtype of a float32-or-float64 union through np.partition.
        kth_largest = cast("FloatArray", np.partition(logits, logits.shape[-1] - top_k, axis=-1))[
            ..., -top_k, None
        ]
        keep = logits >= kth_largest
    if (top_p is None or top_p >= 1) and not min_p:
        return keep
    weights = kept_weights(scores, keep)
    if top_p is not None and top_p < 1:
        nucleus = _nucleus(weights, top_p)
        keep = nucleus if keep is None else keep & nucleus
        weights[~keep] = 0
    if min_p:
        # The largest weight is exp(0) = 1 exactly, so weight >= min_p is probability >= min_p × largest.
        large = weights >= min_p
        keep = large if keep is None else keep & large
    return keep


def kept_weights(scores: FloatArray, keep: BoolArray | None) -> Float64Array:
    """Unnormalized probabilities: ``portable_exp(scores)`` where kept, 0 elsewhere (the row max is 1)."""
    return portable_exp(scores if keep is None else np.where(keep, scores, -np.inf))


def _nucleus(weights: Float64Array, top_p: float) -> BoolArray:
    """The smallest set of largest weights whose sum reaches ``top_p`` of the row's total."""
    order = np.argsort(-weights, axis=-1, kind="stable")  # stable: the first index wins ties
    sorted_weights = np.take_along_axis(weights, order, axis=-1)
    # An entry is needed while the mass before it is still short of top_p; the largest has nothing
    # before it, so at least one is always kept. np.cumsum adds in order, the same on every machine.
    mass_before = np.zeros_like(sorted_weights)
    np.cumsum(sorted_weights[..., :-1], axis=-1, out=mass_before[..., 1:])
    total = mass_before[..., -1:] + sorted_weights[..., -1:]
    needed_sorted: BoolArray = mass_before < top_p * total
    needed = np.empty_like(needed_sorted)
    np.put_along_axis(needed, order, needed_sorted, axis=-1)
    return needed
