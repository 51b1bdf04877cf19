"""One Transformer block over a sequence: self-attention and a feed-forward layer, each with its residual
connection and a normalization, in either order.

- ``pre`` (GPT-2, LLaMA; PyTorch's ``norm_first=True``): ``h = x + MHA(norm_1(x))``,
  ``y = h + FFN(norm_2(h))``.
- ``post`` (Attention Is All You Need §3.1; ``norm_first=False``): ``h = norm_1(x + MHA(x))``,
  ``y = norm_2(h + FFN(h))``.

The parts are the service's own kernels, called whole: :func:`multi_head_attention` with its
:class:`AttentionOptions`, :func:`feed_forward`, :func:`layer_norm`. An error from a part names its field by
its path (``attention.w_q``, ``feed_forward.w_3``, ``norm_1.weight``); the block's own input is ``x``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Literal, cast, get_args

import numpy as np
from numpy.typing import ArrayLike

from service.kernels._attention import DEFAULT_OPTIONS, AttentionOptions, check_outputs
from service.kernels._common import (
    DTypeArg,
    FloatArray,
    FloatDType,
    IntArray,
    as_float_array,
    overflow_error,
    resolve_float_dtype,
)
from service.kernels._errors import KernelError, ShapeError, fields_under, format_shape
from service.kernels._feed_forward import (
    FeedForwardShapes,
    FeedForwardWeights,
    feed_forward,
    feed_forward_shapes,
)
from service.kernels._multihead import (
    MultiHeadOutput,
    MultiHeadShapes,
    MultiHeadWeights,
    multi_head_attention,
    multi_head_shapes,
)
from service.kernels._norms import DEFAULT_NORM, NormOptions, layer_norm, norm_shape

NormPosition = Literal["pre", "post"]
# What a block call can return beside its output: the per-head attention weights, the residual stream h.
BlockOutput = Literal["weights", "residual"]
BLOCK_OUTPUTS: tuple[str, ...] = get_args(BlockOutput)

# The attention layer calls the block's input its query (and, over a cache, its key and value the rows
# before it): errors about those name the block's own fields.
_ATTENTION_INPUTS = {"query": "x", "key": "past", "value": "past"}
_PART_INPUT = {"x": "x"}
_WEIGHTS: tuple[MultiHeadOutput] = ("weights",)


@dataclass(frozen=True)
class TransformerBlockLayers:
    """A block's parts: ``attention`` (its projections and heads; ``w_o`` must map back to ``d_model``),
    ``feed_forward`` (``w_2`` likewise), the two normalizations and where they sit (``norm_position``)."""

    attention: MultiHeadWeights
    feed_forward: FeedForwardWeights
    norm_1: NormOptions = DEFAULT_NORM
    norm_2: NormOptions = DEFAULT_NORM
    norm_position: NormPosition = "pre"

    def __post_init__(self) -> None:
        if self.norm_position not in ("pre", "post"):
            raise KernelError(
                f"norm_position must be 'pre' or 'post', got {self.norm_position!r}", field="norm_position"
            )


@dataclass(frozen=True)
class TransformerBlockShapes:
    """The sizes of one block call: the attention layer's (``m = past + n`` keys) and the feed-forward's."""

    attention: MultiHeadShapes
    feed_forward: FeedForwardShapes
    d_model: int


def transformer_block_shapes(
    x_shape: tuple[int, ...], layers: TransformerBlockLayers, *, past_shape: tuple[int, ...] | None = None
) -> TransformerBlockShapes:
    """Check ``x [..., n, d_model]``, ``past [..., m_past, d_model]`` (optional) and every part's shapes
    (``np.shape`` only), naming a part's field by its path; return the sizes."""
    if len(x_shape) < 2:
        raise ShapeError(
            f"x must have at least 2 dimensions [..., n, d_model], got shape {format_shape(x_shape)}",
            field="x",
        )
    d_model = x_shape[-1]
    keys_shape = None
    if past_shape is not None:
        if len(past_shape) != len(x_shape) or past_shape[:-2] != x_shape[:-2] or past_shape[-1] != d_model:
            raise ShapeError(
                f"past must have shape [..., m_past, d_model] with x's leading dimensions and d_model, "
                f"[{', '.join(map(str, x_shape[:-2]))}{', ' if x_shape[:-2] else ''}m_past, {d_model}]; "
                f"got {format_shape(past_shape)}",
                field="past",
            )
        keys_shape = (*x_shape[:-2], past_shape[-2] + x_shape[-2], d_model)
    with fields_under("attention", renamed=_ATTENTION_INPUTS):
        attention = multi_head_shapes(x_shape, keys_shape, keys_shape, layers.attention)
    if attention.d_out != d_model:
        raise ShapeError(
            f"w_o has {attention.d_out} columns but the residual connection needs d_model={d_model}",
            field="attention.w_o",
        )
    with fields_under("feed_forward", renamed=_PART_INPUT):
        ff = feed_forward_shapes(x_shape, layers.feed_forward)
    if ff.d_out != d_model:
        raise ShapeError(
            f"w_2 has {ff.d_out} columns but the residual connection needs d_model={d_model}",
            field="feed_forward.w_2",
        )
    for part, options in (("norm_1", layers.norm_1), ("norm_2", layers.norm_2)):
        with fields_under(part, renamed=_PART_INPUT):
            norm_shape(x_shape, options)
    return TransformerBlockShapes(attention=attention, feed_forward=ff, d_model=d_model)


