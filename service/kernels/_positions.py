"""Positional encodings: the sinusoidal table of Attention Is All You Need and rotary embeddings (RoPE).

Both use the frequencies ``base^(−2i/d)`` for ``i = 0 … d/2 − 1``. The angles ``position · frequency`` are
computed in float64 whatever the requested dtype (a float32 angle of position 4096 would already be off in
its fourth digit), and only the tables are cast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from service.kernels._common import (
    DTypeArg,
    FloatArray,
    FloatDType,
    all_finite,
    as_float_array,
    check_finite_scalar,
    check_int,
    overflow_error,
    resolve_float_dtype,
)
from service.kernels._errors import KernelError, ShapeError, format_shape
from service.kernels._visibility import CausalAlignment, position_offset

RotaryStyle = Literal["half", "interleaved"]
DEFAULT_BASE = 10000.0
# Positions beyond 2^53 are no longer integers in float64, the type the angles are computed in.
MAX_POSITION = 2**53


def _positions(positions: ArrayLike, *, field: str = "positions") -> NDArray[np.float64]:
    """Positions as a 1-D float64 array of integers (negative positions are fine: RoPE only needs
    differences, and a cache may be aligned either way)."""
    array = np.asarray(positions)
    if array.ndim != 1:
        raise ShapeError(
            f"{field} must be a 1-D list of integers, got shape {format_shape(array.shape)}", field=field
        )
    if array.size and array.dtype.kind not in "iu":
        whole = (
            array.dtype.kind == "f"
            and bool(np.isfinite(array).all())
            and bool((array == np.round(array)).all())
        )
        if not whole:
            raise KernelError(f"{field} must be integers", field=field)
    positions_f64 = array.astype(np.float64)
    if positions_f64.size and float(np.max(np.abs(positions_f64))) > MAX_POSITION:
        raise KernelError(f"{field} must be within ±2^53", field=field)
    return positions_f64


def _angles(positions: NDArray[np.float64], dim: int, base: float, *, field: str) -> NDArray[np.float64]:
    """``[len(positions), dim / 2]``: ``position · base^(−2i/dim)`` in float64.

    A base far below 1 makes the frequencies, or their products with the positions, overflow (5e-324 with
    ``dim`` 64): sin and cos of such angles are NaN, so that is refused, naming the base (``field``).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        frequencies = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
        angles: NDArray[np.float64] = np.outer(positions, frequencies)
    if not all_finite(angles):
        raise KernelError(
            f"{field} = {base!r} is too small: the angles position · {field}^(−2i/{dim}) overflow float64",
            field=field,
        )
    return angles


def _check_base(base: float, *, field: str = "base") -> float:
    return check_finite_scalar(base, field=field, minimum=0.0, strict=True)


def sinusoidal_encoding(
    positions: ArrayLike, d_model: int, *, base: float = DEFAULT_BASE, dtype: DTypeArg = np.float64
) -> FloatArray:
    """``[len(positions), d_model]``: ``PE(pos, 2i) = sin(pos / base^(2i/d_model))`` and
    ``PE(pos, 2i+1) = cos(pos / base^(2i/d_model))`` (Attention Is All You Need, §3.5)."""
    float_dtype = resolve_float_dtype(dtype)
    d_model = check_int(d_model, field="d_model", minimum=2)
    if d_model % 2:
        raise KernelError(f"d_model must be even (sin and cos pairs), got {d_model}", field="d_model")
    base = _check_base(base)
    angles = _angles(_positions(positions), d_model, base, field="base")
    table = np.empty((angles.shape[0], d_model), dtype=np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles)
    return _cast(table, float_dtype)


@dataclass(frozen=True)
class Rotary:
    """Attention's ``rotary`` option: RoPE on the query and key rows before the scores.

    The offsets place query row 0 and key row 0 on the position axis; by default they follow the causal
    alignment (``lower_right``: queries are the last ``n`` of ``m`` positions, so ``query_offset = m − n``),
    which makes decoding over a KV cache rotate exactly as the full sequence does.
    """

    base: float = DEFAULT_BASE
    style: RotaryStyle = "half"
    dim: int | None = None
    query_offset: int | None = None
    key_offset: int | None = None

    def offsets(self, n: int, m: int, alignment: CausalAlignment) -> tuple[int, int]:
        """The positions of query row 0 and key row 0 for ``n`` queries over ``m`` keys: the offsets given,
        else the key position of query row 0 under the causal ``alignment`` and 0."""
        return (
            position_offset(n, m, alignment) if self.query_offset is None else self.query_offset,
            0 if self.key_offset is None else self.key_offset,
        )


@dataclass(frozen=True)
class RotaryTables:
    """``cos`` and ``sin`` of the angles, ``[len(positions), dim / 2]``, in the computation's dtype."""

    cos: FloatArray
    sin: FloatArray


def rotary_tables(
    positions: ArrayLike, dim: int, *, base: float = DEFAULT_BASE, dtype: DTypeArg = np.float64
) -> RotaryTables:
    """The cos/sin tables RoPE multiplies by: angle ``(p, i) = p · base^(−2i/dim)``, ``i < dim / 2``."""
    float_dtype = resolve_float_dtype(dtype)
    dim = check_int(dim, field="dim", minimum=2)
    if dim % 2:
        raise KernelError(f"dim must be even (rotary rotates pairs of features), got {dim}", field="dim")
    return tables_at(_positions(positions), dim, _check_base(base), float_dtype)


def tables_at(
    positions: NDArray[np.float64], dim: int, base: float, dtype: FloatDType, *, field: str = "base"
) -> RotaryTables:
    """:func:`rotary_tables` for arguments already checked (``field`` names the base in errors)."""
    angles = _angles(positions, dim, base, field=field)
    return RotaryTables(cos=_cast(np.cos(angles), dtype), sin=_cast(np.sin(angles), dtype))


