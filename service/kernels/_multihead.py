"""A multi-head attention layer: projections, per-head attention with every option, the output projection.

As in Attention Is All You Need §3.2.2 and PyTorch's ``nn.MultiheadAttention`` (batch first), in the
``x @ W`` convention: ``Q = query @ w_q + b_q`` split into ``H_q`` heads of ``d_k``, ``K`` and ``V`` into
``H_kv`` heads, ``attention`` per head (grouped when ``H_kv < H_q``), the heads concatenated and projected
by ``w_o``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal, cast, get_args

import numpy as np
from numpy.typing import ArrayLike

from service.kernels._attention import (
    DEFAULT_OPTIONS,
    AttentionOptions,
    AttentionOutput,
    attention,
    check_outputs,
    rotate_rows,
)
from service.kernels._common import (
    DTypeArg,
    FloatArray,
    FloatDType,
    IntArray,
    as_float_array,
    check_int,
    linear,
    resolve_float_dtype,
)
from service.kernels._errors import KernelError, ShapeError, format_shape

# What a layer call can return beside its output (``include``): the per-head weights, scores and outputs,
# and the projections q, k, v as the scores used them.
MultiHeadOutput = Literal["weights", "scores", "heads", "q", "k", "v"]
MULTI_HEAD_OUTPUTS: tuple[str, ...] = get_args(MultiHeadOutput)


@dataclass(frozen=True)
class MultiHeadWeights:
    """A layer's projections and how they split into heads, in the ``x @ W`` convention.

    ``w_q [d_model, H_q·d_k]``, ``w_k [d_kv_model, H_kv·d_k]``, ``w_v [d_kv_model, H_kv·d_v]``, ``w_o
    [H_q·d_v, d_out]``; the biases (optional) have the projections' widths, ``b_q [H_q·d_k]`` and so on.
    ``num_heads`` is ``H_q``; ``num_kv_heads`` is ``H_kv`` (default ``H_q``), which must divide it (grouped-
    query attention). Held as given; :func:`multi_head_shapes` checks that they fit together.
    """

    w_q: ArrayLike
    w_k: ArrayLike
    w_v: ArrayLike
    w_o: ArrayLike
    num_heads: int
    num_kv_heads: int | None = None
    b_q: ArrayLike | None = None
    b_k: ArrayLike | None = None
    b_v: ArrayLike | None = None
    b_o: ArrayLike | None = None


@dataclass(frozen=True)
class MultiHeadShapes:
    """The sizes of one layer call, derived from the shapes alone (for the work limits, before allocating)."""

    batch: tuple[int, ...]
    n: int
    m: int
    d_model: int
    d_kv_model: int
    num_heads: int
    num_kv_heads: int
    d_k: int
    d_v: int
    d_out: int
    # How many batch entries each input has itself (the product of its leading dimensions): each is projected
    # over its own, before attention broadcasts them to ``batch``.
    query_rows: int = 1
    key_rows: int = 1
    value_rows: int = 1

    @property
    def heads_batch(self) -> tuple[int, ...]:
        """The leading dimensions of the per-head arrays: ``batch + (H_q,)``."""
        return (*self.batch, self.num_heads)

    @property
    def projection_multiplies(self) -> int:
        """Multiply-adds of the four projections, each over its input's own batch entries (the output's
        over the broadcast batch)."""
        return (
            self.query_rows * self.n * self.d_model * self.num_heads * self.d_k
            + self.key_rows * self.m * self.d_kv_model * self.num_kv_heads * self.d_k
            + self.value_rows * self.m * self.d_kv_model * self.num_kv_heads * self.d_v
            + math.prod(self.batch) * self.n * self.num_heads * self.d_v * self.d_out
        )

    @property
    def scores_elements(self) -> int:
        """Entries of every head's score matrix, ``prod(batch) · H_q · n · m``."""
        return math.prod(self.batch) * self.num_heads * self.n * self.m