@dataclass(frozen=True)
class TransformerBlockResult:
    """``output [..., n, d_model]``; ``weights [..., H, n, m]`` (per head) and ``residual [..., n,
    d_model]`` (``h``, the stream between the two sublayers) when asked for; ``empty_rows`` as the attention
    layer lists them."""

    output: FloatArray
    weights: FloatArray | None
    residual: FloatArray | None
    empty_rows: IntArray


def transformer_block(
    x: ArrayLike,
    layers: TransformerBlockLayers,
    options: AttentionOptions = DEFAULT_OPTIONS,
    *,
    past: ArrayLike | None = None,
    include: Collection[BlockOutput] = (),
    dtype: DTypeArg = np.float64,
) -> TransformerBlockResult:
    """One block (see the module docstring) over ``x [..., n, d_model]`` → ``output [..., n, d_model]``.

    ``options`` are the attention layer's (causal masking, windows, rotary, ALiBi, …; masks and biases
    per head ``[..., H, n, m]``). ``past [..., m_past, d_model]`` holds the block inputs of earlier
    positions: the rows of ``x`` also attend to their keys and values, as decoding over a KV cache does
    (the projections are row by row, so holding those rows is holding their keys and values); with
    ``causal`` (aligned ``lower_right``), the block over the last row of a sequence with the rest as
    ``past`` gives the last row of the block over the whole sequence.
    """
    float_dtype = resolve_float_dtype(dtype)
    outputs = check_outputs(include, BLOCK_OUTPUTS)
    array = as_float_array(x, float_dtype, field="x")
    earlier = None if past is None else as_float_array(past, float_dtype, field="past")
    transformer_block_shapes(array.shape, layers, past_shape=None if earlier is None else earlier.shape)
    # cast: the stubs lose the float32-or-float64 union through concatenate; both parts have float_dtype.
    sequence = array if earlier is None else cast("FloatArray", np.concatenate((earlier, array), axis=-2))
    n = array.shape[-2]
    heads = "weights" in outputs
    if layers.norm_position == "pre":
        normed = _norm(sequence, layers.norm_1, "norm_1", float_dtype, of=None)
        attended = _attend(
            normed[..., -n:, :], None if earlier is None else normed, layers, options, heads, float_dtype
        )
        attention_out = _attention_output(layers, attended.output)
        residual = _residual(
            array, attended.output, "x + attention", float_dtype, (_block_input, attention_out)
        )
        normed = _norm(residual, layers.norm_2, "norm_2", float_dtype, of="h = x + attention")
        update = _feed_forward(normed, layers, float_dtype, of="norm_2(h)")
        h = _larger_addend((_block_input, array), (attention_out, attended.output))
        output = _residual(
            residual, update, "h + feed_forward", float_dtype, (h, _feed_forward_output(layers, update))
        )
    else:
        attended = _attend(array, None if earlier is None else sequence, layers, options, heads, float_dtype)
        attention_out = _attention_output(layers, attended.output)
        residual = _norm(
            _residual(array, attended.output, "x + attention", float_dtype, (_block_input, attention_out)),
            layers.norm_1,
            "norm_1",
            float_dtype,
            of="x + attention",
        )
        update = _feed_forward(residual, layers, float_dtype, of="h = norm_1(x + attention)")
        output = _norm(
            _residual(
                residual,
                update,
                "h + feed_forward",
                float_dtype,
                (
                    _affine_output("norm_1", residual, "weight", "bias", layers.norm_1.bias),
                    _feed_forward_output(layers, update),
                ),
            ),
            layers.norm_2,
            "norm_2",
            float_dtype,
            of="h + feed_forward",
        )
    return TransformerBlockResult(
        output=output,
        weights=attended.weights,
        residual=residual if "residual" in outputs else None,
        empty_rows=attended.empty_rows,
    )


