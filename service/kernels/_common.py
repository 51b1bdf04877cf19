"""Helpers shared by the kernels: dtype resolution, casting, validation and block sizing."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import math
import platform
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

from service.kernels._errors import KernelError, NumericalOverflowError

# The kernels compute in float32 or float64, chosen per call; these aliases say so without ``Any``.
FloatArray: TypeAlias = NDArray[np.float32] | NDArray[np.float64]
FloatDType: TypeAlias = np.dtype[np.float32] | np.dtype[np.float64]
Float: TypeAlias = np.float32 | np.float64
BoolArray: TypeAlias = NDArray[np.bool_]
IntArray: TypeAlias = NDArray[np.int64]
DTypeArg: TypeAlias = DTypeLike
# A float or boolean array whose exact type a helper hands back (slicing and broadcasting keep the dtype).
ArrayT = TypeVar("ArrayT", bound=np.ndarray[tuple[int, ...], np.dtype[np.generic]])

# Temporaries of this many elements (8 MB in float64) keep the working set cache- and memory-friendly.
BLOCK_ELEMENTS = 1 << 20

# The largest finite value and the smallest normal one of each computation dtype, looked up once (np.finfo
# is a call per lookup, as much as a tiny input's arithmetic).
LARGEST: dict[np.dtype[np.floating[Any]], float] = {
    np.dtype(t): float(np.finfo(t).max) for t in (np.float32, np.float64)
}
SMALLEST_NORMAL: dict[np.dtype[np.floating[Any]], float] = {
    np.dtype(t): float(np.finfo(t).tiny) for t in (np.float32, np.float64)
}

# exp(x) below this is subnormal in the dtype (or 0): flushed to 0 under flush_subnormals, and computed 5-20×
# slower than any other result by NumPy's exp, so the attention kernel sets such scores to -inf first.
EXP_UNDERFLOW: dict[np.dtype[np.floating[Any]], float] = {
    dtype: math.log(tiny) for dtype, tiny in SMALLEST_NORMAL.items()
}

# An EmptyRowError indexes this many of the empty rows (and counts them all).
LISTED_EMPTY_ROWS = 10


def resolve_float_dtype(dtype: DTypeArg) -> FloatDType:
    """``dtype`` as a NumPy dtype, which must be float32 or float64."""
    try:
        resolved = np.dtype(dtype)
    except TypeError:
        raise KernelError(f"dtype must be float32 or float64, got {dtype!r}", field="dtype") from None
    if resolved == np.float32:
        return np.dtype(np.float32)
    if resolved == np.float64:
        return np.dtype(np.float64)
    raise KernelError(f"dtype must be float32 or float64, got {resolved}", field="dtype")


def as_float_array(values: ArrayLike, dtype: FloatDType, *, field: str) -> FloatArray:
    """``values`` cast to ``dtype`` (no copy when it already is one).

    Entries too large for ``dtype`` become inf here; the kernels decide whether that matters (a hidden
    key may hold anything) and raise :class:`NumericalOverflowError` when it does.
    """
    if type(values) is np.ndarray and values.dtype == dtype:
        # What np.asarray would return (the array itself), without its errstate context: most calls,
        # since the codecs build float64 arrays, and for a tiny input the context costs more than the work.
        return values
    try:
        with np.errstate(over="ignore"):
            array: FloatArray = (
                np.asarray(values, dtype=np.float32)
                if dtype == np.float32
                else np.asarray(values, dtype=np.float64)
            )
    except (TypeError, ValueError):
        raise KernelError(f"{field} must be a rectangular array of numbers", field=field) from None
    return array


# Up to this many entries, a Python pass over the values beats np.isfinite(...).all(), whose two calls cost
# about 1.4 µs whatever the size (measured: 0.4 µs for 4 entries, 0.7 µs for 16, 2 µs for 64).
SMALL_ARRAY_ENTRIES = 16


def all_finite(array: NDArray[Any]) -> bool:
    """Whether every entry of the real-valued ``array`` is finite (neither NaN nor ±inf).

    The one finiteness check of the kernels' and requests' hot paths; a tiny array (the seed examples' are
    2 to 9 values) is read as Python floats, which is cheaper there than the two NumPy calls.
    """
    if array.size <= SMALL_ARRAY_ENTRIES:
        return all(map(math.isfinite, array.ravel().tolist()))
    return bool(np.isfinite(array).all())


def overflow_error(what: str, dtype: FloatDType, *, field: str | None) -> NumericalOverflowError:
    """The error for a non-finite result, with the advice that applies to every overflow."""
    limit = float(np.finfo(dtype).max)
    return NumericalOverflowError(
        f"{what} overflowed (not finite in {dtype}, whose largest value is {limit:.4g}); "
        "use inputs of smaller magnitude" + (" or float64" if dtype == np.float32 else ""),
        field=field,
    )


def linear(
    x: FloatArray,
    weight: FloatArray,
    bias: FloatArray | None,
    *,
    field: str,
    dtype: FloatDType,
    x_field: str | None = None,
    bias_field: str | None = None,
) -> FloatArray:
    """``x [..., rows, a] @ weight [a, b] + bias [b]`` → ``[..., rows, b]``, with subnormals flushed (fast
    products, see :func:`flush_subnormals`). The one affine map of the multi-head layer's projections and the
    feed-forward layer.

    An overflow blames ``x_field`` or ``bias_field`` when that array holds an entry beyond ``dtype`` (a
    request's number cast to float32: x_field is None for an intermediate, which is finite), else ``field``,
    the weight. Checked only once the result is not finite, so a finite projection pays nothing for it.
    """
    with np.errstate(over="ignore", invalid="ignore"), flush_subnormals():
        projected: FloatArray = np.matmul(x, weight)
        if bias is not None:
            projected += bias
    if not np.isfinite(projected).all():
        for name, array in ((x_field, x), (bias_field, bias)):
            if name is not None and array is not None and not all_finite(array):
                raise overflow_error(name, dtype, field=name)
        raise overflow_error(f"the projection by {field}", dtype, field=field)
    return projected


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


@dataclass(frozen=True)
class Range:
    """An allowed interval for a number; ``None`` leaves that side open.

    The one statement of a numeric rule: the kernel's option objects check with it, the typed requests
    check with the same object (their messages name the field alike), and the contract's bounds come from it.
    """

    minimum: float | None = None
    maximum: float | None = None
    min_inclusive: bool = True
    max_inclusive: bool = True

    def contains(self, value: float) -> bool:
        if self.minimum is not None and (
            value < self.minimum or (value == self.minimum and not self.min_inclusive)
        ):
            return False
        return not (
            self.maximum is not None
            and (value > self.maximum or (value == self.maximum and not self.max_inclusive))
        )

    def check(self, value: NumberT, *, field: str) -> NumberT:
        """``value`` if it lies within this range, else a :class:`KernelError` naming ``field``."""
        if not self.contains(value):
            raise KernelError(f"{field} must be {self}, got {value:g}", field=field)
        return value

    def __str__(self) -> str:
        low = None if self.minimum is None else f"{'>=' if self.min_inclusive else '>'} {self.minimum:g}"
        high = None if self.maximum is None else f"{'<=' if self.max_inclusive else '<'} {self.maximum:g}"
        return " and ".join(part for part in (low, high) if part) or "any number"


NumberT = TypeVar("NumberT", int, float)


def check_int(value: int, *, field: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an int within ``[minimum, maximum]`` (bools are refused: they are not counts)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise KernelError(f"{field} must be an integer, got {value!r}", field=field)
    number = int(value)
    if minimum is None:
        return number
    if number < minimum or (maximum is not None and number > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise KernelError(f"{field} must be {bound}, got {number}", field=field)
    return number


def rows_per_block(elements_per_row: int, total_rows: int) -> int:
    """How many rows fit in one block of about :data:`BLOCK_ELEMENTS` elements (at least one)."""
    per_block = max(1, BLOCK_ELEMENTS // max(elements_per_row, 1))
    return max(1, min(per_block, total_rows))


def first_indices(flags: BoolArray, limit: int) -> list[list[int]]:
    """The indices of the first ``limit`` True entries of ``flags`` (C order), as lists of ints.

    Scans a block at a time, so that finding a few among millions does not list them all.
    """
    flat = flags.reshape(-1)
    found: list[int] = []
    for start in range(0, flat.size, BLOCK_ELEMENTS):
        hits = np.flatnonzero(flat[start : start + BLOCK_ELEMENTS])[: limit - len(found)]
        found.extend(int(hit) + start for hit in hits)
        if len(found) == limit:
            break
    if flags.ndim == 0:  # np.unravel_index refuses the empty shape; the index of a 0-d entry is []
        return [[] for _ in found]
    rows: list[list[int]] = np.stack(np.unravel_index(found, flags.shape), axis=-1).tolist()
    return rows


def batch_blocks(batch: tuple[int, ...], elements_per_item: int) -> list[tuple[int | slice, ...]]:
    """Indices that split an array with leading dimensions ``batch`` into basic-indexed blocks (views).

    Each block holds at most ``BLOCK_ELEMENTS // elements_per_item`` batch entries (at least one): whole
    trailing dimensions, and a range of the one before them.
    """
    budget = max(1, BLOCK_ELEMENTS // max(elements_per_item, 1))
    if math.prod(batch) <= budget:
        return [()]
    split = len(batch)  # the axis to cut in ranges: the innermost whose trailing dimensions still fit
    while math.prod(batch[split - 1 :]) <= budget:
        split -= 1
    axis = split - 1
    inner = math.prod(batch[split:])
    step = max(1, budget // inner)
    return [
        (*outer, slice(start, min(start + step, batch[axis])))
        for outer in np.ndindex(*batch[:axis])
        for start in range(0, batch[axis], step)
    ]


# --- Subnormal numbers: flushed to zero in the products ---------------------------------------------------
#
# Arithmetic that reads or produces a subnormal number (below 2.2e-308 in float64, 1.2e-38 in float32) takes
# a microcode assist on x86: a 1024 × 1024 product of entries near 1e-160 took 4.8 s instead of 0.03 s, and
# attention whose weights underflow 10 s instead of 0.3 s. No bound on shapes can see that, so the products
# run with the CPU's flush-to-zero and denormals-are-zero bits set (MXCSR, for this thread only), through
# glibc's public fegetenv/fesetenv: such numbers count as 0, changing a result by less than the smallest
# normal number times the values it sums. Elsewhere (another CPU or C library) this is a no-op.
_MXCSR_OFFSET = 28  # fenv_t on x86-64 glibc: the x87 environment (28 bytes), then MXCSR (4): 32 bytes
_FLUSH_TO_ZERO = 0x8000
_DENORMALS_ARE_ZERO = 0x0040


class _FloatEnvironment(ctypes.Structure):
    _fields_ = (("x87", ctypes.c_uint8 * _MXCSR_OFFSET), ("mxcsr", ctypes.c_uint32))


def _glibc_math() -> ctypes.PyDLL | None:
    if platform.system() != "Linux" or platform.machine() != "x86_64" or platform.libc_ver()[0] != "glibc":
        return None
    name = ctypes.util.find_library("m")
    # PyDLL: the two calls are a few instructions each; holding the GIL through them costs less than handing
    # it over and taking it back (MXCSR is per thread either way).
    return None if name is None else ctypes.PyDLL(name)


_LIBM = _glibc_math()
FLUSHES_SUBNORMALS = _LIBM is not None  # whether flush_subnormals does anything on this machine


class _SubnormalsFlushed:
    """The context manager of :func:`flush_subnormals`: a class rather than a generator, as the attention
    kernel enters one twice per block of rows and the seed request's whole kernel takes about 20 µs."""

    __slots__ = ("saved",)

    def __init__(self) -> None:
        self.saved: _FloatEnvironment | None = None

    def __enter__(self) -> None:
        if self.saved is not None:  # entered twice, the outer exit would restore the inner's flushed state
            raise RuntimeError("a flush_subnormals() context is entered once; call flush_subnormals() again")
        saved = _FloatEnvironment()
        if _LIBM is None or _LIBM.fegetenv(ctypes.byref(saved)) != 0:
            return
        flushed = _FloatEnvironment.from_buffer_copy(saved)
        flushed.mxcsr |= _FLUSH_TO_ZERO | _DENORMALS_ARE_ZERO
        _LIBM.fesetenv(ctypes.byref(flushed))
        self.saved = saved

    def __exit__(self, *exception: object) -> None:
        if self.saved is not None and _LIBM is not None:
            _LIBM.fesetenv(ctypes.byref(self.saved))


def flush_subnormals() -> contextlib.AbstractContextManager[None]:
    """Within the block, this thread's SSE/AVX arithmetic (NumPy's and BLAS's) treats subnormal inputs and
    results as 0; the thread's floating-point environment is restored afterwards, however the block ends."""
    return _SubnormalsFlushed()
