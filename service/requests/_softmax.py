"""The typed softmax request."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

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

if TYPE_CHECKING:  # sample builds on softmax, not the other way round
    from service.requests._sample import SampleRequest

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
        check_distribution(self)
        set_ = object.__setattr__  # frozen: the checked, normalized values are set once, here
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


def check_distribution(request: SoftmaxRequest | SampleRequest) -> None:
    """Check and normalize, in place, what softmax and sample share: the logits and mask, the temperature and
    the truncation (top-k, top-p, min-p). Both requests name these fields alike and refuse them alike, since
    ``/v1/softmax`` shows exactly the distribution ``/v1/sample`` draws from."""
    for name, spec in SoftmaxRequest.ARRAYS.items():
        array = getattr(request, name)
        if array is not None:
            spec.check(array, field=name)
    set_ = object.__setattr__  # frozen: the checked, normalized values are set once, by __post_init__
    set_(
        request,
        "temperature",
        number(request.temperature, field="temperature", allowed=SoftmaxRequest.TEMPERATURE),
    )
    if request.top_k is not None:
        set_(request, "top_k", integer(request.top_k, field="top_k", allowed=SoftmaxRequest.TOP_K))
    if request.top_p is not None:
        set_(request, "top_p", number(request.top_p, field="top_p", allowed=SoftmaxRequest.TOP_P))
    if request.min_p is not None:
        set_(request, "min_p", number(request.min_p, field="min_p", allowed=SoftmaxRequest.MIN_P))