def _norm(x: FloatArray, options: NormOptions, part: str, dtype: FloatDType, *, of: str | None) -> FloatArray:
    """``part`` (``norm_1`` or ``norm_2``) over ``x``: the block's input when ``of`` is None, else the sum
    ``of`` names."""
    with fields_under(part, renamed=_PART_INPUT, input_of=of):
        return layer_norm(x, options, dtype=dtype)


def _attend(
    queries: FloatArray,
    keys: FloatArray | None,
    layers: TransformerBlockLayers,
    options: AttentionOptions,
    heads: bool,
    dtype: FloatDType,
) -> _Attended:
    """The attention sublayer: ``queries [..., n, d]`` attend to ``keys [..., m, d]`` (None: themselves);
    ``heads``: whether to keep the per-head weights."""
    with fields_under("attention", renamed=_ATTENTION_INPUTS):
        result = multi_head_attention(
            queries,
            keys,
            keys,
            weights=layers.attention,
            options=options,
            include=_WEIGHTS if heads else (),
            dtype=dtype,
        )
    return _Attended(output=result.output, weights=result.weights, empty_rows=result.empty_rows)


@dataclass(frozen=True)
class _Attended:
    output: FloatArray
    weights: FloatArray | None
    empty_rows: IntArray


def _feed_forward(x: FloatArray, layers: TransformerBlockLayers, dtype: FloatDType, *, of: str) -> FloatArray:
    """The feed-forward sublayer over ``x``, the sum or norm ``of`` names."""
    with fields_under("feed_forward", input_of=of):
        return feed_forward(x, layers.feed_forward, dtype=dtype).output


def _residual(
    stream: FloatArray, update: FloatArray, what: str, dtype: FloatDType, sources: tuple[Source, Source]
) -> FloatArray:
    """``stream + update``, the residual connection. A sum beyond the float range names the field behind
    the larger addend at its first entry out of range; ``sources`` say which (the stream's, the update's)."""
    with np.errstate(over="ignore", invalid="ignore"):
        total: FloatArray = stream + update
    if not np.isfinite(total).all():
        index = tuple(int(i) for i in np.argwhere(~np.isfinite(total))[0])
        field = _larger_addend((sources[0], stream), (sources[1], update))(index)
        raise overflow_error(f"the residual sum {what}", dtype, field=field)
    return total


# The field behind an entry (by its index) of an array the block computed.
Source = Callable[[tuple[int, ...]], str]


def _block_input(index: tuple[int, ...]) -> str:
    return "x"


def _larger_addend(first: tuple[Source, FloatArray], second: tuple[Source, FloatArray]) -> Source:
    """The source of whichever of two addends is larger at an entry (the first on a tie)."""

    def source(index: tuple[int, ...]) -> str:
        larger = abs(float(first[1][index])) >= abs(float(second[1][index]))
        return first[0](index) if larger else second[0](index)

    return source


def _affine_output(
    part: str, output: FloatArray, weight_name: str, bias_name: str, bias: ArrayLike | None
) -> Source:
    """The source of ``output = … · weight + bias``, ``part``'s fields: the bias when it makes at least half
    of the entry, else the weight."""

    def source(index: tuple[int, ...]) -> str:
        if bias is not None and 2 * abs(float(np.asarray(bias)[index[-1]])) >= abs(float(output[index])):
            return f"{part}.{bias_name}"
        return f"{part}.{weight_name}"

    return source


def _attention_output(layers: TransformerBlockLayers, output: FloatArray) -> Source:
    return _affine_output("attention", output, "w_o", "b_o", layers.attention.b_o)


def _feed_forward_output(layers: TransformerBlockLayers, output: FloatArray) -> Source:
    return _affine_output("feed_forward", output, "w_2", "b_2", layers.feed_forward.b_2)
