"""Softmax with temperature, masking and top-k / top-p (nucleus) / min-p truncation over the last axis."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from service.kernels._common import (
    LARGEST,
    LISTED_EMPTY_ROWS,
    SMALLEST_NORMAL,
    BoolArray,
    DTypeArg,
    FloatArray,
    IntArray,
    all_finite,
    as_bool_mask,
    as_float_array,
    check_finite_scalar,
    first_indices,
    overflow_error,
    resolve_float_dtype,
)
from service.kernels._errors import EmptyRowError, ShapeError, describe_rows, format_shape
from service.kernels._truncation import NO_TRUNCATION, Truncation, truncate


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
    truncation: Truncation = NO_TRUNCATION,
    dtype: DTypeArg = np.float64,
) -> SoftmaxResult:
    """Softmax over the last axis of ``logits [..., V]``: mask → temperature → top-k → top-p → min-p
    (``truncation``, checked when it was made), then renormalizing.

    ``mask`` (broadcastable to ``[..., V]``) is True where an entry is visible. Every per-entry result is
    ``[..., V]``, ``entropy`` and ``argmax`` ``[...]``. ``temperature == 0`` is the greedy limit: the
    maximal visible logits share the probability equally. The truncation (:func:`truncate`) is the one
    ``sample`` draws after, so this is its distribution.
    """
    float_dtype = resolve_float_dtype(dtype)
    temperature = check_finite_scalar(temperature, field="temperature", minimum=0.0)
    masked = masked_logits(logits, mask, float_dtype)
    # Hidden logits are -inf, and so (probability 0) are all but the maxima at temperature 0.
    shifted = tempered_shift(masked, temperature)
    keep = truncate(masked, shifted, truncation)

    log_probabilities, probabilities = normalize_shifted(shifted, keep=keep)
    plogp = np.zeros(masked.shape, dtype=float_dtype)
    np.multiply(probabilities, log_probabilities, out=plogp, where=probabilities > 0)
    entropy: FloatArray = np.asarray(0.0 - plogp.sum(axis=-1))  # 0.0 - x turns a one-hot row's -0.0 into 0.0
    return SoftmaxResult(
        probabilities=probabilities,
        log_probabilities=log_probabilities,
        entropy=entropy,
        argmax=np.asarray(log_probabilities.argmax(axis=-1), dtype=np.int64),
        temperature=temperature,
    )


def masked_logits(logits: ArrayLike, mask: ArrayLike | None, dtype: np.dtype[np.floating[Any]]) -> FloatArray:
    """``logits`` as ``dtype`` with hidden entries -inf, after checking shapes, rows and finiteness.

    Raises :class:`EmptyRowError` (naming the first few rows) when the mask hides a whole row, and an
    overflow error when a visible logit is not finite in ``dtype``.
    """
    x = as_float_array(logits, dtype, field="logits")
    visible = None if mask is None else as_bool_mask(mask)
    shape = softmax_shapes(x.shape, mask_shape=None if visible is None else visible.shape)
    if visible is not None:
        visible = np.broadcast_to(visible, shape)
        empty = np.asarray(~visible.any(axis=-1))
        if count := int(np.count_nonzero(empty)):
            rows = first_indices(empty, LISTED_EMPTY_ROWS)  # a few: listing millions would cost seconds
            raise EmptyRowError(_empty_rows_message(rows, count), rows=rows, count=count, field="mask")

    if not all_finite(x) and (visible is None or not (np.isfinite(x) | ~visible).all()):
        raise overflow_error("logits", dtype, field="logits")
    return x if visible is None else np.where(visible, x, dtype.type(-np.inf))


def _empty_rows_message(rows: list[list[int]], count: int) -> str:
    if rows == [[]]:
        return "the logits row has no visible entry: the mask hides every entry"
    which = "the row" if count == 1 else "each such row"
    return describe_rows("logits row", "no visible entry", rows, count) + f" (the mask hides all of {which})"


def log_softmax(
    logits: ArrayLike, *, temperature: float = 1.0, axis: int = -1, dtype: DTypeArg = np.float64
) -> FloatArray:
    """Stable ``log(softmax(logits / temperature))`` along ``axis`` via log-sum-exp.

    ``logits`` of shape ``[..., V, ...]`` give log-probabilities of the same shape, summing (in probability)
    to 1 along ``axis``. The library form of :func:`tempered_log_softmax`, which validates its inputs.
    """
    float_dtype = resolve_float_dtype(dtype)
    temperature = check_finite_scalar(temperature, field="temperature", minimum=0.0, strict=True)
    x = as_float_array(logits, float_dtype, field="logits")
    if x.ndim == 0:
        raise ShapeError("logits must have at least 1 dimension [..., V] but is a scalar", field="logits")
    if not np.isfinite(x).all():
        raise overflow_error("logits", float_dtype, field="logits")
    if x.shape[axis] == 0:
        return x.copy()
    return tempered_log_softmax(x, temperature, axis=axis)


# --- The tempered log-softmax: the one place that divides by a temperature and subtracts the maximum. ---
#
# Policy, for a temperature T > 0 (the order depends on T alone, never on the data, so a row's numbers do
# not depend on the other rows of a request, and every endpoint gives the same bits for the same row):
# - T > 1 divides first, then subtracts the maximum: a quotient is smaller than its dividend, so dividing
#   cannot overflow, and it brings a span beyond the float range (logits 1e308 and -1e308) back into it.
# - T < 1 subtracts the maximum first, then divides: every shifted value is <= 0, so dividing by a small
#   temperature can only underflow towards -inf (probability 0 in this dtype), never overflow, and the row
#   maximum stays exactly 0 (so T = 1e-310 still gives the maximum a log-probability of 0).
# - T = 1 only subtracts.
# Either way each row's maximum becomes exactly 0 and every other entry is <= 0: exp() cannot overflow and
# the row's sum is >= 1, so its log is finite and never -inf. A span that stays beyond the float range
# shifts to -inf, a probability that rounds to 0 anyway. T = 0 is the greedy limit of (x - max) / T:
# 0 on each row's maxima, -inf elsewhere.


def tempered_shift(logits: FloatArray, temperature: float, *, axis: int = -1) -> FloatArray:
    """``logits / temperature`` minus its maximum along ``axis`` (a new array of the same shape).

    Every slice along ``axis`` needs at least one entry above -inf (hidden entries may be -inf); its
    maximum becomes exactly 0. See the policy above for the order of the two steps.
    """
    # One errstate context for both steps (on a few logits it costs more than the arithmetic): a span
    # beyond the float range shifts to -inf, and a quotient beyond it becomes ±inf, as the policy says.
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        tempered = _divide_by_temperature(logits.copy(), temperature) if temperature > 1 else logits
        shifted: FloatArray = tempered - tempered.max(axis=axis, keepdims=True)
        if temperature == 0:
            return np.where(shifted == 0, shifted, shifted.dtype.type(-np.inf))
        if temperature < 1:
            _divide_by_temperature(shifted, temperature)
    return shifted


def _divide_by_temperature(values: FloatArray, temperature: float) -> FloatArray:
    """``values /= temperature`` in place; quotients beyond the float range become ±inf (the caller,
    :func:`tempered_shift`, ignores overflow and underflow).

    A temperature the dtype cannot represent as a normal number divides in float64 instead, the result
    cast back: below its smallest normal (1e-46 is 0 in float32, and 0/0 would be NaN; a subnormal keeps
    only a few digits) or above its largest (1e308 is inf in float32, and x/inf would lose quotients such
    as 3e38 / 6e38 = 0.5 that float32 holds).
    """
    if SMALLEST_NORMAL[values.dtype] <= temperature <= LARGEST[values.dtype]:
        values /= values.dtype.type(temperature)
    else:
        np.divide(values, np.float64(temperature), out=values, casting="same_kind")
    return values


def normalize_shifted(
    shifted: FloatArray, *, axis: int = -1, keep: BoolArray | None = None
) -> tuple[FloatArray, FloatArray]:
    """``(log_probabilities, probabilities)`` of max-shifted logits over the entries ``keep`` allows.

    ``shifted`` holds 0 at a kept entry of each slice and nothing above 0 (as :func:`tempered_shift`
    returns); entries not kept get probability 0 and log-probability -inf.
    """
    with np.errstate(under="ignore"):
        exponentials = np.exp(shifted) if keep is None else np.where(keep, np.exp(shifted), 0)
    total = exponentials.sum(axis=axis, keepdims=True)  # >= 1: the slice's maximum, exp(0), is kept
    log_probabilities: FloatArray = shifted - np.log(total)
    if keep is not None:
        np.copyto(log_probabilities, log_probabilities.dtype.type(-np.inf), where=~keep)
    exponentials /= total
    return log_probabilities, exponentials


def tempered_log_softmax(
    logits: FloatArray, temperature: float, *, axis: int = -1, visible: BoolArray | None = None
) -> FloatArray:
    """``log(softmax(logits / temperature))`` along ``axis``, with the policy above (shape preserved).

    ``visible`` (broadcastable to ``logits``) hides entries: they get log-probability -inf. The caller
    guarantees finite visible logits and at least one visible entry in each slice. Softmax, the sequence
    log-likelihood and sampling all call this (or its two steps), so equal inputs give equal bits.
    """
    if visible is not None:
        logits = np.where(visible, logits, logits.dtype.type(-np.inf))
    log_probabilities, _ = normalize_shifted(tempered_shift(logits, temperature, axis=axis), axis=axis)
    return log_probabilities
