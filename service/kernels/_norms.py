"""Normalization over the feature axis: LayerNorm (Ba, Kiros and Hinton, 2016) and RMSNorm (Zhang and
Sennrich, 2019), as PyTorch's ``F.layer_norm`` and ``nn.RMSNorm`` compute them.

``layer``: ``(x − mean) / sqrt(var + eps) · weight + bias`` over the last axis, the variance being the
population one (divided by ``d``, not ``d − 1``). ``rms``: ``x / sqrt(mean(x²) + eps) · weight`` (no centring,
no bias). A constant row is no error for ``layer``: its centred values are exactly 0, so its output is
``bias``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from service.kernels._common import (
    DTypeArg,
    FloatArray,
    FloatDType,
    Range,
    all_finite,
    as_float_array,
    check_finite_scalar,
    flush_subnormals,
    overflow_error,
    resolve_float_dtype,
)
from service.kernels._errors import KernelError, ShapeError, format_shape

NormKind = Literal["layer", "rms"]
DEFAULT_EPS = (
    1e-5  # nn.LayerNorm's default (nn.RMSNorm's is the dtype's machine epsilon: pass it when wanted)
)


@dataclass(frozen=True)
class NormOptions:
    """How :func:`layer_norm` normalizes; checked when made.

    ``kind``: ``"layer"`` or ``"rms"``. ``weight [d]`` (default ones) scales each feature; ``bias [d]``
    (default zeros) shifts it, for ``"layer"`` only (RMSNorm has none). ``eps`` (> 0) is added to the
    variance (or the mean square) before the square root.
    """

    EPS: ClassVar[Range] = Range(minimum=0, min_inclusive=False)

    kind: NormKind = "layer"
    weight: ArrayLike | None = None
    bias: ArrayLike | None = None
    eps: float = DEFAULT_EPS

    def __post_init__(self) -> None:
        if self.kind not in ("layer", "rms"):
            raise KernelError(f"kind must be 'layer' or 'rms', got {self.kind!r}", field="kind")
        eps = check_finite_scalar(self.eps, field="eps")
        object.__setattr__(self, "eps", self.EPS.check(eps, field="eps"))
        if self.kind == "rms" and self.bias is not None:
            raise KernelError("bias is for kind layer: RMSNorm scales by weight only", field="bias")


DEFAULT_NORM = NormOptions()


def norm_shape(x_shape: tuple[int, ...], options: NormOptions) -> int:
    """Check that ``x [..., d]`` and the options' ``weight``/``bias`` (``[d]``) fit; return ``d``.

    Only the shapes are read (``np.shape``), so a request can check before allocating anything.
    """
    if len(x_shape) < 1:
        raise ShapeError("x must have at least 1 dimension [..., d], got a scalar", field="x")
    d = x_shape[-1]
    for field, array in (("weight", options.weight), ("bias", options.bias)):
        if array is not None and tuple(np.shape(array)) != (d,):
            raise ShapeError(
                f"{field} must have shape [{d}] (x's last dimension), got {format_shape(np.shape(array))}",
                field=field,
            )
    return d


def layer_norm(
    x: ArrayLike, options: NormOptions = DEFAULT_NORM, *, dtype: DTypeArg = np.float64
) -> FloatArray:
    """``x [..., d]`` normalized over its last axis as ``options`` says (see the module docstring) →
    ``[..., d]``.

    The statistics and the normalized rows are computed in float64 whatever ``dtype`` (as PyTorch
    accumulates half precision in float), then cast: in float32, squares of 1e20 and an ``eps`` of 1e-300
    would leave the range (``0 · inf`` for a constant row). Rows are scaled before they are squared
    (:func:`divided_by_root_mean_square`), so a row far from 1 is normalized as exactly as another (entries
    or differences below the normal range count as 0: the flush of subnormals bounds their CPU time); one
    whose entries differ by more than float64's range raises :class:`NumericalOverflowError` naming ``x``
    (the rows are shifted by their first entry before they are centred); a result that
    overflows only through ``weight`` or ``bias`` names that field.
    """
    float_dtype = resolve_float_dtype(dtype)
    array = as_float_array(x, float_dtype, field="x")
    weight = None if options.weight is None else as_float_array(options.weight, float_dtype, field="weight")
    bias = None if options.bias is None else as_float_array(options.bias, float_dtype, field="bias")
    norm_shape(array.shape, options)
    if not all_finite(array):  # an entry beyond float32's range became inf in the cast
        raise overflow_error("x", float_dtype, field="x")
    wide = array.astype(np.float64, copy=False)
    if options.kind == "layer":
        normalized = standardized(wide, options.eps)
    else:
        normalized = root_mean_square_scaled(wide, options.eps)
    # cast: the stubs lose the float32-or-float64 union through astype; the dtype is float_dtype.
    narrowed = cast("FloatArray", normalized.astype(float_dtype, copy=False))
    return scaled_and_shifted(narrowed, weight, bias, float_dtype)


def standardized(x: NDArray[np.float64], eps: float) -> NDArray[np.float64]:
    """``(x − mean) / sqrt(var + eps)`` over the last axis of ``x [..., d]``, with the population variance
    (a new array).

    The rows are first shifted by their first entry (which changes neither the centred values nor the
    variance): a constant row then centres to exact zeros, whatever rounding its mean would have had.
    """
    with np.errstate(over="ignore", invalid="ignore"), flush_subnormals():
        centred = x - x[..., :1]
        centred -= centred.mean(axis=-1, keepdims=True)
    if not all_finite(centred):
        raise overflow_error("the centred rows of x", np.dtype(np.float64), field="x")
    return divided_by_root_mean_square(centred, eps)


def root_mean_square_scaled(x: NDArray[np.float64], eps: float) -> NDArray[np.float64]:
    """``x / sqrt(mean(x²) + eps)`` over the last axis of ``x [..., d]`` (a new array)."""
    return divided_by_root_mean_square(x.copy(), eps)


# How far above 1 a row's eps may be after the row is scaled (its squares are then at most 1): more would
# leave the float range in the sum; the row is scaled up less instead, and its squares no longer count
# beside eps.
_EPS_CEILING_EXPONENT = 1000


def divided_by_root_mean_square(rows: NDArray[np.float64], eps: float) -> NDArray[np.float64]:
    """``rows / sqrt(mean(rows²) + eps)`` over the last axis, in place (``rows`` is returned).

    Each row is first scaled by a power of two (exact) that brings its largest magnitude into [0.5, 1), and
    ``eps`` with it (by the square). So its squares neither overflow (entries near 1e155 and beyond) nor fall
    below the normal range, where the flush of subnormals (which bounds the CPU time they would take) would
    count them as 0: rows near 1e-155 were divided by sqrt(eps) alone, 10⁵ times too much beside an eps of
    1e-320. What is still flushed is a square below 2⁻¹⁰²² of a row whose largest square is at least 1/4.
    """
    with flush_subnormals():
        peak = np.abs(rows).max(axis=-1, keepdims=True, initial=0.0)
    # Per row, outside the flush: a subnormal eps counts.
    _, exponent = np.frexp(peak)  # peak = f · 2**exponent, f in [0.5, 1)
    eps_exponent = math.frexp(eps)[1]
    # A row of zeros is 0 at any scale: the one that brings eps near 1 keeps a subnormal eps from being read
    # as 0 (0 / sqrt(0)). Never scale so far up that eps / 2**(2·exponent) leaves the range.
    exponent = np.where(peak == 0, eps_exponent // 2, exponent)
    exponent = np.maximum(exponent, (eps_exponent - _EPS_CEILING_EXPONENT) // 2)
    with np.errstate(under="ignore"):
        scaled_eps = np.ldexp(eps, -2 * exponent)
    with flush_subnormals():
        np.ldexp(rows, -exponent, out=rows)
        mean_square = np.square(rows).mean(axis=-1, keepdims=True)
        mean_square += scaled_eps
        rows *= 1.0 / np.sqrt(mean_square)
    return rows


def scaled_and_shifted(
    normalized: FloatArray, weight: FloatArray | None, bias: FloatArray | None, dtype: FloatDType
) -> FloatArray:
    """``normalized · weight + bias`` in place (either may be absent); an overflow names the one to blame."""
    with np.errstate(over="ignore", invalid="ignore"):
        if weight is not None:
            normalized *= weight
            if not np.isfinite(normalized).all():
                raise overflow_error("the normalized rows times weight", dtype, field="weight")
        if bias is not None:
            normalized += bias
            if not np.isfinite(normalized).all():
                raise overflow_error("the normalized rows plus bias", dtype, field="bias")
    return normalized
