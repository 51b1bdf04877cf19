"""Softmax with temperature, masking and top-k / top-p (nucleus) truncation over the last axis."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from service.kernels._common import (
    LISTED_EMPTY_ROWS,
    BoolArray,
    DTypeArg,
    FloatArray,
    IntArray,
    as_bool_mask,
    as_float_array,
    check_finite_scalar,
    check_int,
    divide_by_temperature,
    first_indices,
    overflow_error,
    resolve_float_dtype,
)
from service.kernels.errors import EmptyRowError, KernelError, ShapeError, describe_rows, format_shape


def softmax_shapes(
    logits_shape: Sequence[int], *, mask_shape: Sequence[int] | None = None
) -> tuple[int, ...]:
    """Check the shapes (without allocating) and return the shape of every per-entry result."""
    logits_shape = tuple(logits_shape)
    if len(logits_shape) < 1 or logits_shape[-1] < 1:
        raise ShapeError(
            "logits must have at least 1 dimension [..., V] with V >= 1 but has shape "
            f"{format_shape(logits_shape)}",
            field="logits",
        )
    if mask_shape is not None:
        mask_shape = tuple(mask_shape)
        try:
            fits = np.broadcast_shapes(mask_shape, logits_shape) == logits_shape
        except ValueError:
            fits = False
        if not fits:
            raise ShapeError(
                f"mask shape {format_shape(mask_shape)} does not broadcast to logits shape "
                f"{format_shape(logits_shape)}",
                field="mask",
            )
    return logits_shape


@dataclass(frozen=True)
class SoftmaxResult:
    """The distribution over the last axis and a few summaries of each row."""

    probabilities: FloatArray
    log_probabilities: FloatArray
    entropy: FloatArray
    argmax: IntArray
    temperature: float


def softmax(
    logits: ArrayLike,
    *,
    temperature: float = 1.0,
    mask: ArrayLike | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    dtype: DTypeArg = np.float64,
) -> SoftmaxResult:
    """Softmax over the last axis, applying mask → temperature → top_k → top_p, then renormalizing.

    ``temperature == 0`` is the greedy limit: the maximal visible logits share the probability equally.
    """
    float_dtype = resolve_float_dtype(dtype)
    temperature = check_finite_scalar(temperature, field="temperature", minimum=0.0)
    if top_k is not None:
        top_k = check_int(top_k, field="top_k", minimum=1)
    if top_p is not None:
        top_p = check_finite_scalar(top_p, field="top_p", minimum=0.0, strict=True)
        if top_p > 1:
            raise KernelError(f"top_p must be in (0, 1], got {top_p:g}", field="top_p")

    x = as_float_array(logits, float_dtype, field="logits")
    visible = None if mask is None else as_bool_mask(mask)
    shape = softmax_shapes(x.shape, mask_shape=None if visible is None else visible.shape)
    if visible is not None:
        visible = np.broadcast_to(visible, shape)
        empty = np.asarray(~visible.any(axis=-1))
        if count := int(np.count_nonzero(empty)):
            rows = first_indices(empty, LISTED_EMPTY_ROWS)  # a few: listing millions would cost seconds
            raise EmptyRowError(_empty_rows_message(rows, count), rows=rows, count=count, field="mask")

    finite = np.isfinite(x)
    if not finite.all() and (visible is None or not (finite | ~visible).all()):
        raise overflow_error("logits", float_dtype, field="logits")

    masked = x.copy() if visible is None else np.where(visible, x, float_dtype.type(-np.inf))
    # Shifting by the row max first keeps every exponent <= 0 (and is the most accurate order), and
    # dividing the shifted values by a tiny temperature can only underflow towards -inf, never overflow.
    # Only when logits span more than the float range does the shift overflow; a temperature above 1
    # may bring that span back into range, so then divide first.
    typed_temperature = float_dtype.type(temperature)
    with np.errstate(over="ignore"):
        shifted = masked - np.max(masked, axis=-1, keepdims=True)
        divided_first = temperature > 1 and bool((np.isinf(shifted) & np.isfinite(masked)).any())
        if divided_first:
            masked /= typed_temperature
            shifted = masked - np.max(masked, axis=-1, keepdims=True)
    keep: BoolArray
    if temperature == 0:
        keep = shifted == 0
    else:
        keep = np.ones(shape, dtype=np.bool_) if visible is None else visible.copy()
        if temperature != 1 and not divided_first:
            # A temperature that rounds to 0 in float32 is divided in float64: the row maxima stay 0
            # and the rest go to -inf, the greedy limit, rather than 0/0 = NaN.
            divide_by_temperature(shifted, temperature)
    if top_k is not None and top_k < shape[-1]:
        keep &= masked >= _kth_largest(masked, top_k)
    if top_p is not None and top_p < 1:
        probabilities, _ = _normalize(shifted, keep)
        keep &= _nucleus(probabilities, top_p)

    probabilities, log_probabilities = _normalize(shifted, keep)
    plogp = np.zeros(shape, dtype=float_dtype)
    np.multiply(probabilities, log_probabilities, out=plogp, where=probabilities > 0)
    entropy: FloatArray = np.asarray(0.0 - plogp.sum(axis=-1))  # 0.0 - x turns a one-hot row's -0.0 into 0.0
    return SoftmaxResult(
        probabilities=probabilities,
        log_probabilities=log_probabilities,
        entropy=entropy,
        argmax=np.asarray(np.argmax(log_probabilities, axis=-1), dtype=np.int64),
        temperature=temperature,
    )


def _kth_largest(values: FloatArray, k: int) -> FloatArray:
    """The ``k``-th largest entry of each row, as a column for broadcasting."""
    size = values.shape[-1]
    return np.partition(values, size - k, axis=-1)[..., size - k : size - k + 1]


def _nucleus(probabilities: FloatArray, top_p: float) -> BoolArray:
    """The smallest set of most probable entries whose probabilities sum to at least ``top_p``."""
    order = np.argsort(-probabilities, axis=-1, kind="stable")  # stable: the first index wins ties
    sorted_probabilities = np.take_along_axis(probabilities, order, axis=-1)
    # An entry is needed while the mass of the entries before it is still short of top_p; the most
    # probable entry has nothing before it, so at least one is always kept.
    mass_before = np.zeros_like(sorted_probabilities)
    np.cumsum(sorted_probabilities[..., :-1], axis=-1, out=mass_before[..., 1:])
    # top_p stays a float64: as a float32 a top_p below 1.4e-45 would round to 0 and keep nothing.
    needed_sorted = mass_before < np.float64(top_p)
    needed = np.empty_like(needed_sorted)
    np.put_along_axis(needed, order, needed_sorted, axis=-1)
    return needed


def _normalize(shifted: FloatArray, keep: BoolArray) -> tuple[FloatArray, FloatArray]:
    """Probabilities and log-probabilities of the kept entries of rows whose kept maximum is 0."""
    with np.errstate(under="ignore"):
        exponentials = np.where(keep, np.exp(shifted), 0)
    total = exponentials.sum(axis=-1, keepdims=True)  # >= 1: the row max (exp(0)) is always kept
    probabilities: FloatArray = exponentials / total
    log_probabilities: FloatArray = np.where(keep, shifted - np.log(total), -np.inf).astype(
        shifted.dtype, copy=False
    )
    return probabilities, log_probabilities


def _empty_rows_message(rows: list[list[int]], count: int) -> str:
    if rows == [[]]:
        return "the logits row has no visible entry: the mask hides every entry"
    which = "the row" if count == 1 else "each such row"
    return describe_rows("logits row", "no visible entry", rows, count) + f" (the mask hides all of {which})"


def log_softmax(
    logits: ArrayLike, *, temperature: float = 1.0, axis: int = -1, dtype: DTypeArg = np.float64
) -> FloatArray:
    """Stable ``log(softmax(logits / temperature))`` along ``axis`` via log-sum-exp."""
    float_dtype = resolve_float_dtype(dtype)
    temperature = check_finite_scalar(temperature, field="temperature", minimum=0.0, strict=True)
    x = as_float_array(logits, float_dtype, field="logits")
    if x.ndim == 0:
        raise ShapeError("logits must have at least 1 dimension [..., V] but is a scalar", field="logits")
    if not np.isfinite(x).all():
        raise overflow_error("logits", float_dtype, field="logits")
    if x.shape[axis] == 0:
        return x.copy()
    # As in softmax: dividing the max-shifted logits by a small temperature can only underflow towards
    # -inf (a log-probability of -inf: probability 0 in this dtype), never overflow; a temperature
    # above 1 divides first, which cannot overflow and may bring a span beyond the float range back.
    if temperature > 1:
        x = divide_by_temperature(x.copy(), temperature)
    with np.errstate(over="ignore", under="ignore"):  # a span beyond the float range shifts to -inf
        shifted = x - np.max(x, axis=axis, keepdims=True)
        if temperature < 1:
            divide_by_temperature(shifted, temperature)
        total = np.exp(shifted).sum(axis=axis, keepdims=True)
    result: FloatArray = shifted - np.log(total)
    return result
