"""The position-wise feed-forward layer of a Transformer block, in the ``x @ W`` convention.

Plain (Attention Is All You Need §3.3, GPT-2, BERT): ``act(x @ w_1 + b_1) @ w_2 + b_2`` with ``act`` one of
``relu``, ``gelu`` (the exact form, ``z · Φ(z)``), ``gelu_tanh`` (the tanh approximation, PyTorch's
``F.gelu(approximate="tanh")``) and ``silu`` (``z · sigmoid(z)``). Gated (Shazeer 2020, "GLU Variants
Improve Transformer"; LLaMA's convention): ``(act(x @ w_1 + b_1) ⊙ (x @ w_3 + b_3)) @ w_2 + b_2`` with
``act`` = silu for ``swiglu`` and gelu for ``geglu``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
from numpy.typing import ArrayLike

from service.kernels._attention import check_outputs
from service.kernels._common import (
    DTypeArg,
    FloatArray,
    all_finite,
    as_float_array,
    flush_subnormals,
    linear,
    overflow_error,
    resolve_float_dtype,
)
from service.kernels._errors import KernelError, ShapeError, format_shape

Activation = Literal["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu"]
ACTIVATIONS: tuple[str, ...] = get_args(Activation)
# The gated activations and the activation of their gate.
GATED: dict[str, str] = {"swiglu": "silu", "geglu": "gelu"}
# What a call can return beside its output: the hidden activations, the input of w_2.
FeedForwardOutput = Literal["hidden"]
FEED_FORWARD_OUTPUTS: tuple[str, ...] = get_args(FeedForwardOutput)

# erfc is computed by the C library's (math.erfc, within an ulp) a block of this many values at a time, so
# that the Python floats it goes through stay a few hundred KB whatever the size of the layer.
ERFC_BLOCK = 1 << 14
# sqrt(2 / π) and the cubic coefficient of the tanh approximation (Hendrycks and Gimpel 2016), as PyTorch.
GELU_TANH_SCALE = math.sqrt(2.0 / math.pi)
SQRT_HALF = math.sqrt(0.5)  # 1/√2, multiplied by as PyTorch does
GELU_TANH_CUBIC = 0.044715


@dataclass(frozen=True)
class FeedForwardWeights:
    """A feed-forward layer's weights and activation, in the ``x @ W`` convention; checked when made.

    ``w_1 [d_model, d_ff]``, ``w_2 [d_ff, d_out]`` and, for the gated activations only (where it is
    required), ``w_3 [d_model, d_ff]``; the biases ``b_1``/``b_3 [d_ff]`` and ``b_2 [d_out]`` are optional.
    :func:`feed_forward_shapes` checks that the shapes fit together.
    """

    w_1: ArrayLike
    w_2: ArrayLike
    activation: Activation = "relu"
    w_3: ArrayLike | None = None
    b_1: ArrayLike | None = None
    b_2: ArrayLike | None = None
    b_3: ArrayLike | None = None

    def __post_init__(self) -> None:
        if self.activation not in ACTIVATIONS:
            raise KernelError(
                f"activation must be one of {', '.join(ACTIVATIONS)}; got {self.activation!r}",
                field="activation",
            )
        if self.activation in GATED and self.w_3 is None:
            raise KernelError(
                f"w_3 [d_model, d_ff] is required for the gated activation {self.activation}", field="w_3"
            )
        if self.activation not in GATED:
            for name in ("w_3", "b_3"):
                if getattr(self, name) is not None:
                    raise KernelError(
                        f"{name} is for the gated activations (swiglu, geglu), not {self.activation}",
                        field=name,
                    )

    @property
    def gated(self) -> bool:
        return self.activation in GATED


@dataclass(frozen=True)
class FeedForwardShapes:
    """The sizes of one call: ``rows`` (every leading dimension of ``x`` multiplied), the widths."""

    rows: int
    d_model: int
    d_ff: int
    d_out: int
    gated: bool

    @property
    def multiplies(self) -> int:
        """Multiply-adds of the two (gated: three) products."""
        return self.rows * self.d_ff * (self.d_model * (2 if self.gated else 1) + self.d_out)

    @property
    def hidden_elements(self) -> int:
        return self.rows * self.d_ff


def feed_forward_shapes(x_shape: tuple[int, ...], weights: FeedForwardWeights) -> FeedForwardShapes:
    """Check ``x [..., d_model]`` and the weights' shapes (``np.shape`` only: nothing is copied) and return
    the sizes."""
    if len(x_shape) < 1:
        raise ShapeError("x must have at least 1 dimension [..., d_model], got a scalar", field="x")
    w_1, w_2 = tuple(np.shape(weights.w_1)), tuple(np.shape(weights.w_2))
    shapes = {
        name: None if array is None else tuple(np.shape(array))
        for name, array in (
            ("w_3", weights.w_3),
            ("b_1", weights.b_1),
            ("b_2", weights.b_2),
            ("b_3", weights.b_3),
        )
    }
    for name, shape in (("w_1", w_1), ("w_2", w_2), ("w_3", shapes["w_3"])):
        if shape is not None and len(shape) != 2:
            raise ShapeError(
                f"{name} must be a matrix (2 dimensions), got shape {format_shape(shape)}", field=name
            )
    d_model = x_shape[-1]
    w_3 = shapes["w_3"]
    if w_1[0] != d_model:
        raise ShapeError(
            f"w_1 has {w_1[0]} rows but needs d_model={d_model}, x's last dimension", field="w_1"
        )
    d_ff = w_1[1]
    if w_2[0] != d_ff:
        raise ShapeError(f"w_2 has {w_2[0]} rows but needs d_ff={d_ff}, w_1's columns", field="w_2")
    if w_3 is not None and w_3 != (d_model, d_ff):
        raise ShapeError(
            f"w_3 must have shape [{d_model}, {d_ff}] (w_1's), got {format_shape(w_3)}", field="w_3"
        )
    for name, width in (("b_1", d_ff), ("b_2", w_2[1]), ("b_3", d_ff)):
        shape = shapes[name]
        if shape is not None and shape != (width,):
            raise ShapeError(f"{name} must have shape [{width}], got {format_shape(shape)}", field=name)
    return FeedForwardShapes(
        rows=math.prod(x_shape[:-1]), d_model=d_model, d_ff=d_ff, d_out=w_2[1], gated=weights.gated
    )


@dataclass(frozen=True)
class FeedForwardResult:
    """``output [..., d_out]`` and, when asked for, ``hidden [..., d_ff]`` (the activations ``w_2`` maps)."""

    output: FloatArray
    hidden: FloatArray | None


def feed_forward(
    x: ArrayLike,
    weights: FeedForwardWeights,
    *,
    include: Collection[FeedForwardOutput] = (),
    dtype: DTypeArg = np.float64,
) -> FeedForwardResult:
    """The layer (see the module docstring) applied to ``x [..., d_model]`` → ``output [..., d_out]``.

    The activations cannot overflow (each is at most its input in size); a product that does raises
    :class:`NumericalOverflowError` naming its weight (``w_1``, ``w_3`` for the gate's product, ``w_2``).
    """
    float_dtype = resolve_float_dtype(dtype)
    outputs = check_outputs(include, FEED_FORWARD_OUTPUTS)
    array = as_float_array(x, float_dtype, field="x")
    w_1 = as_float_array(weights.w_1, float_dtype, field="w_1")
    w_2 = as_float_array(weights.w_2, float_dtype, field="w_2")
    w_3, b_1, b_2, b_3 = (
        None if value is None else as_float_array(value, float_dtype, field=name)
        for name, value in (
            ("w_3", weights.w_3),
            ("b_1", weights.b_1),
            ("b_2", weights.b_2),
            ("b_3", weights.b_3),
        )
    )
    feed_forward_shapes(array.shape, weights)
    if not all_finite(array):  # an entry beyond float32's range became inf in the cast
        raise overflow_error("x", float_dtype, field="x")
    hidden = linear(array, w_1, b_1, field="w_1", dtype=float_dtype, bias_field="b_1")
    activation = GATED.get(weights.activation, weights.activation)
    hidden = ACTIVATION_FUNCTIONS[activation](hidden)
    if w_3 is not None:  # the gated activations (FeedForwardWeights requires it for them, refuses it else)
        gate = linear(array, w_3, b_3, field="w_3", dtype=float_dtype, bias_field="b_3")
        with np.errstate(over="ignore", invalid="ignore"), flush_subnormals():
            hidden *= gate
        if not np.isfinite(hidden).all():
            raise overflow_error("the gated hidden activations", float_dtype, field="w_3")
    output = linear(hidden, w_2, b_2, field="w_2", dtype=float_dtype, bias_field="b_2")
    return FeedForwardResult(output=output, hidden=hidden if "hidden" in outputs else None)


def relu(z: FloatArray) -> FloatArray:
    """``max(z, 0)``, in place."""
    np.maximum(z, 0, out=z)
    return z


def gelu(z: FloatArray) -> FloatArray:
    """``z · Φ(z) = z · erfc(−z / √2) / 2``, in place.

    Written with erfc rather than ``(1 + erf(z / √2)) / 2``: for negative z, where Φ(z) is small, ``1 + erf``
    cancels and keeps only the absolute accuracy (PyTorch's form); erfc keeps the relative one.
    """
    with flush_subnormals():
        phi = erfc(z * -SQRT_HALF)  # at most three arrays the size of z at once: z, the argument, erfc
        phi *= 0.5
        z *= phi
    return z


def gelu_tanh(z: FloatArray) -> FloatArray:
    """``z · (1 + tanh(√(2/π) · (z + 0.044715 z³))) / 2`` (a new array); a cube beyond the float range is
    ±inf, whose tanh is ±1, which is the limit."""
    with np.errstate(over="ignore", invalid="ignore"), flush_subnormals():
        inner = z * z
        inner *= GELU_TANH_CUBIC
        inner += 1.0
        inner *= z
        inner *= GELU_TANH_SCALE
        np.tanh(inner, out=inner)
        inner += 1.0
        inner *= 0.5
        inner *= z
    return inner


def silu(z: FloatArray) -> FloatArray:
    """``z · sigmoid(z) = z / (1 + exp(−z))`` (a new array); ``exp(−z)`` overflowing for z < −709 gives
    ``z / inf = −0``, the limit."""
    with np.errstate(over="ignore"), flush_subnormals():
        denominator = np.exp(-z)
        denominator += 1.0
        result: FloatArray = z / denominator
    return result


def erfc(values: FloatArray) -> FloatArray:
    """The complementary error function of each entry, ``[...]`` → ``[...]`` in the same dtype.

    NumPy has no erf; the C library's (through :func:`math.erfc`) is within an ulp, and is called a block
    of :data:`ERFC_BLOCK` values at a time (about 100 ns a value, which the requests' work counts).
    """
    flat = values.reshape(-1)
    result = np.empty(flat.shape, dtype=values.dtype)
    for start in range(0, flat.size, ERFC_BLOCK):
        block = flat[start : start + ERFC_BLOCK]
        result[start : start + block.size] = np.fromiter(
            map(math.erfc, block.tolist()), dtype=values.dtype, count=block.size
        )
    return result.reshape(values.shape)


ACTIVATION_FUNCTIONS: dict[str, Callable[[FloatArray], FloatArray]] = {
    "relu": relu,
    "gelu": gelu,
    "gelu_tanh": gelu_tanh,
    "silu": silu,
}
