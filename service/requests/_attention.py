"""The typed attention request: arrays, options and the shapes they make, checked once for both protocols."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from service.kernels import (
    BLOCK_ELEMENTS,
    AttentionOptions,
    AttentionOutput,
    AttentionResult,
    AttentionShapes,
    CausalAlignment,
    EmptyRowPolicy,
    KernelError,
    Range,
    Rotary,
    RotaryStyle,
    attention,
    attention_shapes,
    check_rotary,
    check_window,
    rows_per_block,
)
from service.requests._common import (
    PRECISIONS,
    AnyArray,
    ArraySpec,
    Bound,
    Precision,
    Work,
    boolean,
    check_arrays,
    choice,
    integer,
    names,
    number,
    rows_of,
)
from service.requests._positions import rotary_work

# The compute limit (MAX_OUTPUT_ONLY_WORK_ELEMENTS) counts attention scores of d_k + d_v = 128: a score's
# two products (one for the score, one for the output) grow with d_k + d_v, so wider rows count
# proportionally more. A narrower score still costs one: its exp, max, sum and division (and softcap,
# ALiBi, the band) cost about as much as a 128-wide score's products, whatever its width.
REFERENCE_ROW_WIDTH = 128
# BLAS reuses each key row it loads for every query row of a block; with fewer rows per block than this
# (one query, or a block cut to one row because batch × m fills it) the products run at dot-product speed,
# measured 4-5× slower per multiply-add than with 8 rows or more (d_k = 254 and 2000, n = m = 1 … 64).
FULL_REUSE_ROWS = 8
# What the compute bound of attention counts, as its 413 names it (written once: every request builds a Work).
_SCORE_ARITHMETIC = (
    "attention arithmetic (batch × n × m scores, each counting (d_k + d_v) / 128 when that is more than 1, "
    f"× {FULL_REUSE_ROWS} / rows for blocks of fewer than {FULL_REUSE_ROWS} query rows; rotary's sines, "
    "cosines and rotated values as positional encoding counts them)"
)


def score_work(entries: int, n: int, m: int, d_k: int, d_v: int, *, materialized: bool) -> int:
    """The arithmetic of ``entries`` attention problems of ``n`` queries and ``m`` keys, in reference scores.

    Each of the ``entries · n · m`` scores counts ``max(1, (d_k + d_v) / 128 · slowdown)``, the slowdown
    being ``FULL_REUSE_ROWS / rows`` when the kernel's blocks hold fewer query rows than that (the whole
    ``n`` when the weights or scores are returned, else as many as fit in its block of
    ``BLOCK_ELEMENTS`` scores beside ``min(entries, BLOCK_ELEMENTS // m)`` batch entries: a lower bound of
    the kernel's rows, so the estimate errs high). Shared by attention and the multi-head layer, whose heads
    are attention's batch entries.
    """
    scores = entries * n * m
    if materialized:
        rows = n
    else:
        entries_per_block = min(entries, max(1, BLOCK_ELEMENTS // max(m, 1)))
        rows = rows_per_block(entries_per_block * m, n)
    per_score = max(1.0, (d_k + d_v) / REFERENCE_ROW_WIDTH * reuse_slowdown(rows))
    return math.ceil(scores * per_score)


def reuse_slowdown(rows: int) -> float:
    """How much slower a product's multiply-adds run when each block of it holds ``rows`` rows (of
    queries, or of a layer's inputs) to reuse each loaded weight or key row for: ``FULL_REUSE_ROWS / rows``,
    at least 1."""
    return max(1.0, FULL_REUSE_ROWS / max(rows, 1))


def product_work(products: int, rows_per_product: int, inner: int, cols: int) -> int:
    """The arithmetic of ``products`` matrix products of ``rows_per_product × inner`` by ``inner × cols``,
    in reference scores: each result entry counts ``inner / 128`` (× the slowdown of products of fewer than 8
    rows, :func:`reuse_slowdown`), and at least 1, as an attention score does: a narrow product is
    bound by writing its results, not by its multiply-adds. The multi-head layer's projections and the
    feed-forward layer's products."""
    per_entry = max(1.0, inner / REFERENCE_ROW_WIDTH * reuse_slowdown(rows_per_product))
    return math.ceil(products * rows_per_product * cols * per_entry)


@dataclass(frozen=True, kw_only=True)
class AttentionOptionFields:
    """The attention options a client may set, declared once for attention and the multi-head layer.

    Keyword-only, so that each request keeps its own arrays first. ``options`` is derived once they are
    checked: the kernel's :class:`AttentionOptions`, which the request passes down whole.
    """

    SCALE: ClassVar[Range] = Range(minimum=0, min_inclusive=False)
    SOFTCAP: ClassVar[Range] = AttentionOptions.SOFTCAP

    mask: AnyArray | None = None
    bias: AnyArray | None = None
    causal: bool = False
    causal_alignment: CausalAlignment = "lower_right"
    scale: float | None = None
    window: tuple[int | None, int | None] | None = None
    alibi_slopes: AnyArray | None = None
    softcap: float | None = None
    rotary: Rotary | Mapping[str, Any] | None = None
    empty_rows: EmptyRowPolicy = "error"
    options: AttentionOptions = field(init=False, repr=False)

    def check_options(self) -> None:
        """Check and normalize the options in place (the arrays are checked by the request's ``ARRAYS``)."""
        set_ = object.__setattr__  # frozen: the checked, normalized values are set once, by __post_init__
        set_(self, "causal", boolean(self.causal, field="causal"))
        set_(
            self, "causal_alignment", choice(self.causal_alignment, CausalAlignment, field="causal_alignment")
        )
        if self.scale is not None:
            set_(self, "scale", number(self.scale, field="scale", allowed=self.SCALE))
        if self.window is not None:
            set_(self, "window", window_option(self.window))
        if self.softcap is not None:
            set_(self, "softcap", number(self.softcap, field="softcap", allowed=self.SOFTCAP))
        if self.rotary is not None:
            set_(self, "rotary", rotary_option(self.rotary))
        set_(self, "empty_rows", choice(self.empty_rows, EmptyRowPolicy, field="empty_rows"))

    def derive_options(self, *, enable_gqa: bool) -> None:
        """Set ``options``, the kernel's object, from the checked fields."""
        options = AttentionOptions(
            mask=self.mask,
            bias=self.bias,
            causal=self.causal,
            causal_alignment=self.causal_alignment,
            scale=self.scale,
            enable_gqa=enable_gqa,
            window=self.window,
            alibi_slopes=self.alibi_slopes,
            softcap=self.softcap,
            rotary=self.rotary if isinstance(self.rotary, Rotary) else None,
            empty_rows=self.empty_rows,
        )
        object.__setattr__(self, "options", options)

    def rotary_option_work(self, *, n: int, m: int, d_k: int, rotated_values: int) -> int:
        """What the ``rotary`` option computes, in reference scores (0 without it): its tables at the ``n``
        query and ``m`` key positions and the ``rotated_values`` (the query and key rows it rotates), counted
        as the positional-encoding endpoint counts the same tables (:func:`rotary_work`), large angles
        included."""
        if not isinstance(self.rotary, Rotary):
            return 0
        dim, base = check_rotary(self.rotary, d_k)
        query_offset, key_offset = self.rotary.offsets(n, m, self.causal_alignment)
        ends = (query_offset, query_offset + n - 1, key_offset, key_offset + m - 1)
        largest = max(abs(position) for position in ends)
        return rotary_work(
            rotated_values=rotated_values, positions=n + m, dim=dim, base=base, largest_position=largest
        )


@dataclass(frozen=True)
class AttentionRequest(AttentionOptionFields):
    """``softmax(Q Kᵀ · scale + bias, over visible keys) @ V``, as a client asked for it.

    ``include`` names the intermediates returned beside the output. ``shapes`` is derived (and the shapes
    checked) when the object is made, so a request that exists is one the kernel can run.
    """

    ARRAYS: ClassVar[dict[str, ArraySpec]] = {
        "query": ArraySpec(axes="[..., n, d_k]"),
        "key": ArraySpec(min_rank=2, axes="[..., m, d_k]"),
        "value": ArraySpec(min_rank=2, axes="[..., m, d_v]"),
        "mask": ArraySpec(kind="boolean", axes="[..., n, m]"),
        "bias": ArraySpec(axes="[..., n, m]"),
        "alibi_slopes": ArraySpec(min_rank=0, axes="[..., H]"),
    }
    DEFAULT_INCLUDE: ClassVar[frozenset[AttentionOutput]] = frozenset({"weights"})

    query: AnyArray
    key: AnyArray
    value: AnyArray
    enable_gqa: bool = False
    include: frozenset[AttentionOutput] = DEFAULT_INCLUDE
    precision: Precision = "float64"
    shapes: AttentionShapes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_arrays(self, self.ARRAYS)
        self.check_options()
        set_ = object.__setattr__  # frozen: the checked, normalized values are set once, here
        set_(self, "enable_gqa", boolean(self.enable_gqa, field="enable_gqa"))
        set_(self, "include", names(self.include, AttentionOutput, field="include"))
        set_(self, "precision", choice(self.precision, Precision, field="precision"))
        set_(
            self,
            "shapes",
            attention_shapes(
                self.query.shape,
                self.key.shape,
                self.value.shape,
                mask_shape=None if self.mask is None else self.mask.shape,
                bias_shape=None if self.bias is None else self.bias.shape,
                alibi_shape=None if self.alibi_slopes is None else self.alibi_slopes.shape,
                enable_gqa=self.enable_gqa,
            ),
        )
        if isinstance(self.rotary, Rotary):  # its dim must fit d_k: checked now, not after admission
            check_rotary(self.rotary, self.shapes.d_k)
        self.derive_options(enable_gqa=self.enable_gqa)

    def work(self) -> Work:
        """Weights and scores are held whole (each one counts); output-only scores go a block at a time.
        Either way the scores' arithmetic (:func:`score_work`) is bounded by the compute limit."""
        shapes = self.shapes
        rows = rows_of(shapes.batch, shapes.n)
        held_matrices = len(self.include & {"weights", "scores"})
        # Under empty_rows="zero" every row could be listed, as an index of len(batch) + 1 integers.
        listed = rows * (len(shapes.batch) + 1) if self.empty_rows == "zero" else 0
        answer = (
            shapes.output_elements
            + held_matrices * shapes.scores_elements
            + (rows if "logsumexp" in self.include else 0)
            + listed
        )
        computed = score_work(
            math.prod(shapes.batch),
            shapes.n,
            shapes.m,
            shapes.d_k,
            shapes.d_v,
            materialized=bool(held_matrices),
        ) + self.rotary_option_work(
            n=shapes.n, m=shapes.m, d_k=shapes.d_k, rotated_values=int(self.query.size + self.key.size)
        )
        compute = Bound(computed, _SCORE_ARITHMETIC, setting="MAX_OUTPUT_ONLY_WORK_ELEMENTS")
        if held_matrices:
            held = max(shapes.scores_elements * held_matrices, shapes.output_elements, listed)
            what = "attention arrays (batch × n × m for each of weights and scores asked for)"
            return Work(
                elements=held, bounds=(Bound(held, what), compute), answer_elements=answer, compute=computed
            )
        bounds = (
            Bound(max(shapes.output_elements, listed), "an attention output (batch × n × d_v)"),
            compute,
        )
        return Work(elements=computed, bounds=bounds, answer_elements=answer, compute=computed)

    def run(self) -> AttentionResult:
        """The kernel's answer to this request."""
        return attention(
            self.query,
            self.key,
            self.value,
            self.options,
            include=self.include,
            dtype=PRECISIONS[self.precision],
        )


ROTARY_DEFAULTS = Rotary()


def window_option(value: object) -> tuple[int | None, int | None]:
    """``[left, right]``: integers >= 0 or null (unbounded on that side)."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise KernelError("window must be a list [left, right] of integers >= 0 or null", field="window")
    sides = tuple(None if side is None else integer(side, field="window") for side in value)
    return check_window(sides)


def rotary_option(value: Rotary | Mapping[str, Any]) -> Rotary:
    """The ``rotary`` option as a :class:`Rotary`, each member checked and named ``rotary.<member>``."""
    if isinstance(value, Rotary):
        return value
    if not isinstance(value, Mapping):
        raise KernelError(
            "rotary must be an object (base, style, dim, query_offset, key_offset)", field="rotary"
        )
    unknown = sorted(set(value) - {"base", "style", "dim", "query_offset", "key_offset"})
    if unknown:
        raise KernelError(f"rotary has no member {unknown[0]!r}", field=f"rotary.{unknown[0]}")
    base = value.get("base")
    style = value.get("style")
    dim, query_offset, key_offset = (
        None if value.get(name) is None else integer(value[name], field=f"rotary.{name}")
        for name in ("dim", "query_offset", "key_offset")
    )
    return Rotary(
        base=ROTARY_DEFAULTS.base if base is None else number(base, field="rotary.base"),
        style=ROTARY_DEFAULTS.style if style is None else _style(style),
        dim=dim,
        query_offset=query_offset,
        key_offset=key_offset,
    )


def _style(value: object) -> RotaryStyle:
    styled: RotaryStyle = choice(value, RotaryStyle, field="rotary.style")
    return styled
