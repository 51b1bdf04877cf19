"""Masked scaled dot-product attention, batched over any leading dimensions."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from types import EllipsisType
from typing import ClassVar, Literal, cast, get_args

import numpy as np
from numpy.typing import ArrayLike

from service.kernels._common import (
    EXP_UNDERFLOW,
    LARGEST,
    LISTED_EMPTY_ROWS,
    SMALLEST_NORMAL,
    ArrayT,
    BoolArray,
    DTypeArg,
    Float,
    FloatArray,
    FloatDType,
    IntArray,
    Range,
    all_finite,
    as_bool_mask,
    as_float_array,
    batch_blocks,
    check_finite_scalar,
    check_int,
    first_indices,
    flush_subnormals,
    overflow_error,
    resolve_float_dtype,
    rows_per_block,
)
from service.kernels._errors import EmptyRowError, KernelError, ShapeError, describe_rows, format_shape
from service.kernels._positions import Rotary, check_positions_from, check_rotary, rotate, tables_at
from service.kernels._visibility import (
    Band,
    CausalAlignment,
    empty_row_flags,
    hidden_keys,
    position_offset,
    row_block,
)

EmptyRowPolicy = Literal["error", "zero"]
# The intermediates attention can return beside its output (``include``).
AttentionOutput = Literal["weights", "scores", "logsumexp"]


@dataclass(frozen=True)
class AttentionOptions:
    """How :func:`attention` treats the scores, everything but the query, key and value and the outputs asked
    for; checked when made. Every option is off by default; in the order they act:

    - ``scale``: multiplies ``Q Kᵀ`` (default ``1/√d_k``); any finite number.
    - ``rotary``: RoPE on the query and key rows (:class:`Rotary`); the scores are the rotated ones.
    - ``softcap`` (> 0): scaled scores become ``softcap · tanh(scores / softcap)`` (Gemma 2).
    - ``bias`` (broadcastable to ``[..., n, m]``), then ``alibi_slopes`` (one per head, broadcastable to
      the leading dimensions): adds ``−slope · |i' − j|``, with ``i'`` the query's position in key
      coordinates (FlashAttention's ALiBi).
    - ``mask`` (broadcastable to ``[..., n, m]``): True where a query may attend to a key; ``causal``
      further hides later keys, aligned by ``causal_alignment`` (see :mod:`service.kernels._visibility`);
      ``window`` ``(left, right)`` (None = unbounded side) shows key ``j`` only when
      ``i' − left ≤ j ≤ i' + right``. The three combine by AND.
    - ``empty_rows``: a query row that sees no key raises :class:`EmptyRowError` (``"error"``) or gets an
      all-zero output (``"zero"``); the result lists such rows either way.
    - ``enable_gqa``: key/value carry ``H_kv`` heads at dim −3 and the query ``H_q``, a multiple; query
      head ``i`` reads key/value head ``i // (H_q / H_kv)`` (PyTorch's semantics; MQA is ``H_kv = 1``),
      without copying the keys and values.

    The arrays are held as given and cast to the computation's dtype by the call.
    """

    SOFTCAP: ClassVar[Range] = Range(minimum=0, min_inclusive=False)

    mask: ArrayLike | None = None
    bias: ArrayLike | None = None
    causal: bool = False
    causal_alignment: CausalAlignment = "lower_right"
    scale: float | None = None
    enable_gqa: bool = False
    window: tuple[int | None, int | None] | None = None
    alibi_slopes: ArrayLike | None = None
    softcap: float | None = None
    rotary: Rotary | None = None
    empty_rows: EmptyRowPolicy = "error"

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: the checked, normalized values are set once, here
        if self.causal_alignment not in ("lower_right", "upper_left"):
            raise KernelError(
                f"causal_alignment must be 'lower_right' or 'upper_left', got {self.causal_alignment!r}",
                field="causal_alignment",
            )
        if self.empty_rows not in ("error", "zero"):
            raise KernelError(
                f"empty_rows must be 'error' or 'zero', got {self.empty_rows!r}", field="empty_rows"
            )
        if self.window is not None:
            set_(self, "window", check_window(self.window))
        if self.softcap is not None:
            softcap = check_finite_scalar(self.softcap, field="softcap")
            set_(self, "softcap", self.SOFTCAP.check(softcap, field="softcap"))
        if self.scale is not None:
            set_(self, "scale", check_finite_scalar(self.scale, field="scale"))


DEFAULT_OPTIONS = AttentionOptions()


def check_outputs(include: Collection[str], allowed: tuple[str, ...]) -> frozenset[str]:
    """``include`` as a set of names from ``allowed`` (a bare string is refused: it is not a list)."""
    chosen = None if isinstance(include, str) else frozenset(include)
    if chosen is None or not chosen.issubset(allowed):
        raise KernelError(
            f"include must name outputs from: {', '.join(allowed)}; got {include!r}", field="include"
        )
    return chosen


ATTENTION_OUTPUTS: tuple[str, ...] = get_args(AttentionOutput)


@dataclass(frozen=True)
class AttentionShapes:
    """The sizes of one attention call, derived from the input shapes alone."""

    batch: tuple[int, ...]
    n: int
    m: int
    d_k: int
    d_v: int
    single_query: bool
    kv_heads: int | None = (
        None  # with enable_gqa: H_kv key/value heads shared by the H_q = batch[-1] query heads
    )

    @property
    def scores_elements(self) -> int:
        """Entries in the full score matrix, ``prod(batch) * n * m``."""
        return math.prod(self.batch) * self.n * self.m

    @property
    def output_elements(self) -> int:
        """Entries in the output, ``prod(batch) * n * d_v``."""
        return math.prod(self.batch) * self.n * self.d_v

    @property
    def output_shape(self) -> tuple[int, ...]:
        """``batch + (n, d_v)``, or ``batch + (d_v,)`` for a single query."""
        return (*self._rows_shape, self.d_v)

    @property
    def weights_shape(self) -> tuple[int, ...]:
        """``batch + (n, m)``, or ``batch + (m,)`` for a single query (also the shape of scores)."""
        return (*self._rows_shape, self.m)

    @property
    def _rows_shape(self) -> tuple[int, ...]:
        return self.batch if self.single_query else (*self.batch, self.n)


def attention_shapes(
    query_shape: Sequence[int],
    key_shape: Sequence[int],
    value_shape: Sequence[int],
    *,
    mask_shape: Sequence[int] | None = None,
    bias_shape: Sequence[int] | None = None,
    alibi_shape: Sequence[int] | None = None,
    enable_gqa: bool = False,
) -> AttentionShapes:
    """Check that the shapes fit together (without allocating) and return the derived sizes.

    With ``enable_gqa`` the head axis (−3) of key and value, ``H_kv``, may divide the query's ``H_q``:
    query head ``i`` then reads key/value head ``i // (H_q / H_kv)``.
    """
    return _checked_shapes(
        tuple(query_shape),
        tuple(key_shape),
        tuple(value_shape),
        None if mask_shape is None else tuple(mask_shape),
        None if bias_shape is None else tuple(bias_shape),
        None if alibi_shape is None else tuple(alibi_shape),
        bool(enable_gqa),
    )


# A typed request checks its shapes when it is made and the kernel checks them again when it runs (it is
# public, and other callers pass arrays straight in); the check is a pure function of the shapes, so the
# second call, and any request of the same shapes, is a cache hit. Bounded: shapes are client input.
@functools.lru_cache(maxsize=256)
def _checked_shapes(
    query_shape: tuple[int, ...],
    key_shape: tuple[int, ...],
    value_shape: tuple[int, ...],
    mask_shape: tuple[int, ...] | None,
    bias_shape: tuple[int, ...] | None,
    alibi_shape: tuple[int, ...] | None,
    enable_gqa: bool,
) -> AttentionShapes:
    """:func:`attention_shapes` on tuples (hashable, so that results can be cached)."""
    kv_heads = None
    if enable_gqa:
        kv_heads = _check_grouped_heads(query_shape, key_shape, value_shape)
        # Checked as if key and value had H_q heads, which is how they are read.
        key_shape = (*key_shape[:-3], query_shape[-3], *key_shape[-2:])
        value_shape = (*value_shape[:-3], query_shape[-3], *value_shape[-2:])
    if len(query_shape) < 1:
        raise ShapeError("query must have at least 1 dimension [..., n, d_k] but is a scalar", field="query")
    for field, shape in (("key", key_shape), ("value", value_shape)):
        if len(shape) < 2:
            axes = "[..., m, d_k]" if field == "key" else "[..., m, d_v]"
            raise ShapeError(
                f"{field} must have at least 2 dimensions {axes} but has shape {format_shape(shape)}",
                field=field,
            )
    d_k = query_shape[-1]
    if key_shape[-1] != d_k:
        raise ShapeError(
            f"key has d_k={key_shape[-1]} but query has d_k={d_k} {_both_qk(query_shape, key_shape)}",
            field="key",
        )
    if d_k == 0:
        raise ShapeError(
            "query has d_k=0; queries and keys need at least one feature " + _both_qk(query_shape, key_shape),
            field="query",
        )
    m = key_shape[-2]
    if value_shape[-2] != m:
        raise ShapeError(
            f"value has m={value_shape[-2]} rows but key has m={m} "
            f"(key shape {format_shape(key_shape)}, value shape {format_shape(value_shape)})",
            field="value",
        )

    single_query = len(query_shape) == 1
    query_lead, n = (query_shape[:-1], 1) if single_query else (query_shape[:-2], query_shape[-2])
    key_lead, value_lead = key_shape[:-2], value_shape[:-2]
    try:
        query_key_lead = np.broadcast_shapes(query_lead, key_lead)
    except ValueError:
        raise ShapeError(
            f"key batch dimensions {format_shape(key_lead)} do not broadcast with query batch dimensions "
            f"{format_shape(query_lead)} {_both_qk(query_shape, key_shape)}",
            field="key",
        ) from None
    try:
        batch = np.broadcast_shapes(query_key_lead, value_lead)
    except ValueError:
        raise ShapeError(
            f"value batch dimensions {format_shape(value_lead)} do not broadcast with the query/key batch "
            f"dimensions {format_shape(query_key_lead)} (query shape {format_shape(query_shape)}, "
            f"key shape {format_shape(key_shape)}, value shape {format_shape(value_shape)})",
            field="value",
        ) from None

    shapes = AttentionShapes(
        batch=tuple(int(size) for size in batch),
        n=n,
        m=m,
        d_k=d_k,
        d_v=value_shape[-1],
        single_query=single_query,
        kv_heads=kv_heads,
    )
    for field, optional_shape in (("mask", mask_shape), ("bias", bias_shape)):
        if optional_shape is not None:
            _check_broadcasts_to_weights(optional_shape, shapes, field=field)
    if alibi_shape is not None:
        try:
            fits = np.broadcast_shapes(alibi_shape, shapes.batch) == shapes.batch
        except ValueError:
            fits = False
        if not fits:
            raise ShapeError(
                f"alibi_slopes shape {format_shape(alibi_shape)} does not broadcast to the leading "
                f"dimensions {format_shape(shapes.batch)} (one slope per head: the query's dimension -3)",
                field="alibi_slopes",
            )
    return shapes


def _both_qk(query_shape: tuple[int, ...], key_shape: tuple[int, ...]) -> str:
    """The query and key shapes, for messages (built only when one is raised)."""
    return f"(query shape {format_shape(query_shape)}, key shape {format_shape(key_shape)})"


def _check_grouped_heads(
    query_shape: tuple[int, ...], key_shape: tuple[int, ...], value_shape: tuple[int, ...]
) -> int:
    """``H_kv`` for grouped-query attention, after checking the head axes (−3) of all three inputs."""
    for field, shape, rows in (
        ("query", query_shape, "n, d_k"),
        ("key", key_shape, "m, d_k"),
        ("value", value_shape, "m, d_v"),
    ):
        if len(shape) < 3:
            raise ShapeError(
                f"with enable_gqa, {field} must have a head axis [..., H, {rows}] but has shape "
                f"{format_shape(shape)}",
                field=field,
            )
    query_heads, kv_heads = query_shape[-3], key_shape[-3]
    if value_shape[-3] != kv_heads:
        raise ShapeError(
            f"value has {value_shape[-3]} heads but key has {kv_heads}; with enable_gqa both hold the H_kv "
            "key/value heads",
            field="value",
        )
    if kv_heads == 0 or query_heads % kv_heads:
        raise ShapeError(
            f"with enable_gqa the query's H_q={query_heads} heads must be a multiple of the key's "
            f"H_kv={kv_heads} heads (query head i reads key/value head i // (H_q / H_kv))",
            field="key",
        )
    return kv_heads


def _check_broadcasts_to_weights(shape: tuple[int, ...], shapes: AttentionShapes, *, field: str) -> None:
    target = shapes.weights_shape
    try:
        fits = np.broadcast_shapes(shape, target) == target
    except ValueError:
        fits = False
    if not fits:
        hint = f"; a 1-D {field} needs one entry per key (m={shapes.m})" if len(shape) == 1 else ""
        raise ShapeError(
            f"{field} shape {format_shape(shape)} does not broadcast to the attention weights shape "
            f"{format_shape(target)}{hint}",
            field=field,
        )


@dataclass(frozen=True)
class AttentionResult:
    """Attention output, plus the optional intermediates that were asked for.

    ``empty_rows`` indexes the rows that saw no key (all-zero output): an int64 array of shape (k, r),
    one row index of rank r = ``len(batch) + 1`` (``len(batch)`` for a single query) per empty row.
    """

    output: FloatArray
    weights: FloatArray | None
    scores: FloatArray | None
    logsumexp: FloatArray | None
    scale: float
    empty_rows: IntArray


def attention(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    options: AttentionOptions = DEFAULT_OPTIONS,
    *,
    include: Collection[AttentionOutput] = (),
    dtype: DTypeArg = np.float64,
    block_rows: int | None = None,
) -> AttentionResult:
    """``softmax(Q Kᵀ · scale + bias, over visible keys) @ V`` with broadcasting over leading dimensions.

    Shapes: ``query [..., n, d_k]`` (or ``[d_k]``, one query), ``key [..., m, d_k]``, ``value [..., m, d_v]``;
    the output is ``[..., n, d_v]``. ``include`` asks for intermediates beside it: ``weights`` and
    ``scores`` ``[..., n, m]``, ``logsumexp`` ``[..., n]`` (without the ``n`` axis for one query).
    ``options`` (:class:`AttentionOptions`) holds the mask, bias, causal masking, scale and the rest.
    ``dtype`` is the computation's, float64 or float32. Without weights or scores requested, query rows
    (and, for a large batch, batch entries) are processed in blocks (``block_rows`` rows, by default as
    many as fit in a few MB) so that temporaries stay small.
    """
    float_dtype = resolve_float_dtype(dtype)
    outputs = check_outputs(include, ATTENTION_OUTPUTS)
    if block_rows is not None:
        block_rows = check_int(block_rows, field="block_rows", minimum=1)
    mask, bias, alibi_slopes = options.mask, options.bias, options.alibi_slopes
    causal, causal_alignment, window = options.causal, options.causal_alignment, options.window
    scale, softcap, rotary, enable_gqa = options.scale, options.softcap, options.rotary, options.enable_gqa

    q = as_float_array(query, float_dtype, field="query")
    k = as_float_array(key, float_dtype, field="key")
    v = as_float_array(value, float_dtype, field="value")
    visible = None if mask is None else as_bool_mask(mask)
    b = None if bias is None else as_float_array(bias, float_dtype, field="bias")
    slopes = None if alibi_slopes is None else as_float_array(alibi_slopes, float_dtype, field="alibi_slopes")
    if slopes is not None and not np.isfinite(slopes).all():
        raise KernelError("alibi_slopes must be finite", field="alibi_slopes")
    if softcap is not None:
        # A softcap bounds the products of finite inputs that overflow; an input beyond the dtype's range
        # (1e39 in float32, inf once cast) would be bounded too, and answered: it is a 422 naming it.
        for field, array in (("query", q), ("key", k)):
            if not all_finite(array):
                raise overflow_error(field, float_dtype, field=field)
    shapes = attention_shapes(
        q.shape,
        k.shape,
        v.shape,
        mask_shape=None if visible is None else visible.shape,
        bias_shape=None if b is None else b.shape,
        alibi_shape=None if slopes is None else slopes.shape,
        enable_gqa=enable_gqa,
    )
    scale = 1.0 / math.sqrt(shapes.d_k) if scale is None else scale
    if abs(scale) > LARGEST[float_dtype]:  # checked first: the float32 cast would give inf
        raise overflow_error(f"the scale {scale:g}", float_dtype, field="scale")
    if softcap is not None and softcap > LARGEST[float_dtype]:  # likewise (its scores would be inf / inf)
        raise overflow_error(f"the softcap {softcap:g}", float_dtype, field="softcap")

    if shapes.single_query:
        # Internally a single query is one row; the axis is dropped again from every output.
        q = q[np.newaxis, :]
        visible = None if visible is None or visible.ndim == 0 else visible[..., np.newaxis, :]
        b = None if b is None or b.ndim == 0 else b[..., np.newaxis, :]
    offset = position_offset(shapes.n, shapes.m, causal_alignment)
    if rotary is not None:
        q, k = rotate_rows(q, k, rotary, alignment=causal_alignment, dtype=float_dtype)
    band = Band.build(n=shapes.n, m=shapes.m, causal=causal, alignment=causal_alignment, window=window)
    empty_indices = _empty_rows(shapes, band, visible, policy=options.empty_rows, window=window)

    operands = _Operands(
        query=q,
        key=k,
        value=v,
        visible=visible,
        bias=b,
        alibi=None if slopes is None else slopes[..., np.newaxis, np.newaxis],
    )
    core = shapes
    if shapes.kv_heads is not None:
        groups = shapes.batch[-1] // shapes.kv_heads
        operands = operands.grouped(shapes.kv_heads, groups)
        core = dataclasses.replace(shapes, batch=(*shapes.batch[:-1], shapes.kv_heads, groups))
    plan = AttentionPlan(
        shapes=core,
        dtype=float_dtype,
        # A scale that underflows to 0 in float32 is kept: all scores 0 (plus bias) is the float32 answer;
        # so is a softcap that does (every capped score lies within ±softcap), which _attend_block gives, and
        # one below the normal range, which its flush of subnormals would otherwise read as a division by 0.
        scale=float_dtype.type(scale),
        scale_factors=_flush_proof_factors(float_dtype.type(scale), float_dtype),
        softcap=None if softcap is None else _normal_or_zero(softcap, float_dtype),
        offset=offset,
        band=band,
        block_rows=block_rows,
        return_weights="weights" in outputs,
        return_scores="scores" in outputs,
        return_logsumexp="logsumexp" in outputs,
    )
    results = _attend(operands, plan)
    if shapes.kv_heads is not None:
        results = results.reshaped(shapes.batch)
    if shapes.single_query:
        results = results.first_row()
    return AttentionResult(
        output=results.output,
        weights=results.weights,
        scores=results.scores,
        logsumexp=results.logsumexp,
        scale=scale,
        empty_rows=empty_indices,
    )


def check_window(window: Sequence[int | None]) -> tuple[int | None, int | None]:
    """``window`` as ``(left, right)``: each an integer >= 0, or None for no bound on that side."""
    if len(window) != 2:
        raise KernelError(
            f"window must be a pair [left, right] of integers >= 0 or null, got {window!r}", field="window"
        )
    left, right = (
        None if side is None else check_int(side, field="window", minimum=0, maximum=2**62) for side in window
    )
    return left, right


def rotate_rows(
    q: FloatArray, k: FloatArray, rotary: Rotary, *, alignment: CausalAlignment, dtype: FloatDType
) -> tuple[FloatArray, FloatArray]:
    """The query rows ``q [..., n, d_k]`` and key rows ``k [..., m, d_k]`` with rotary embedding, at
    positions that follow the causal ``alignment`` unless the option places them."""
    n, m = q.shape[-2], k.shape[-2]
    dim, base = check_rotary(rotary, q.shape[-1])
    query_offset, key_offset = rotary.offsets(n, m, alignment)
    check_positions_from(query_offset, n, field="rotary.query_offset")
    check_positions_from(key_offset, m, field="rotary.key_offset")
    query_positions = np.arange(n, dtype=np.float64) + query_offset
    key_positions = np.arange(m, dtype=np.float64) + key_offset
    query_tables = tables_at(query_positions, dim, base, dtype, field="rotary.base")
    key_tables = tables_at(key_positions, dim, base, dtype, field="rotary.base")
    return (
        rotate(q, query_tables, style=rotary.style, field="query"),
        rotate(k, key_tables, style=rotary.style, field="key"),
    )


@dataclass(frozen=True)
class AttentionPlan:
    """What :func:`attention` derives once from its arguments, for the helpers that do the arithmetic."""

    shapes: AttentionShapes
    dtype: FloatDType
    scale: Float  # in the computation's dtype
    # The scale as factors the flush of subnormals reads as they are: itself, or for a subnormal scale (which
    # it would read as 0) its normal multiple by 2**64 and then 2**-64, exact powers of two.
    scale_factors: tuple[Float, ...]
    softcap: Float | None
    offset: int  # the key position of query row 0 (ALiBi's distances)
    band: Band | None  # causal masking and the window, in key coordinates (None: no band)
    block_rows: int | None  # query rows per block (None: as many as fit in BLOCK_ELEMENTS)
    return_weights: bool
    return_scores: bool
    return_logsumexp: bool

    @property
    def materialized(self) -> bool:
        """Whether whole ``[..., n, m]`` results are returned (then blocking saves nothing)."""
        return self.return_weights or self.return_scores


def _to_batch(array: ArrayT, batch: tuple[int, ...]) -> ArrayT:
    """``array`` broadcast (as a view) to ``batch`` followed by its own last two dimensions."""
    rows = array.shape[-2] if array.ndim >= 2 else 1
    columns = array.shape[-1] if array.ndim >= 1 else 1
    return cast("ArrayT", np.broadcast_to(array, (*batch, rows, columns)))  # a view: same dtype


def _view(array: ArrayT, index: tuple[int | slice | EllipsisType | None, ...]) -> ArrayT:
    return cast("ArrayT", array[index])  # basic indexing: a view of the same dtype


@dataclass(frozen=True)
class _Operands:
    """The input arrays, row-shaped: ``query [..., n, d_k]`` even for a single query."""

    query: FloatArray
    key: FloatArray
    value: FloatArray
    visible: BoolArray | None
    bias: FloatArray | None
    alibi: FloatArray | None  # the slopes, [..., 1, 1]

    def to_batch(self, batch: tuple[int, ...]) -> _Operands:
        """Every array broadcast to the whole batch (views), so that a block indexes them all alike."""
        return _Operands(
            query=_to_batch(self.query, batch),
            key=_to_batch(self.key, batch),
            value=_to_batch(self.value, batch),
            visible=None if self.visible is None else _to_batch(self.visible, batch),
            bias=None if self.bias is None else _to_batch(self.bias, batch),
            alibi=None if self.alibi is None else _to_batch(self.alibi, batch),
        )

    def grouped(self, kv_heads: int, groups: int) -> _Operands:
        """Query heads ``[..., H_q, ·, ·]`` as ``[..., H_kv, G, ·, ·]`` and key/value heads as
        ``[..., H_kv, 1, ·, ·]``: each group of ``G`` query heads broadcasts against its key/value head."""

        def split(array: ArrayT) -> ArrayT:
            if array.ndim < 3:
                return array  # no head axis: broadcasts as before
            if array.shape[-3] == 1:
                return _view(array, (..., np.newaxis, slice(None), slice(None)))
            return cast("ArrayT", array.reshape(*array.shape[:-3], kv_heads, groups, *array.shape[-2:]))

        def shared(array: FloatArray) -> FloatArray:
            return _view(array, (..., np.newaxis, slice(None), slice(None)))

        return _Operands(
            query=split(self.query),
            key=shared(self.key),
            value=shared(self.value),
            visible=None if self.visible is None else split(self.visible),
            bias=None if self.bias is None else split(self.bias),
            alibi=None if self.alibi is None else split(self.alibi),
        )

    def block(self, index: tuple[int | slice, ...]) -> _Operands:
        """The batch entries ``index`` of operands that :meth:`to_batch` broadcast."""
        return _Operands(
            query=_view(self.query, index),
            key=_view(self.key, index),
            value=_view(self.value, index),
            visible=None if self.visible is None else _view(self.visible, index),
            bias=None if self.bias is None else _view(self.bias, index),
            alibi=None if self.alibi is None else _view(self.alibi, index),
        )


@dataclass(frozen=True)
class _Outputs:
    """The result arrays, row-shaped (``[..., n, ·]``); the optional ones are None unless asked for."""

    output: FloatArray
    weights: FloatArray | None
    scores: FloatArray | None
    logsumexp: FloatArray | None

    @classmethod
    def allocate(cls, plan: AttentionPlan) -> _Outputs:
        batch, n, m, dtype = plan.shapes.batch, plan.shapes.n, plan.shapes.m, plan.dtype
        return cls(
            output=np.empty((*batch, n, plan.shapes.d_v), dtype=dtype),
            weights=np.empty((*batch, n, m), dtype=dtype) if plan.return_weights else None,
            scores=np.empty((*batch, n, m), dtype=dtype) if plan.return_scores else None,
            logsumexp=np.empty((*batch, n), dtype=dtype) if plan.return_logsumexp else None,
        )

    def block(self, index: tuple[int | slice, ...]) -> _Outputs:
        """Views of the batch entries ``index``: the helpers write into them."""
        return _Outputs(
            output=_view(self.output, index),
            weights=None if self.weights is None else _view(self.weights, index),
            scores=None if self.scores is None else _view(self.scores, index),
            logsumexp=None if self.logsumexp is None else _view(self.logsumexp, index),
        )

    def reshaped(self, batch: tuple[int, ...]) -> _Outputs:
        """The same results with leading dimensions ``batch`` (grouped heads back to ``H_q``; views)."""

        def to(array: FloatArray, trailing: int) -> FloatArray:
            return array.reshape(*batch, *array.shape[array.ndim - trailing :])

        return _Outputs(
            output=to(self.output, 2),
            weights=None if self.weights is None else to(self.weights, 2),
            scores=None if self.scores is None else to(self.scores, 2),
            logsumexp=None if self.logsumexp is None else to(self.logsumexp, 1),
        )

    def first_row(self) -> _Outputs:
        """Without the row axis: the shapes of a single query's results."""
        return _Outputs(
            output=_view(self.output, (..., 0, slice(None))),
            weights=None if self.weights is None else _view(self.weights, (..., 0, slice(None))),
            scores=None if self.scores is None else _view(self.scores, (..., 0, slice(None))),
            logsumexp=None if self.logsumexp is None else _view(self.logsumexp, (..., 0)),
        )


def _empty_rows(
    shapes: AttentionShapes,
    band: Band | None,
    visible: BoolArray | None,
    *,
    policy: EmptyRowPolicy,
    window: tuple[int | None, int | None] | None,
) -> IntArray:
    """The indices ``(k, r)`` of the query rows that see no key; raises unless ``policy`` is zero."""
    index_rank = len(shapes.batch) + (0 if shapes.single_query else 1)
    if band is None and visible is None and shapes.m:  # every row sees every key: nothing to scan
        return np.empty((0, index_rank), dtype=np.int64)
    flags = empty_row_flags(band, visible, batch=shapes.batch, n=shapes.n, m=shapes.m)
    if shapes.single_query:
        flags = flags[..., 0]
    if not flags.any():
        return np.empty((0, index_rank), dtype=np.int64)
    if policy == "error":
        count = int(np.count_nonzero(flags))
        # Only the first few are indexed: listing millions of rows would cost seconds and gigabytes.
        listed = first_indices(flags, LISTED_EMPTY_ROWS)
        # Blame what the caller sent: the band (window, causal) when it alone empties the rows, else the mask.
        band_alone = empty_row_flags(band, None, batch=shapes.batch, n=shapes.n, m=shapes.m)
        if shapes.single_query:
            band_alone = band_alone[..., 0]
        field = "window" if window is not None else "causal"
        if visible is not None and not bool(band_alone[flags].all()):
            field = "mask"
        raise EmptyRowError(
            _empty_rows_message(listed, count, shapes, band), rows=listed, count=count, field=field
        )
    return np.argwhere(flags).astype(np.int64, copy=False)


def _empty_rows_message(rows: list[list[int]], count: int, shapes: AttentionShapes, band: Band | None) -> str:
    message = describe_rows("query row", "no visible key", rows, count)
    if band is not None and band.offset < 0 and band.right == 0:
        message += (
            f" (with lower_right causal alignment and more queries than keys, n={shapes.n} > m={shapes.m}, "
            f"the first {-band.offset} query rows see no key)"
        )
    return message + "; allow at least one key per row, or ask for empty rows to be zero"


def _attend(operands: _Operands, plan: AttentionPlan) -> _Outputs:
    """The attention on row-shaped operands, in blocks of batch entries and rows, into new outputs."""
    outputs = _Outputs.allocate(plan)
    batch = plan.shapes.batch
    # Even one row per block is prod(batch) x m scores, so a large batch is also split into blocks, unless
    # the weights or scores are returned anyway (then the temporaries are no larger than the results).
    blocks = [()] if plan.materialized else batch_blocks(batch, plan.shapes.m)
    if len(blocks) == 1:
        _attend_rows(operands, plan, batch, outputs)
        return outputs
    broadcast = operands.to_batch(batch)
    for index in blocks:
        block_outputs = outputs.block(index)
        _attend_rows(broadcast.block(index), plan, block_outputs.output.shape[:-2], block_outputs)
    return outputs


def _attend_rows(operands: _Operands, plan: AttentionPlan, batch: tuple[int, ...], outputs: _Outputs) -> None:
    """Attention over the batch entries ``batch`` of ``operands``, a block of query rows at a time."""
    n, m = plan.shapes.n, plan.shapes.m
    block_rows = plan.block_rows
    if block_rows is None:
        block_rows = n if plan.materialized else rows_per_block(math.prod(batch) * m, n)
    key_t = operands.key.swapaxes(-1, -2)

    # One context for every step (entering one costs more than a tiny block's arithmetic): overflow and
    # NaN in the scores and the output are detected by the finiteness checks below, and a span beyond the
    # float range shifts to -inf (probability 0).
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        for start in range(0, n, block_rows):
            stop = min(start + block_rows, n)
            _attend_block(operands, key_t, plan, (*batch, stop - start, m), start, stop, outputs)


def _soft_capped(scores: FloatArray, softcap: Float) -> None:
    """``scores`` becomes ``softcap · tanh(scores / softcap)``, in place, under the flush of subnormals.

    A quotient below the normal range (``|scores|`` under ``softcap`` · 2.2e-308: a softcap of 1e308 over
    ordinary scores) is read as 0 there, where ``tanh`` is the identity and the capped score is the score
    itself: those scores are left as they are. Computed in a second array and copied back, as ``where=``
    masks on the steps themselves cost twice the time when the cut runs through the scores; a piece at a
    time, so that the second array stays small when the scores are held whole (weights asked for).
    """
    flat = scores.reshape(-1) if scores.flags.c_contiguous else scores
    for start in range(0, max(flat.shape[0], 1), SOFTCAP_PIECE):
        piece = flat[start : start + SOFTCAP_PIECE]
        capped = piece / softcap
        np.tanh(capped, out=capped)
        capped *= softcap
        np.copyto(piece, capped, where=capped != 0)  # 0 only from a score of 0 or a flushed quotient


SOFTCAP_PIECE = 1 << 16  # scores capped at a time: 512 KiB of float64 beside them


def _flush_proof_factors(scale: Float, dtype: FloatDType) -> tuple[Float, ...]:
    """``scale`` as factors whose product is exact and none of which is subnormal (see AttentionPlan)."""
    if scale == 0 or abs(float(scale)) >= SMALLEST_NORMAL[dtype]:
        return (scale,)
    return (scale * dtype.type(2.0**64), dtype.type(2.0**-64))


def _normal_or_zero(value: float, dtype: FloatDType) -> Float:
    """``value`` in ``dtype``, or 0 when it is below the dtype's normal range (the flush of subnormals)."""
    return dtype.type(value) if abs(value) >= SMALLEST_NORMAL[dtype] else dtype.type(0)


def _attend_block(
    operands: _Operands,
    key_t: FloatArray,
    plan: AttentionPlan,
    block_shape: tuple[int, ...],
    start: int,
    stop: int,
    outputs: _Outputs,
) -> None:
    """Query rows ``start:stop``: their scores ``block_shape`` (``[..., rows, m]``) and results, written
    into ``outputs``. Runs inside :func:`_attend_rows`' errstate context."""
    m = block_shape[-1]
    block_query = operands.query[..., start:stop, :]
    block_bias = None if operands.bias is None else row_block(operands.bias, start, stop)
    hidden = hidden_keys(plan.band, operands.visible, start, stop, m)

    # Every step flushes subnormals (see _common), the options' too: scores below the normal range (a scale
    # of 1e-310, or 1e-300 after products of 1e-10) made the scaling, softcap, ALiBi and softmax run 12×
    # slower (7.8 s for the block's worst case). A softcap below it is 0 in the plan.
    with flush_subnormals():
        scores = np.matmul(block_query, key_t)
        if scores.shape != block_shape:  # value or mask/bias carry batch dims that q and k lack
            scores = np.broadcast_to(scores, block_shape).copy()
        for factor in plan.scale_factors:
            scores *= factor
        if plan.softcap == 0:  # underflowed to 0 in float32: ±0 bounds every score (0 / 0 would be NaN)
            # A NaN stays: it comes from an input beyond the dtype's range (0 · inf), which the check blames.
            np.copyto(scores, 0.0, where=~np.isnan(scores))
        elif plan.softcap is not None:  # bounded by ±softcap: an overflowed product becomes ±softcap
            _soft_capped(scores, plan.softcap)
        if block_bias is not None:
            scores += block_bias
        alibi = None if operands.alibi is None else _alibi(operands.alibi, plan, start, stop)
        if alibi is not None:
            scores += alibi
        if not _all_finite_or_hidden(scores, hidden):
            field = _blame_for_scores(block_query, key_t, block_bias, alibi, plan, hidden)
            raise overflow_error("the attention scores", plan.dtype, field=field)
        if hidden is not None:
            np.copyto(scores, -np.inf, where=hidden)

        row_max = scores.max(axis=-1, keepdims=True, initial=-np.inf)
        # Only a hidden key (or no key at all) can leave a row without a finite score.
        empty = row_max == -np.inf if hidden is not None or m == 0 else None
        if empty is not None and not empty.any():
            empty = None
        if outputs.scores is not None:
            outputs.scores[..., start:stop, :] = scores
        # Empty rows are all -inf; shifting them by 0 instead of -inf gives exp() == 0 rather than NaN.
        scores -= row_max if empty is None else np.where(empty, 0, row_max)
        # Weights below the smallest normal number are 0 under flush_subnormals; exp() computes them slowly,
        # so their scores are -inf first (one cheap pass; the same weights).
        np.copyto(scores, -np.inf, where=scores < EXP_UNDERFLOW[plan.dtype])
        np.exp(scores, out=scores)
        denominator = scores.sum(axis=-1, keepdims=True)
        if empty is not None:
            denominator[empty] = 1
        # Normalizing before the product keeps it a convex combination of values, so it cannot overflow
        # where the true output is finite.
        scores /= denominator
        block_output = outputs.output[..., start:stop, :]
        np.matmul(scores, operands.value, out=block_output)
        if not all_finite(block_output):
            without_hidden = _output_without_hidden_values(scores, operands.value, hidden)
            if without_hidden is None:
                raise overflow_error("the attention output", plan.dtype, field="value")
            block_output[...] = without_hidden
    if outputs.weights is not None:
        outputs.weights[..., start:stop, :] = scores
    if outputs.logsumexp is not None:
        outputs.logsumexp[..., start:stop] = (np.log(denominator) + row_max)[..., 0]


def _output_without_hidden_values(
    weights: FloatArray, value: FloatArray, hidden: BoolArray | None
) -> FloatArray | None:
    """The output when every non-finite value (1e39 in float32) belongs to a key hidden from every row.

    A hidden key's weight is 0 by definition, so its value takes no part in the answer, but 0 × inf is NaN
    in the product; such values are left out. Only hidden keys qualify: a visible key whose weight merely
    underflowed to 0 may hold a value large enough that weight × value is not small (1e-46 × 1e300), so
    a non-finite value there still overflows the answer. None when that is the case.
    """
    if hidden is None:
        return None
    non_finite = ~np.isfinite(value)
    bad_keys = non_finite.any(axis=-1)  # [..., m]
    seen_by_some_row = ~np.broadcast_to(hidden, weights.shape).all(axis=-2)  # [..., m]
    if np.any(bad_keys & seen_by_some_row):
        return None
    finite_value = np.where(non_finite, 0, value).astype(value.dtype, copy=False)
    with np.errstate(over="ignore", invalid="ignore"):
        output: FloatArray = np.matmul(weights, finite_value)
    return output if np.isfinite(output).all() else None


def _alibi(slopes: FloatArray, plan: AttentionPlan, start: int, stop: int) -> FloatArray:
    """``−slope · |i' − j|`` for query rows ``start:stop`` and every key, ``[..., rows, m]``."""
    positions = np.arange(start, stop) + plan.offset
    distances = np.abs(positions[:, np.newaxis] - np.arange(plan.shapes.m)).astype(plan.dtype)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow shows as non-finite scores, checked
        term: FloatArray = -slopes * distances
    return term


def _all_finite_or_hidden(values: FloatArray, hidden: BoolArray | None) -> bool:
    """Whether every entry of ``values`` is finite or hidden (a hidden key may hold anything)."""
    return all_finite(values) or (hidden is not None and bool((np.isfinite(values) | hidden).all()))


def _blame_for_scores(
    q: FloatArray,
    key_t: FloatArray,
    bias: FloatArray | None,
    alibi: FloatArray | None,
    plan: AttentionPlan,
    hidden: BoolArray | None,
) -> str:
    """The input behind non-finite scores: a non-finite input, else the step that first overflows.

    Only called once the scores of a block overflowed, so recomputing them step by step costs nothing
    in the common case.
    """
    for field, array in (("bias", bias), ("query", q), ("key", key_t)):
        if array is not None and not np.isfinite(array).all():
            return field
    with np.errstate(over="ignore", invalid="ignore"):
        products = np.matmul(q, key_t)
        if not _all_finite_or_hidden(products, hidden):
            largest_query = float(np.max(np.abs(q), initial=0.0))
            largest_key = float(np.max(np.abs(key_t), initial=0.0))
            return "query" if largest_query >= largest_key else "key"
        if plan.softcap is None and not _all_finite_or_hidden(products * plan.scale, hidden):
            return "scale"
    if alibi is not None and not _all_finite_or_hidden(alibi, hidden):
        return "alibi_slopes"
    return "bias" if bias is not None else "alibi_slopes"