def multi_head_shapes(
    query_shape: Sequence[int],
    key_shape: Sequence[int] | None,
    value_shape: Sequence[int] | None,
    weights: MultiHeadWeights,
) -> MultiHeadShapes:
    """Check the shapes of a layer call (without copying the weights) and return the derived sizes.

    ``query [..., n, d_model]``, ``key``/``value [..., m, d_kv_model]`` (None: the query's, as in self-
    attention); the weights' shapes as :class:`MultiHeadWeights` states them. Only the weights' shapes are
    read (``np.shape``): to check sizes alone, hold views such as ``np.broadcast_to(0.0, (d_model, width))``.
    """
    num_heads = check_int(weights.num_heads, field="num_heads", minimum=1)
    num_kv_heads = (
        num_heads
        if weights.num_kv_heads is None
        else check_int(weights.num_kv_heads, field="num_kv_heads", minimum=1)
    )
    if num_heads % num_kv_heads:
        raise KernelError(
            f"num_heads={num_heads} must be a multiple of num_kv_heads={num_kv_heads} (query head i reads "
            "key/value head i // (num_heads / num_kv_heads))",
            field="num_kv_heads",
        )
    w_q, w_k, w_v, w_o = (
        np.shape(weights.w_q),
        np.shape(weights.w_k),
        np.shape(weights.w_v),
        np.shape(weights.w_o),
    )
    b_q, b_k, b_v, b_o = (
        None if bias is None else np.shape(bias)
        for bias in (weights.b_q, weights.b_k, weights.b_v, weights.b_o)
    )
    query_shape = tuple(query_shape)
    key_shape = query_shape if key_shape is None else tuple(key_shape)
    value_shape = key_shape if value_shape is None else tuple(value_shape)
    for field, shape, axes in (
        ("query", query_shape, "[..., n, d_model]"),
        ("key", key_shape, "[..., m, d_kv_model]"),
        ("value", value_shape, "[..., m, d_kv_model]"),
    ):
        if len(shape) < 2:
            raise ShapeError(
                f"{field} must have at least 2 dimensions {axes} but has shape {format_shape(shape)}",
                field=field,
            )
    for field, shape in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o)):
        if len(tuple(shape)) != 2:
            raise ShapeError(
                f"{field} must be a matrix (2 dimensions), got shape {format_shape(tuple(shape))}",
                field=field,
            )
    d_model, m = query_shape[-1], key_shape[-2]
    d_kv_model = key_shape[-1]
    if value_shape[-2:] != (m, d_kv_model):
        raise ShapeError(
            f"value shape {format_shape(value_shape)} must end in [m, d_kv_model] = [{m}, {d_kv_model}], "
            "like the key's",
            field="value",
        )
    _expect_rows("w_q", w_q, d_model, "d_model (the query's last dimension)")
    _expect_rows("w_k", w_k, d_kv_model, "d_kv_model (the key's last dimension)")
    _expect_rows("w_v", w_v, d_kv_model, "d_kv_model (the value's last dimension)")
    d_k = _head_width("w_q", w_q[1], num_heads, "num_heads")
    if w_k[1] != num_kv_heads * d_k:
        raise ShapeError(
            f"w_k has {w_k[1]} columns but needs num_kv_heads · d_k = {num_kv_heads} · {d_k} = "
            f"{num_kv_heads * d_k}",
            field="w_k",
        )
    d_v = _head_width("w_v", w_v[1], num_kv_heads, "num_kv_heads")
    if w_o[0] != num_heads * d_v:
        raise ShapeError(
            f"w_o has {w_o[0]} rows but needs num_heads · d_v = {num_heads} · {d_v} = {num_heads * d_v}",
            field="w_o",
        )
    for field, bias, width in (
        ("b_q", b_q, w_q[1]),
        ("b_k", b_k, w_k[1]),
        ("b_v", b_v, w_v[1]),
        ("b_o", b_o, w_o[1]),
    ):
        if bias is not None and tuple(bias) != (width,):
            raise ShapeError(
                f"{field} must have shape [{width}], got {format_shape(tuple(bias))}", field=field
            )
    try:
        batch = np.broadcast_shapes(query_shape[:-2], key_shape[:-2], value_shape[:-2])
    except ValueError:
        raise ShapeError(
            f"the batch dimensions of query {format_shape(query_shape)}, key {format_shape(key_shape)} and "
            f"value {format_shape(value_shape)} do not broadcast",
            field="key",
        ) from None
    return MultiHeadShapes(
        batch=tuple(int(size) for size in batch),
        n=query_shape[-2],
        m=m,
        d_model=d_model,
        d_kv_model=d_kv_model,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        d_k=d_k,
        d_v=d_v,
        d_out=w_o[1],
        query_rows=math.prod(query_shape[:-2]),
        key_rows=math.prod(key_shape[:-2]),
        value_rows=math.prod(value_shape[:-2]),
    )


def _expect_rows(field: str, shape: Sequence[int], rows: int, what: str) -> None:
    if shape[0] != rows:
        raise ShapeError(f"{field} has {shape[0]} rows but needs {rows}, {what}", field=field)


def _head_width(field: str, columns: int, heads: int, heads_field: str) -> int:
    if columns == 0 or columns % heads:
        raise ShapeError(
            f"{field} has {columns} columns, which do not split into {heads_field}={heads} heads of equal "
            "width",
            field=field,
        )
    return columns // heads


@dataclass(frozen=True)
class MultiHeadResult:
    """The layer's output and, when asked for, the steps in between.

    ``output [..., n, d_out]``; ``weights``/``scores [..., H_q, n, m]``; ``heads [..., H_q, n, d_v]`` (the
    per-head outputs, concatenated along the features before ``w_o``); ``q [..., H_q, n, d_k]``, ``k [...,
    H_kv, m, d_k]``, ``v [..., H_kv, m, d_v]`` as they enter the scores (after rotary, when it is given).
    """

    output: FloatArray
    weights: FloatArray | None
    scores: FloatArray | None
    heads: FloatArray | None
    q: FloatArray | None
    k: FloatArray | None
    v: FloatArray | None
    scale: float
    empty_rows: IntArray