def _cast(table: NDArray[np.float64], dtype: FloatDType) -> FloatArray:
    return table.astype(np.float32) if dtype == np.float32 else table


def check_rotary(rotary: Rotary, d_k: int) -> tuple[int, float]:
    """The rotated features and the base of attention's ``rotary`` option (fields ``rotary.*``)."""
    if rotary.style not in ("half", "interleaved"):
        raise KernelError(
            f"rotary.style must be 'half' or 'interleaved', got {rotary.style!r}", field="rotary.style"
        )
    for name in ("query_offset", "key_offset"):
        offset = getattr(rotary, name)
        if offset is not None:
            check_int(offset, field=f"rotary.{name}", minimum=-MAX_POSITION, maximum=MAX_POSITION)
    return check_rotary_dim(rotary.dim, d_k, field="rotary.dim"), _check_base(
        rotary.base, field="rotary.base"
    )


def check_positions_from(offset: int, count: int, *, field: str) -> None:
    """The ``count`` positions from ``offset`` must all be exact in float64 (within ±2**53, as positions
    given one by one must be): past it two neighbours round to one position and are rotated alike."""
    last = offset + count - 1
    if count and not -MAX_POSITION <= last <= MAX_POSITION:
        raise KernelError(
            f"{field} + {count - 1} (the last of its {count} positions) must be within ±2**53 "
            f"(positions past it are not exact in float64), got {last}",
            field=field,
        )


def check_rotary_dim(dim: int | None, d: int, *, field: str = "dim", width: str = "d_k") -> int:
    """The number of rotated features: ``d`` (named ``width`` in messages) by default; even, at most ``d``."""
    if dim is None:
        if d % 2:
            raise KernelError(
                f"rotary rotates pairs of features, but {width} is {d}: give an even {field} < {d}",
                field=field,
            )
        return d
    dim = check_int(dim, field=field, minimum=2)
    if dim % 2 or dim > d:
        raise KernelError(f"{field} must be even and at most {width}={d}, got {dim}", field=field)
    return dim


def apply_rotary(
    x: ArrayLike,
    positions: ArrayLike,
    *,
    base: float = DEFAULT_BASE,
    style: RotaryStyle = "half",
    dim: int | None = None,
    dtype: DTypeArg = np.float64,
) -> FloatArray:
    """Rotary position embedding of ``x [..., n, d]`` at ``positions [n]`` → ``[..., n, d]``.

    Features ``0 … dim − 1`` are rotated in pairs by the angle ``position · base^(−2i/dim)``; the rest pass
    through (partial rotary). ``style="half"`` pairs feature ``i`` with ``i + dim/2`` (GPT-NeoX and Llama's
    ``rotate_half``); ``"interleaved"`` pairs ``2i`` with ``2i + 1`` (GPT-J, RoFormer).
    """
    float_dtype = resolve_float_dtype(dtype)
    array = as_float_array(x, float_dtype, field="x")
    if not all_finite(array):  # 1e39 in float32: every feature is answered, rotated or passed through
        raise overflow_error("x", float_dtype, field="x")
    if array.ndim < 2:
        raise ShapeError(
            f"x must have at least 2 dimensions [..., n, d], got {format_shape(array.shape)}", field="x"
        )
    n, d = array.shape[-2:]
    dim = check_rotary_dim(dim, d, width="d")
    if style not in ("half", "interleaved"):
        raise KernelError(f"style must be 'half' or 'interleaved', got {style!r}", field="style")
    where = _positions(positions)
    if where.shape[0] != n:
        raise ShapeError(f"positions has {where.shape[0]} entries but x has n={n} rows", field="positions")
    return rotate(array, tables_at(where, dim, _check_base(base), float_dtype), style=style, field="x")


def rotate(x: FloatArray, tables: RotaryTables, *, style: RotaryStyle, field: str) -> FloatArray:
    """``x [..., n, d]`` rotated with ``tables`` (``[n, dim/2]``) on its first ``dim`` features (a new array).

    The one implementation of the rotation, used by :func:`apply_rotary` and by attention's ``rotary``.
    A pair of finite features whose rotation leaves the float range (``[1.7e308, 1.7e308]`` turned by one
    radian has a second feature of 2.35e308) raises :class:`NumericalOverflowError` naming ``field``: each
    rotated feature is a sum of two products by cos and sin (at most 1 in size), so it overflows only when
    the true value is beyond the range. A pair that holds a non-finite feature already (a float32 key of
    1e39, which attention lets a hidden key hold) is the caller's to judge, as it would be unrotated.
    """
    half = tables.cos.shape[-1]
    dim = 2 * half
    if style == "half":
        first, second = x[..., :half], x[..., half:dim]
    else:
        first, second = x[..., 0:dim:2], x[..., 1:dim:2]
    cos, sin = tables.cos, tables.sin
    out = x.copy()
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is checked just below, naming the field
        rotated_first = first * cos - second * sin
        rotated_second = second * cos + first * sin
    if not (all_finite(rotated_first) and all_finite(rotated_second)):
        overflowed = np.isfinite(first) & np.isfinite(second)
        overflowed &= ~(np.isfinite(rotated_first) & np.isfinite(rotated_second))
        if overflowed.any():
            raise overflow_error(f"{field} rotated by rotary", x.dtype, field=field)
    if style == "half":
        out[..., :half], out[..., half:dim] = rotated_first, rotated_second
    else:
        out[..., 0:dim:2], out[..., 1:dim:2] = rotated_first, rotated_second
    return out
