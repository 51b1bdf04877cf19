"""The typed Transformer-block request: one block over ``x``, its parts given as the bodies of their own
endpoints (without their inputs) and checked by those endpoints' typed requests."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from service.kernels import (
    BlockOutput,
    NormPosition,
    TransformerBlockLayers,
    TransformerBlockResult,
    fields_under,
    transformer_block,
    transformer_block_shapes,
)
from service.requests._common import (
    PRECISIONS,
    AnyArray,
    ArraySpec,
    Bound,
    Precision,
    RequestError,
    Work,
    choice,
    names,
)
from service.requests._feed_forward import FeedForwardRequest
from service.requests._multihead import MultiHeadRequest
from service.requests._norms import LayerNormRequest

# A part's fields that the block sets itself: its input (the block's x), what it returns and its precision.
BLOCK_SET = frozenset({"x", "query", "key", "value", "include", "precision"})
# What each part's own request calls the block's input.
PART_INPUTS = {"x": "x", "query": "x"}
# Each entry of the residual stream is added twice (x + attention, h + feed-forward): one score each.
RESIDUAL_COST = 1


@dataclass(frozen=True)
class BlockParts:
    """The block's parts as their own typed requests over the block's ``x``: each checked by its rules."""

    attention: MultiHeadRequest
    feed_forward: FeedForwardRequest
    norm_1: LayerNormRequest
    norm_2: LayerNormRequest


@dataclass(frozen=True)
class TransformerBlockRequest:
    """One block (pre-norm: ``h = x + MHA(norm_1(x))``, ``y = h + FFN(norm_2(h))``; post-norm: ``h =
    norm_1(x + MHA(x))``, ``y = norm_2(h + FFN(h))``) over ``x [..., n, d_model]``, self-attention.

    ``attention``, ``feed_forward``, ``norm_1`` and ``norm_2`` hold the fields of the multi-head, feed-forward
    and layer-norm requests without their input, ``include`` and ``precision``; each is checked by that
    request, and an error inside names its path (``feed_forward.w_3``, ``attention.w_q``,
    ``norm_1.weight``).
    """

    ARRAYS: ClassVar[dict[str, ArraySpec]] = {"x": ArraySpec(min_rank=2, axes="[..., n, d_model]")}
    PARTS: ClassVar[dict[str, type[Any]]] = {
        "attention": MultiHeadRequest,
        "feed_forward": FeedForwardRequest,
        "norm_1": LayerNormRequest,
        "norm_2": LayerNormRequest,
    }

    x: AnyArray
    attention: Mapping[str, Any]
    feed_forward: Mapping[str, Any]
    norm_1: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    norm_2: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    norm_position: NormPosition = "pre"
    include: frozenset[BlockOutput] = frozenset()
    precision: Precision = "float64"
    parts: BlockParts = field(init=False, repr=False)
    layers: TransformerBlockLayers = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.ARRAYS["x"].check(self.x, field="x")
        set_ = object.__setattr__  # frozen: the checked, normalized values are set once, here
        set_(self, "norm_position", choice(self.norm_position, NormPosition, field="norm_position"))
        set_(self, "include", names(self.include, BlockOutput, field="include"))
        set_(self, "precision", choice(self.precision, Precision, field="precision"))
        parts = BlockParts(
            attention=self._part("attention", query=self.x, include=frozenset({"weights"} & self.include)),
            feed_forward=self._part("feed_forward", x=self.x),
            norm_1=self._part("norm_1", x=self.x),
            norm_2=self._part("norm_2", x=self.x),
        )
        set_(self, "parts", parts)
        layers = TransformerBlockLayers(
            attention=parts.attention.weights,
            feed_forward=parts.feed_forward.weights,
            norm_1=parts.norm_1.options,
            norm_2=parts.norm_2.options,
            norm_position=self.norm_position,
        )
        transformer_block_shapes(self.x.shape, layers)  # the residual connections: w_o and w_2 give d_model
        set_(self, "layers", layers)

    def _part(self, name: str, **inputs: Any) -> Any:
        """The part ``name`` as its own typed request over the block's input; errors named by their path."""
        fields = getattr(self, name)
        if not isinstance(fields, Mapping):
            raise RequestError(f"{name} must be an object (the fields of its layer)", field=name)
        request_type = self.PARTS[name]
        allowed = {f.name for f in dataclasses.fields(request_type) if f.init} - BLOCK_SET
        for key in fields:
            if key not in allowed:
                what = "set by the block" if key in BLOCK_SET else "not a field of this part"
                raise RequestError(f"{name}.{key} is {what}", field=f"{name}.{key}")
        with fields_under(name, renamed=PART_INPUTS):
            return request_type(**fields, **inputs, precision=self.precision)

    def work(self) -> Work:
        """Every part's work over the block's rows, summed (the parts' arrays are not all held at once, so
        the sum errs high), and the residual stream: the normalized input, ``h`` and the output held, and
        two additions per entry."""
        attention = self.parts.attention.work()
        feed_forward = self.parts.feed_forward.work()
        norms = [self.parts.norm_1.work(), self.parts.norm_2.work()]
        stream = int(self.x.size)
        held = attention.elements + feed_forward.elements + sum(w.elements for w in norms) + 3 * stream
        computed = (
            attention.compute
            + feed_forward.compute
            + sum(w.compute for w in norms)
            + 2 * RESIDUAL_COST * stream
        )
        shapes = self.parts.attention.shapes
        weights = shapes.scores_elements if "weights" in self.include else 0
        answer = stream * (2 if "residual" in self.include else 1) + weights
        bounds = (
            Bound(
                held,
                "a Transformer block's arrays (its attention layer's, feed-forward layer's and norms', "
                "and the residual stream)",
            ),
            Bound(
                computed,
                "a Transformer block's arithmetic (its attention layer, feed-forward layer and norms counted "
                "as their own endpoints count them, and the residual additions)",
                setting="MAX_OUTPUT_ONLY_WORK_ELEMENTS",
            ),
        )
        return Work(elements=held, bounds=bounds, answer_elements=answer, compute=computed)

    def run(self) -> TransformerBlockResult:
        """The kernel's answer to this request."""
        return transformer_block(
            self.x,
            self.layers,
            self.parts.attention.options,
            include=self.include,
            dtype=PRECISIONS[self.precision],
        )
