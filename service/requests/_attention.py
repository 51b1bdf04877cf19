"""The typed attention request: arrays, options and the shapes they make, checked once for both protocols."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from service.kernels import (
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
)
from service.requests._common import (
    PRECISIONS,
    AnyArray,
    ArraySpec,
    Bound,
    Precision,
    Work,
    boolean,
    choice,
    integer,
    names,
    number,
    rows_of,
)

# The output-only limit bounds time, which grows with d_k + d_v (one product for the scores, one for the
# output); it is stated for d_k = d_v = 64, and wider rows count proportionally more.
REFERENCE_ROW_WIDTH = 128


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
        for name, spec in self.ARRAYS.items():
            array = getattr(self, name)
            if array is not None:
                spec.check(array, field=name)
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
        """Weights and scores are held whole (each one counts); output-only scores go a block at a time."""
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
        if held_matrices:
            held = max(shapes.scores_elements * held_matrices, shapes.output_elements, listed)
            what = "attention arrays (batch × n × m for each of weights and scores asked for)"
            return Work(elements=held, bounds=(Bound(held, what),), answer_elements=answer)
        widening = max(1.0, (shapes.d_k + shapes.d_v) / REFERENCE_ROW_WIDTH)
        computed = math.ceil(shapes.scores_elements * widening)
        bounds = (
            Bound(max(shapes.output_elements, listed), "an attention output (batch × n × d_v)"),
            Bound(
                computed,
                "attention scores (batch × n × m, output only, × (d_k + d_v) / 128 when that is more than 1)",
                setting="MAX_OUTPUT_ONLY_WORK_ELEMENTS",
            ),
        )
        return Work(elements=computed, bounds=bounds, answer_elements=answer)

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
