"""Masked scaled dot-product attention, batched over any leading dimensions."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

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
    batch_blocks,
    check_finite_scalar,
    check_int,
    first_indices,
    overflow_error,
    resolve_float_dtype,
    rows_per_block,
)
from service.kernels.errors import EmptyRowError, KernelError, ShapeError, describe_rows, format_shape

CausalAlignment = Literal["lower_right", "upper_left"]
EmptyRowPolicy = Literal["error", "zero"]


@dataclass(frozen=True)
class AttentionShapes:
    """The sizes of one attention call, derived from the input shapes alone."""

    batch: tuple[int, ...]
    n: int
    m: int
    d_k: int
    d_v: int
    single_query: bool

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
) -> AttentionShapes:
    """Check that the shapes fit together (without allocating) and return the derived sizes."""
    query_shape, key_shape, value_shape = tuple(query_shape), tuple(key_shape), tuple(value_shape)
    if len(query_shape) < 1:
        raise ShapeError("query must have at least 1 dimension [..., n, d_k] but is a scalar", field="query")
    for field, shape in (("key", key_shape), ("value", value_shape)):
        if len(shape) < 2:
            axes = "[..., m, d_k]" if field == "key" else "[..., m, d_v]"
            raise ShapeError(
                f"{field} must have at least 2 dimensions {axes} but has shape {format_shape(shape)}",
                field=field,
            )
    both_qk = f"(query shape {format_shape(query_shape)}, key shape {format_shape(key_shape)})"
    d_k = query_shape[-1]
    if key_shape[-1] != d_k:
        raise ShapeError(f"key has d_k={key_shape[-1]} but query has d_k={d_k} {both_qk}", field="key")
    if d_k == 0:
        raise ShapeError(
            f"query has d_k=0; queries and keys need at least one feature {both_qk}", field="query"
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
            f"{format_shape(query_lead)} {both_qk}",
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
    )
    for field, optional_shape in (("mask", mask_shape), ("bias", bias_shape)):
        if optional_shape is not None:
            _check_broadcasts_to_weights(tuple(optional_shape), shapes, field=field)
    return shapes


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
    *,
    mask: ArrayLike | None = None,
    bias: ArrayLike | None = None,
    causal: bool = False,
    causal_alignment: CausalAlignment = "lower_right",
    scale: float | None = None,
    empty_rows: EmptyRowPolicy = "error",
    return_weights: bool = False,
    return_scores: bool = False,
    return_logsumexp: bool = False,
    dtype: DTypeArg = np.float64,
    block_rows: int | None = None,
) -> AttentionResult:
    """``softmax(Q Kᵀ · scale + bias, over visible keys) @ V`` with broadcasting over leading dimensions.

    ``mask`` is True where a query may attend to a key; ``causal`` further hides later keys. Without
    weights or scores requested, query rows (and, for a large batch, batch entries) are processed in
    blocks so that temporaries stay small.
    """
    float_dtype = resolve_float_dtype(dtype)
    if causal_alignment not in ("lower_right", "upper_left"):
        raise KernelError(
            f"causal_alignment must be 'lower_right' or 'upper_left', got {causal_alignment!r}",
            field="causal_alignment",
        )
    if empty_rows not in ("error", "zero"):
        raise KernelError(f"empty_rows must be 'error' or 'zero', got {empty_rows!r}", field="empty_rows")
    if block_rows is not None:
        block_rows = check_int(block_rows, field="block_rows", minimum=1)

    q = as_float_array(query, float_dtype, field="query")
    k = as_float_array(key, float_dtype, field="key")
    v = as_float_array(value, float_dtype, field="value")
    visible = None if mask is None else as_bool_mask(mask)
    b = None if bias is None else as_float_array(bias, float_dtype, field="bias")
    shapes = attention_shapes(
        q.shape,
        k.shape,
        v.shape,
        mask_shape=None if visible is None else visible.shape,
        bias_shape=None if b is None else b.shape,
    )
    scale = 1.0 / math.sqrt(shapes.d_k) if scale is None else check_finite_scalar(scale, field="scale")

    if shapes.single_query:
        # Internally a single query is one row; the axis is dropped again from every output.
        q = q[np.newaxis, :]
        visible = None if visible is None or visible.ndim == 0 else visible[..., np.newaxis, :]
        b = None if b is None or b.ndim == 0 else b[..., np.newaxis, :]
    causal_offset = None if not causal else (shapes.m - shapes.n if causal_alignment == "lower_right" else 0)

    index_rank = len(shapes.batch) + (0 if shapes.single_query else 1)
    if visible is None and shapes.m > 0 and (causal_offset is None or causal_offset >= 0):
        empty_indices = np.empty((0, index_rank), dtype=np.int64)  # every row sees key 0; skips ~9 µs
    else:
        empty_flags = _empty_row_flags(visible, shapes, causal_offset)
        if shapes.single_query:
            empty_flags = empty_flags[..., 0]
        if empty_rows == "error" and (count := int(np.count_nonzero(empty_flags))):
            # Only the first few are indexed: listing millions of rows would cost seconds and gigabytes.
            listed = first_indices(empty_flags, LISTED_EMPTY_ROWS)
            raise EmptyRowError(
                _empty_rows_message(listed, count, causal_offset, shapes),
                rows=listed,
                count=count,
                field="mask" if visible is not None else "causal",  # blame what the caller sent
            )
        empty_indices = np.argwhere(empty_flags).astype(np.int64, copy=False)

    hidden = None if visible is None else ~visible
    result = _attend(
        q,
        k,
        v,
        hidden=hidden,
        bias=b,
        causal_offset=causal_offset,
        scale=scale,
        shapes=shapes,
        dtype=float_dtype,
        block_rows=block_rows,
        return_weights=return_weights,
        return_scores=return_scores,
        return_logsumexp=return_logsumexp,
    )
    output, weights, scores, logsumexp = result
    if shapes.single_query:
        output = output[..., 0, :]
        weights = None if weights is None else weights[..., 0, :]
        scores = None if scores is None else scores[..., 0, :]
        logsumexp = None if logsumexp is None else logsumexp[..., 0]
    return AttentionResult(
        output=output,
        weights=weights,
        scores=scores,
        logsumexp=logsumexp,
        scale=scale,
        empty_rows=empty_indices,
    )


def _empty_row_flags(
    visible: BoolArray | None, shapes: AttentionShapes, causal_offset: int | None
) -> BoolArray:
    """True for each row of ``batch + (n,)`` that has no visible key; uses the mask only, not the data."""
    rows_shape = (*shapes.batch, shapes.n)
    if shapes.m == 0:
        return np.ones(rows_shape, dtype=np.bool_)
    # The last key a row may see: every key, or under causal masking key i + offset.
    last_key = (
        np.arange(shapes.n) + causal_offset if causal_offset is not None else np.full(shapes.n, shapes.m - 1)
    )
    if visible is None:
        has_key = last_key >= 0
    else:
        mask = (
            np.broadcast_to(visible, (*visible.shape[:-1], shapes.m)) if visible.ndim else visible.reshape(1)
        )
        first_visible = np.argmax(mask, axis=-1)
        # A row sees a key iff its first visible key is within reach.
        has_key = mask.any(axis=-1) & (first_visible <= last_key)
    return ~np.broadcast_to(has_key, rows_shape)


def _empty_rows_message(
    rows: list[list[int]], count: int, causal_offset: int | None, shapes: AttentionShapes
) -> str:
    message = describe_rows("query row", "no visible key", rows, count)
    if causal_offset is not None and causal_offset < 0:
        message += (
            f" (with lower_right causal alignment and more queries than keys, n={shapes.n} > m={shapes.m}, "
            f"the first {-causal_offset} query rows see no key)"
        )
    return message + "; allow at least one key per row, or ask for empty rows to be zero"


def _attend(
    q: FloatArray,
    k: FloatArray,
    v: FloatArray,
    *,
    hidden: BoolArray | None,
    bias: FloatArray | None,
    causal_offset: int | None,
    scale: float,
    shapes: AttentionShapes,
    dtype: np.dtype[np.floating[Any]],
    block_rows: int | None,
    return_weights: bool,
    return_scores: bool,
    return_logsumexp: bool,
) -> tuple[FloatArray, FloatArray | None, FloatArray | None, FloatArray | None]:
    """The attention on row-shaped inputs ([..., n, d_k] queries), in blocks of batch entries and rows."""
    if abs(scale) > float(np.finfo(dtype).max):  # checked first: the float32 cast would warn and give inf
        raise overflow_error(f"the scale {scale:g}", dtype, field="scale")
    # A scale that underflows to 0 in float32 is kept: all scores 0 (plus bias) is the answer in float32.
    scale_typed = dtype.type(scale)

    batch, n, m = shapes.batch, shapes.n, shapes.m
    output: FloatArray = np.empty((*batch, n, shapes.d_v), dtype=dtype)
    weights: FloatArray | None = np.empty((*batch, n, m), dtype=dtype) if return_weights else None
    scores: FloatArray | None = np.empty((*batch, n, m), dtype=dtype) if return_scores else None
    logsumexp: FloatArray | None = np.empty((*batch, n), dtype=dtype) if return_logsumexp else None
    inputs: tuple[Any, ...] = (q, k, v, hidden, bias)
    # Even one row per block is prod(batch) x m scores, so a large batch is also split into blocks, unless
    # the weights or scores are returned anyway (then the temporaries are no larger than the results).
    blocks = [()] if return_weights or return_scores else batch_blocks(batch, m)
    if len(blocks) > 1:
        # Every input broadcast to the whole batch (views, no copies), so that a block indexes them all alike.
        inputs = tuple(None if array is None else _to_batch(array, batch) for array in inputs)
    for index in blocks:
        parts: tuple[Any, ...] = tuple(None if a is None else a[index] for a in inputs) if index else inputs
        block_q, block_k, block_v, block_hidden, block_bias = parts
        block_output = output[index]
        _attend_rows(
            block_q,
            block_k,
            block_v,
            hidden=block_hidden,
            bias=block_bias,
            causal_offset=causal_offset,
            scale=scale_typed,
            shapes=dataclasses.replace(shapes, batch=block_output.shape[:-2]) if index else shapes,
            block_rows=block_rows,
            output=block_output,
            weights=None if weights is None else weights[index],
            scores_out=None if scores is None else scores[index],
            logsumexp=None if logsumexp is None else logsumexp[index],
        )
    return output, weights, scores, logsumexp


def _to_batch(array: Any, batch: tuple[int, ...]) -> Any:
    """``array`` broadcast (as a view) to ``batch`` followed by its own last two dimensions."""
    rows = array.shape[-2] if array.ndim >= 2 else 1
    columns = array.shape[-1] if array.ndim >= 1 else 1
    return np.broadcast_to(array, (*batch, rows, columns))


def _attend_rows(
    q: FloatArray,
    k: FloatArray,
    v: FloatArray,
    *,
    hidden: BoolArray | None,
    bias: FloatArray | None,
    causal_offset: int | None,
    scale: np.floating[Any],
    shapes: AttentionShapes,
    block_rows: int | None,
    output: FloatArray,
    weights: FloatArray | None,
    scores_out: FloatArray | None,
    logsumexp: FloatArray | None,
) -> None:
    """Attention over the whole of ``shapes.batch``, one block of query rows at a time, into the outputs."""
    n, m = shapes.n, shapes.m
    if block_rows is None:
        materialized = weights is not None or scores_out is not None
        block_rows = n if materialized else rows_per_block(math.prod(shapes.batch) * m, n)
    key_t = np.swapaxes(k, -1, -2)
    key_positions = np.arange(m)

    for start in range(0, n, block_rows):
        stop = min(start + block_rows, n)
        block_shape = (*shapes.batch, stop - start, m)
        block_query = q[..., start:stop, :]
        block_bias = None if bias is None else _row_block(bias, start, stop)
        block_hidden = None if hidden is None else _row_block(hidden, start, stop)
        if causal_offset is not None:
            causal_hidden = key_positions > (np.arange(start, stop) + causal_offset)[:, np.newaxis]
            block_hidden = causal_hidden if block_hidden is None else block_hidden | causal_hidden

        # Overflow in any of these steps is detected by the finiteness check below.
        with np.errstate(over="ignore", invalid="ignore"):
            scores = np.matmul(block_query, key_t)
            if scores.shape != block_shape:  # value or mask/bias carry batch dims that q and k lack
                scores = np.broadcast_to(scores, block_shape).copy()
            scores *= scale
            if block_bias is not None:
                scores += block_bias
        if not _all_finite_or_hidden(scores, block_hidden):
            field = _blame_for_scores(block_query, key_t, block_bias, scale, block_hidden)
            raise overflow_error("the attention scores", output.dtype, field=field)
        if block_hidden is not None:
            np.copyto(scores, -np.inf, where=block_hidden)

        row_max = np.max(scores, axis=-1, keepdims=True, initial=-np.inf)
        empty = np.isneginf(row_max)
        has_empty = bool(empty.any())
        if scores_out is not None:
            scores_out[..., start:stop, :] = scores
        # Empty rows are all -inf; shifting them by 0 instead of -inf gives exp() == 0 rather than NaN.
        with np.errstate(over="ignore", under="ignore"):  # a span beyond the float range shifts to -inf
            scores -= np.where(empty, 0, row_max) if has_empty else row_max
            np.exp(scores, out=scores)
        denominator = scores.sum(axis=-1, keepdims=True)
        if has_empty:
            denominator[empty] = 1
        # Normalizing before the product keeps it a convex combination of values, so it cannot overflow
        # where the true output is finite.
        scores /= denominator
        with np.errstate(over="ignore", invalid="ignore"):
            block_output = np.matmul(scores, v)
        if not np.isfinite(block_output).all():
            raise overflow_error("the attention output", output.dtype, field="value")
        output[..., start:stop, :] = block_output
        if weights is not None:
            weights[..., start:stop, :] = scores
        if logsumexp is not None:
            logsumexp[..., start:stop] = (np.log(denominator) + row_max)[..., 0]


def _row_block(array: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of a mask or bias, unless it is shared by every row (size 1 or no row axis)."""
    if array.ndim >= 2 and array.shape[-2] != 1:
        return array[..., start:stop, :]
    return array


def _all_finite_or_hidden(values: FloatArray, hidden: BoolArray | None) -> bool:
    """Whether every entry of ``values`` is finite or hidden (a hidden key may hold anything)."""
    finite = np.isfinite(values)
    return bool(finite.all()) or (hidden is not None and bool((finite | hidden).all()))


def _blame_for_scores(
    q: FloatArray,
    key_t: FloatArray,
    bias: FloatArray | None,
    scale: np.floating[Any],
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
        if not _all_finite_or_hidden(products * scale, hidden):
            return "scale"
    return "bias"
