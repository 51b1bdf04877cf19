"""Helpers shared by the kernels: dtype resolution, casting, validation and block sizing."""

from __future__ import annotations

import math
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray

from service.kernels.errors import KernelError, NumericalOverflowError

FloatArray: TypeAlias = NDArray[np.floating[Any]]
BoolArray: TypeAlias = NDArray[np.bool_]
IntArray: TypeAlias = NDArray[np.int64]
DTypeArg: TypeAlias = np.dtype[Any] | type[Any]

# Temporaries of this many elements (8 MB in float64) keep the working set cache- and memory-friendly.
BLOCK_ELEMENTS = 1 << 20


def resolve_float_dtype(dtype: DTypeArg) -> np.dtype[np.floating[Any]]:
    """``dtype`` as a NumPy dtype, which must be float32 or float64."""
    try:
        resolved = np.dtype(dtype)
    except TypeError:
        raise KernelError(f"dtype must be float32 or float64, got {dtype!r}", field="dtype") from None
    if resolved not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise KernelError(f"dtype must be float32 or float64, got {resolved}", field="dtype")
    return resolved


def as_float_array(values: ArrayLike, dtype: np.dtype[np.floating[Any]], *, field: str) -> FloatArray:
    """``values`` cast to ``dtype`` (no copy when it already is one).

    Entries too large for ``dtype`` become inf here; the kernels decide whether that matters (a hidden
    key may hold anything) and raise :class:`NumericalOverflowError` when it does.
    """
    try:
        with np.errstate(over="ignore"):
            array: FloatArray = np.asarray(values, dtype=dtype)
    except (TypeError, ValueError):
        raise KernelError(f"{field} must be a rectangular array of numbers", field=field) from None
    return array


def overflow_error(
    what: str, dtype: np.dtype[np.floating[Any]], *, field: str | None
) -> NumericalOverflowError:
    """The error for a non-finite result, with the advice that applies to every overflow."""
    limit = float(np.finfo(dtype).max)
    return NumericalOverflowError(
        f"{what} overflowed (not finite in {dtype}, whose largest value is {limit:.4g}); "
        "use inputs of smaller magnitude" + (" or float64" if dtype == np.float32 else ""),
        field=field,
    )


def as_bool_mask(mask: ArrayLike, *, field: str = "mask") -> BoolArray:
    """``mask`` as a boolean array; integer masks must hold only 0 and 1."""
    array = np.asarray(mask)
    if array.dtype == np.bool_:
        return array
    if array.dtype.kind in "iu" and bool(np.isin(array, (0, 1)).all()):
        return array.astype(np.bool_)
    if array.size == 0:
        return array.astype(np.bool_)
    raise KernelError(
        f"{field} must be an array of booleans (true = visible), got {array.dtype}", field=field
    )


def check_finite_scalar(
    value: float, *, field: str, minimum: float | None = None, strict: bool = False
) -> float:
    """``value`` as a finite float, optionally bounded below (``strict``: exclusive bound)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise KernelError(f"{field} must be a number, got {value!r}", field=field) from None
    if not math.isfinite(number):
        raise KernelError(f"{field} must be finite, got {number}", field=field)
    if minimum is not None and (number <= minimum if strict else number < minimum):
        relation = ">" if strict else ">="
        raise KernelError(f"{field} must be {relation} {minimum:g}, got {number:g}", field=field)
    return number


def check_int(value: int, *, field: str, minimum: int, maximum: int | None = None) -> int:
    """``value`` as an int within ``[minimum, maximum]`` (bools are refused: they are not counts)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise KernelError(f"{field} must be an integer, got {value!r}", field=field)
    number = int(value)
    if number < minimum or (maximum is not None and number > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise KernelError(f"{field} must be {bound}, got {number}", field=field)
    return number


def rows_per_block(elements_per_row: int, total_rows: int) -> int:
    """How many rows fit in one block of about :data:`BLOCK_ELEMENTS` elements (at least one)."""
    per_block = max(1, BLOCK_ELEMENTS // max(elements_per_row, 1))
    return max(1, min(per_block, total_rows))


def index_lists(flags: BoolArray) -> list[list[int]]:
    """The index of every True entry of ``flags``, as lists of ints."""
    return [[int(i) for i in index] for index in np.argwhere(flags)]
