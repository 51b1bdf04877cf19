"""The typed layer-norm request: LayerNorm or RMSNorm over the last axis of ``x``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from service.kernels import NormKind, NormOptions, Range, layer_norm, norm_shape
from service.kernels._norms import DEFAULT_EPS
from service.requests._common import (
    PRECISIONS,
    AnyArray,
    ArraySpec,
    Bound,
    Precision,
    RequestError,
    Work,
    check_arrays,
    choice,
    number,
)

# The normalization's arithmetic in reference scores: each entry about one (a shift, a subtraction, a square,
# a product: 5-9 ns measured), and each row four more, the price of NumPy's reductions over a short last axis
# (60-80 ns a row for d = 2 to 8).
NORM_COST_PER_ENTRY = 1
NORM_COST_PER_ROW = 4


def norm_work(entries: int, rows: int) -> int:
    """The arithmetic of normalizing ``rows`` rows holding ``entries`` entries in all, in reference scores."""
    return entries * NORM_COST_PER_ENTRY + rows * NORM_COST_PER_ROW


@dataclass(frozen=True)
class LayerNormResult:
    """``output``, shaped like ``x``."""

    output: AnyArray


@dataclass(frozen=True)
class LayerNormRequest:
    """``kind="layer"``: ``(x − mean) / sqrt(var + eps) · weight + bias``; ``kind="rms"``:
    ``x / sqrt(mean(x²) + eps) · weight``, over the last axis of ``x [..., d]`` (PyTorch's ``F.layer_norm``
    and ``nn.RMSNorm``)."""

    ARRAYS: ClassVar[dict[str, ArraySpec]] = {
        "x": ArraySpec(axes="[..., d]"),
        "weight": ArraySpec(max_rank=1, axes="[d]"),
        "bias": ArraySpec(max_rank=1, axes="[d]"),
    }
    EPS: ClassVar[Range] = NormOptions.EPS

    x: AnyArray
    kind: NormKind = "layer"
    weight: AnyArray | None = None
    bias: AnyArray | None = None
    eps: float = DEFAULT_EPS
    precision: Precision = "float64"
    options: NormOptions = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_arrays(self, self.ARRAYS)
        set_ = object.__setattr__  # frozen: the checked, normalized values are set once, here
        set_(self, "kind", choice(self.kind, NormKind, field="kind"))
        set_(self, "eps", number(self.eps, field="eps", allowed=self.EPS))
        set_(self, "precision", choice(self.precision, Precision, field="precision"))
        if self.kind == "rms" and self.bias is not None:
            raise RequestError("bias is for kind layer: RMSNorm scales by weight only", field="bias")
        options = NormOptions(kind=self.kind, weight=self.weight, bias=self.bias, eps=self.eps)
        norm_shape(self.x.shape, options)
        set_(self, "options", options)

    def work(self) -> Work:
        """Held: up to three arrays the size of ``x`` (its float64 copy under float32, the centred rows and
        their squares). Computed: every entry and row, by :func:`norm_work`."""
        entries = int(self.x.size)
        held = 3 * entries
        computed = norm_work(entries, entries // self.x.shape[-1])
        return Work(
            elements=held,
            bounds=(
                Bound(
                    held,
                    "a normalization's arrays (three the size of x: the centred rows, their squares, "
                    "and a float64 copy under float32)",
                ),
                Bound(
                    computed,
                    f"a normalization's arithmetic ({NORM_COST_PER_ENTRY} per entry of x and "
                    f"{NORM_COST_PER_ROW} per row)",
                    setting="MAX_OUTPUT_ONLY_WORK_ELEMENTS",
                ),
            ),
            answer_elements=entries,
            compute=computed,
        )

    def run(self) -> LayerNormResult:
        """The kernel's answer to this request."""
        return LayerNormResult(output=layer_norm(self.x, self.options, dtype=PRECISIONS[self.precision]))
