"""The typed multi-head attention request: a layer's inputs, weights and options, and its work."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from service.kernels import (
    MultiHeadOutput,
    MultiHeadResult,
    MultiHeadShapes,
    MultiHeadWeights,
    Range,
    Rotary,
    attention_shapes,
    check_rotary,
    multi_head_attention,
    multi_head_shapes,
)
from service.requests._attention import AttentionOptionFields, product_work, score_work
from service.requests._common import (
    PRECISIONS,
    AnyArray,
    ArraySpec,
    Bound,
    Precision,
    Work,
    check_arrays,
    choice,
    integer,
    names,
)

HEADS = Range(minimum=1)


@dataclass(frozen=True)
class MultiHeadRequest(AttentionOptionFields):
    """A multi-head attention layer (AIAYN §3.2.2, PyTorch's ``nn.MultiheadAttention``), as a client asked.

    ``key`` and ``value`` default to the query (self-attention). ``shapes`` is derived, and every shape
    checked, when the object is made.
    """

    ARRAYS: ClassVar[dict[str, ArraySpec]] = {
        "query": ArraySpec(min_rank=2, axes="[..., n, d_model]"),
        "key": ArraySpec(min_rank=2, axes="[..., m, d_kv_model]"),
        "value": ArraySpec(min_rank=2, axes="[..., m, d_kv_model]"),
        "w_q": ArraySpec(min_rank=2, max_rank=2, axes="[d_model, num_heads · d_k]"),
        "w_k": ArraySpec(min_rank=2, max_rank=2, axes="[d_kv_model, num_kv_heads · d_k]"),
        "w_v": ArraySpec(min_rank=2, max_rank=2, axes="[d_kv_model, num_kv_heads · d_v]"),
        "w_o": ArraySpec(min_rank=2, max_rank=2, axes="[num_heads · d_v, d_out]"),
        "b_q": ArraySpec(max_rank=1, axes="[num_heads · d_k]"),
        "b_k": ArraySpec(max_rank=1, axes="[num_kv_heads · d_k]"),
        "b_v": ArraySpec(max_rank=1, axes="[num_kv_heads · d_v]"),
        "b_o": ArraySpec(max_rank=1, axes="[d_out]"),
        "mask": ArraySpec(kind="boolean", axes="[..., H, n, m]"),
        "bias": ArraySpec(axes="[..., H, n, m]"),
        "alibi_slopes": ArraySpec(min_rank=0, axes="[..., H]"),
    }
    DEFAULT_INCLUDE: ClassVar[frozenset[MultiHeadOutput]] = frozenset()

    query: AnyArray
    w_q: AnyArray
    w_k: AnyArray
    w_v: AnyArray
    w_o: AnyArray
    num_heads: int
    key: AnyArray | None = None
    value: AnyArray | None = None
    num_kv_heads: int | None = None
    b_q: AnyArray | None = None
    b_k: AnyArray | None = None
    b_v: AnyArray | None = None
    b_o: AnyArray | None = None
    include: frozenset[MultiHeadOutput] = DEFAULT_INCLUDE
    precision: Precision = "float64"
    weights: MultiHeadWeights = field(init=False, repr=False)
    shapes: MultiHeadShapes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_arrays(self, self.ARRAYS)
        set_ = object.__setattr__  # frozen: the checked, normalized values are set once, here
        set_(self, "num_heads", integer(self.num_heads, field="num_heads", allowed=HEADS))
        if self.num_kv_heads is not None:
            set_(self, "num_kv_heads", integer(self.num_kv_heads, field="num_kv_heads", allowed=HEADS))
        self.check_options()
        set_(self, "include", names(self.include, MultiHeadOutput, field="include"))
        set_(self, "precision", choice(self.precision, Precision, field="precision"))
        weights = MultiHeadWeights(
            w_q=self.w_q,
            w_k=self.w_k,
            w_v=self.w_v,
            w_o=self.w_o,
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            b_q=self.b_q,
            b_k=self.b_k,
            b_v=self.b_v,
            b_o=self.b_o,
        )
        set_(self, "weights", weights)
        shapes = multi_head_shapes(
            self.query.shape,
            None if self.key is None else self.key.shape,
            None if self.value is None else self.value.shape,
            weights,
        )
        set_(self, "shapes", shapes)
        # The per-head arrays' shapes: the mask, bias and slopes must fit them (checked without allocating).
        heads = shapes.heads_batch
        attention_shapes(
            (*heads, shapes.n, shapes.d_k),
            (*heads, shapes.m, shapes.d_k),
            (*heads, shapes.m, shapes.d_v),
            mask_shape=None if self.mask is None else self.mask.shape,
            bias_shape=None if self.bias is None else self.bias.shape,
            alibi_shape=None if self.alibi_slopes is None else self.alibi_slopes.shape,
        )
        if isinstance(self.rotary, Rotary):
            check_rotary(self.rotary, shapes.d_k)
        self.derive_options(enable_gqa=True)  # the layer groups its heads: num_kv_heads decides

    def work(self) -> Work:
        """What the layer holds (projections, heads, output, any per-head matrices asked for) and computes:
        the projections as products (:func:`product_work`: at least one per entry, slower for few rows),
        every head's scores counted as attention counts them (:func:`score_work`: at least one per score)
        and the ``rotary`` option's tables and rotations."""
        s = self.shapes
        rows = math.prod(s.batch)  # the broadcast batch: the heads, the scores and the output
        per_head = len(self.include & {"weights", "scores"}) * s.scores_elements
        # Each input is projected over its own batch entries (a key shared by 64 queries, once).
        projected_q = s.query_rows * s.num_heads * s.n * s.d_k
        projected_k = s.key_rows * s.num_kv_heads * s.m * s.d_k
        projected_v = s.value_rows * s.num_kv_heads * s.m * s.d_v
        heads = rows * s.num_heads * s.n * s.d_v
        projections = projected_q + projected_k + projected_v + 2 * heads
        output = rows * s.n * s.d_out
        listed = rows * s.num_heads * s.n * (len(s.batch) + 2) if self.empty_rows == "zero" else 0
        held = projections + output + per_head + listed
        # The query and output projections are products of n rows each; the key and value ones, of m rows.
        projected = (
            product_work(s.query_rows, s.n, s.d_model, s.num_heads * s.d_k)
            + product_work(s.key_rows, s.m, s.d_kv_model, s.num_kv_heads * s.d_k)
            + product_work(s.value_rows, s.m, s.d_kv_model, s.num_kv_heads * s.d_v)
            + product_work(rows, s.n, s.num_heads * s.d_v, s.d_out)
        )
        attended = score_work(rows * s.num_heads, s.n, s.m, s.d_k, s.d_v, materialized=bool(per_head))
        # Rotary turns every head's query and key rows (the projections, not the layer's inputs).
        rotated = projected_q + projected_k
        rotary = self.rotary_option_work(n=s.n, m=s.m, d_k=s.d_k, rotated_values=rotated)
        computed = projected + attended + rotary
        shown = {"heads": heads, "q": projected_q, "k": projected_k, "v": projected_v}
        answer = output + per_head + listed + sum(shown[name] for name in shown if name in self.include)
        bounds = (
            Bound(held, "a multi-head layer's arrays (projections, heads, output and per-head matrices)"),
            Bound(
                computed,
                "a multi-head layer's arithmetic (each projection's entries, counting inner width / 128 and "
                "at least 1 each, every head's scores counted as attention counts them, at least 1 each, "
                "and rotary's tables and rotations)",
                setting="MAX_OUTPUT_ONLY_WORK_ELEMENTS",
            ),
        )
        # elements: what the layer holds (its memory, which admission reserves); compute: its time
        return Work(elements=held, bounds=bounds, answer_elements=answer, compute=computed)

    def run(self) -> MultiHeadResult:
        """The kernel's answer to this request."""
        return multi_head_attention(
            self.query,
            self.key,
            self.value,
            weights=self.weights,
            options=self.options,
            include=self.include,
            dtype=PRECISIONS[self.precision],
        )
