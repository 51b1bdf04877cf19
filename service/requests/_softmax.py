"""The typed softmax request."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from service.kernels import SoftmaxResult, softmax, softmax_shapes
from service.requests._common import (
    PRECISIONS,
    AnyArray,
    ArraySpec,
    Bound,
    Precision,
    Range,
    Work,
    choice,
    integer,
    names,
    number,
)

SoftmaxOutput = Literal["log_probabilities"]


@dataclass(frozen=True)
class SoftmaxRequest:
    """Probabilities over the last axis of ``logits``, after mask, temperature, top-k, top-p and min-p."""

    ARRAYS: ClassVar[dict[str, ArraySpec]] = {
        "logits": ArraySpec(axes="[..., V]"),
        "mask": ArraySpec(kind="boolean", axes="[..., V]"),
    }
    TEMPERATURE: ClassVar[Range] = Range(minimum=0)  # 0 is the greedy limit
    TOP_K: ClassVar[Range] = Range(minimum=1)
    TOP_P: ClassVar[Range] = Range(minimum=0, maximum=1, min_inclusive=False)
    MIN_P: ClassVar[Range] = Range(minimum=0, maximum=1)

    logits: AnyArray
    mask: AnyArray | None = None
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    include: frozenset[SoftmaxOutput] = frozenset()
    precision: Precision = "float64"
    shape: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name, spec in self.ARRAYS.items():
            array = getattr(self, name)
            if array is not None:
                spec.check(array, field=name)
        set_ = object.__setattr__  # frozen: the checked, normalized values are set once, here
        set_(self, "temperature", number(self.temperature, field="temperature", allowed=self.TEMPERATURE))
        if self.top_k is not None:
            set_(self, "top_k", integer(self.top_k, field="top_k", allowed=self.TOP_K))
        if self.top_p is not None:
            set_(self, "top_p", number(self.top_p, field="top_p", allowed=self.TOP_P))
        if self.min_p is not None:
            set_(self, "min_p", number(self.min_p, field="min_p", allowed=self.MIN_P))
        set_(self, "include", names(self.include, SoftmaxOutput, field="include"))
        set_(self, "precision", choice(self.precision, Precision, field="precision"))
        mask_shape = None if self.mask is None else self.mask.shape
        set_(self, "shape", softmax_shapes(self.logits.shape, mask_shape=mask_shape))

    def work(self) -> Work:
        """The probabilities (and, when asked for, the log-probabilities) are held whole."""
        probabilities = math.prod(self.shape)
        rows = probabilities // self.shape[-1]
        arrays = 1 + ("log_probabilities" in self.include)
        return Work(
            elements=probabilities,
            bounds=(Bound(probabilities, "probabilities"),),
            answer_elements=probabilities * arrays + 2 * rows,  # + entropy and argmax per row
        )

    def run(self) -> SoftmaxResult:
        """The kernel's answer to this request."""
        return softmax(
            self.logits,
            temperature=self.temperature,
            mask=self.mask,
            top_k=self.top_k,
            top_p=self.top_p,
            min_p=self.min_p,
            dtype=PRECISIONS[self.precision],
        )