def multi_head_attention(
    query: ArrayLike,
    key: ArrayLike | None = None,
    value: ArrayLike | None = None,
    *,
    weights: MultiHeadWeights,
    options: AttentionOptions = DEFAULT_OPTIONS,
    include: Collection[MultiHeadOutput] = (),
    dtype: DTypeArg = np.float64,
) -> MultiHeadResult:
    """A multi-head attention layer (see the module docstring): ``query [..., n, d_model]``, ``key`` and
    ``value [..., m, d_kv_model]`` (default: the query) give ``output [..., n, d_out]``.

    Every option of :func:`attention` applies per head: ``mask``/``bias`` broadcast to ``[..., H_q, n, m]``,
    ``alibi_slopes`` to ``[..., H_q]``; ``enable_gqa`` is implied (``num_kv_heads`` decides the grouping).
    ``include`` asks for the steps in between (:class:`MultiHeadResult` gives their shapes).
    """
    float_dtype = resolve_float_dtype(dtype)
    outputs = check_outputs(include, MULTI_HEAD_OUTPUTS)
    x_q = as_float_array(query, float_dtype, field="query")
    x_k = x_q if key is None else as_float_array(key, float_dtype, field="key")
    x_v = x_k if value is None else as_float_array(value, float_dtype, field="value")
    wq, wk, wv, wo = (
        as_float_array(array, float_dtype, field=name)
        for name, array in (
            ("w_q", weights.w_q),
            ("w_k", weights.w_k),
            ("w_v", weights.w_v),
            ("w_o", weights.w_o),
        )
    )
    bq, bk, bv, bo = (
        None if array is None else as_float_array(array, float_dtype, field=name)
        for name, array in (
            ("b_q", weights.b_q),
            ("b_k", weights.b_k),
            ("b_v", weights.b_v),
            ("b_o", weights.b_o),
        )
    )
    cast_weights = dataclasses.replace(
        weights, w_q=wq, w_k=wk, w_v=wv, w_o=wo, b_q=bq, b_k=bk, b_v=bv, b_o=bo
    )
    shapes = multi_head_shapes(x_q.shape, x_k.shape, x_v.shape, cast_weights)
    # The arrays each projection reads, by the request's names (key and value default to the query).
    key_field = "query" if key is None else "key"
    value_field = key_field if value is None else "value"
    q = _project(x_q, wq, bq, shapes.num_heads, fields=("query", "w_q", "b_q"), dtype=float_dtype)
    k = _project(x_k, wk, bk, shapes.num_kv_heads, fields=(key_field, "w_k", "b_k"), dtype=float_dtype)
    v = _project(x_v, wv, bv, shapes.num_kv_heads, fields=(value_field, "w_v", "b_v"), dtype=float_dtype)
    if options.rotary is not None:
        # Rotated here rather than by attention: the rows shown under include q and k are the rotated ones,
        # and rotating them again for that computed the tables twice (the request's work counts them once).
        q, k = rotate_rows(q, k, options.rotary, alignment=options.causal_alignment, dtype=float_dtype)
    per_head = options
    if not options.enable_gqa or options.rotary is not None:
        per_head = dataclasses.replace(options, enable_gqa=True, rotary=None)
    # cast: the names are checked above, and weights and scores are attention's outputs too.
    per_head_outputs = cast("frozenset[AttentionOutput]", outputs & {"weights", "scores"})
    result = attention(q, k, v, per_head, include=per_head_outputs, dtype=float_dtype)
    heads = result.output  # [..., H_q, n, d_v]
    concatenated = np.swapaxes(heads, -3, -2).reshape(
        *heads.shape[:-3], shapes.n, shapes.num_heads * shapes.d_v
    )
    output = linear(concatenated, wo, bo, field="w_o", dtype=float_dtype, bias_field="b_o")
    return MultiHeadResult(
        output=output,
        weights=result.weights,
        scores=result.scores,
        heads=heads if "heads" in outputs else None,
        q=q if "q" in outputs else None,
        k=k if "k" in outputs else None,
        v=v if "v" in outputs else None,
        scale=result.scale,
        empty_rows=result.empty_rows,
    )


def _project(
    x: FloatArray,
    weight: FloatArray,
    bias: FloatArray | None,
    heads: int,
    *,
    fields: tuple[str, str, str],
    dtype: FloatDType,
) -> FloatArray:
    """``x [..., rows, d] @ weight + bias`` split into heads: ``[..., heads, rows, width / heads]``.
    ``fields`` names x, the weight and the bias, for an overflow to blame."""
    x_field, field, bias_field = fields
    projected = linear(x, weight, bias, field=field, dtype=dtype, x_field=x_field, bias_field=bias_field)
    rows, width = projected.shape[-2:]
    split = projected.reshape(*projected.shape[:-2], rows, heads, width // heads)
    # cast: the stubs lose a float32-or-float64 union through ascontiguousarray; the dtype is unchanged.
    return cast("FloatArray", np.ascontiguousarray(np.swapaxes(split, -3, -2)))
