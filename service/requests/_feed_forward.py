"""The typed feed-forward request: a Transformer's position-wise layer, plain or gated."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from service.kernels import (
    Activation,
    FeedForwardOutput,
    FeedForwardResult,
    FeedForwardShapes,
    FeedForwardWeights,
    feed_forward,
    feed_forward_shapes,
)
from service.requests._attention import product_work
from service.requests._common import (
    PRECISIONS,
    AnyArray,
    ArraySpec,
    Bound,
    Precision,
    Work,
    check_arrays,
    choice,
    names,
)

# Each hidden activation's arithmetic beyond the product that made it, in reference scores: erf's exact GELU
# goes through the C library's erfc a value at a time (50-100 ns measured), the others are a few NumPy passes
# (relu a comparison, silu an exp, gelu_tanh a tanh and a cube: 1-5 ns). The gated ones add their gate's
# product and one multiplication.
ACTIVATION_COST: dict[str, int] = {"relu": 0, "gelu": 6, "gelu_tanh": 1, "silu": 1, "swiglu": 1, "geglu": 6}


@dataclass(frozen=True)
class FeedForwardRequest:
    """``act(x @ w_1 + b_1) @ w_2 + b_2``, or gated ``(act(x @ w_1 + b_1) ⊙ (x @ w_3 + b_3)) @ w_2 + b_2``
    (swiglu, geglu), over ``x [..., d_model]``. ``shapes`` is derived, and every shape checked, when made."""

    ARRAYS: ClassVar[dict[str, ArraySpec]] = {
        "x": ArraySpec(axes="[..., d_model]"),
        "w_1": ArraySpec(min_rank=2, max_rank=2, axes="[d_model, d_ff]"),
        "w_2": ArraySpec(min_rank=2, max_rank=2, axes="[d_ff, d_out]"),
        "w_3": ArraySpec(min_rank=2, max_rank=2, axes="[d_model, d_ff]"),
        "b_1": ArraySpec(max_rank=1, axes="[d_ff]"),
        "b_2": ArraySpec(max_rank=1, axes="[d_out]"),
        "b_3": ArraySpec(max_rank=1, axes="[d_ff]"),
    }

    x: AnyArray
    w_1: AnyArray
    w_2: AnyArray
    activation: Activation = "relu"
    w_3: AnyArray | None = None
    b_1: AnyArray | None = None
    b_2: AnyArray | None = None
    b_3: AnyArray | None = None
    include: frozenset[FeedForwardOutput] = frozenset()
    precision: Precision = "float64"
    weights: FeedForwardWeights = field(init=False, repr=False)
    shapes: FeedForwardShapes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_arrays(self, self.ARRAYS)
        set_ = object.__setattr__  # frozen: the checked, normalized values are set once, here
        set_(self, "activation", choice(self.activation, Activation, field="activation"))
        set_(self, "include", names(self.include, FeedForwardOutput, field="include"))
        set_(self, "precision", choice(self.precision, Precision, field="precision"))
        weights = FeedForwardWeights(  # refuses w_3 and b_3 where the activation has no gate, wants w_3 else
            w_1=self.w_1,
            w_2=self.w_2,
            activation=self.activation,
            w_3=self.w_3,
            b_1=self.b_1,
            b_2=self.b_2,
            b_3=self.b_3,
        )
        set_(self, "weights", weights)
        set_(self, "shapes", feed_forward_shapes(self.x.shape, weights))

    def work(self) -> Work:
        """Held: the hidden activations with up to two temporaries of their size (three, gated) and the
        output. Computed: each product's entries (:func:`product_work`) and each activation's extra cost."""
        s = self.shapes
        # The products run one per matrix of x's rows: n rows each (x [..., n, d_model]).
        n = self.x.shape[-2] if self.x.ndim >= 2 else 1
        products = s.rows // n
        hidden = s.hidden_elements
        computed = (
            product_work(products, n, s.d_model, s.d_ff) * (2 if s.gated else 1)
            + product_work(products, n, s.d_ff, s.d_out)
            + hidden * ACTIVATION_COST[self.activation]
        )
        held = hidden * (3 + s.gated) + s.rows * s.d_out
        answer = s.rows * s.d_out + (hidden if "hidden" in self.include else 0)
        bounds = (
            Bound(
                held, "a feed-forward layer's arrays (the hidden activations, their temporaries, the output)"
            ),
            Bound(
                computed,
                "a feed-forward layer's arithmetic (each product's entries, counting inner width / 128 and "
                "at least 1 each, and each hidden activation's cost)",
                setting="MAX_OUTPUT_ONLY_WORK_ELEMENTS",
            ),
        )
        return Work(elements=held, bounds=bounds, answer_elements=answer, compute=computed)

    def run(self) -> FeedForwardResult:
        """The kernel's answer to this request."""
        return feed_forward(self.x, self.weights, include=self.include, dtype=PRECISIONS[self.precision])
