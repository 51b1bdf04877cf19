"""What softmax and sample share: the logits and mask, the temperature and the truncation (top-k, top-p,
min-p), declared and checked once, since ``/v1/softmax`` shows exactly the distribution ``/v1/sample``
draws from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from service.kernels import Range, Truncation
from service.requests._common import AnyArray, ArraySpec, integer, number


@dataclass(frozen=True)
class DistributionRequest:
    """The fields of a request for a distribution over the last axis of ``logits``, and their rules.

    ``truncation`` is derived from ``top_k``, ``top_p`` and ``min_p`` once they are checked, and is what
    the kernel receives. A subclass's ``__post_init__`` calls :meth:`check_distribution` first.
    """

    ARRAYS: ClassVar[dict[str, ArraySpec]] = {
        "logits": ArraySpec(axes="[..., V]"),
        "mask": ArraySpec(kind="boolean", axes="[..., V]"),
    }
    TEMPERATURE: ClassVar[Range] = Range(minimum=0)  # 0 is the greedy limit
    # The kernel's rules, not restated: the contract and both protocols take the bounds from these.
    TOP_K: ClassVar[Range] = Truncation.TOP_K
    TOP_P: ClassVar[Range] = Truncation.TOP_P
    MIN_P: ClassVar[Range] = Truncation.MIN_P

    logits: AnyArray
    mask: AnyArray | None = None
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    truncation: Truncation = field(init=False, repr=False)

    def check_distribution(self) -> None:
        """Check and normalize the shared fields in place, then derive the truncation the kernel takes."""
        for name, spec in DistributionRequest.ARRAYS.items():
            array = getattr(self, name)
            if array is not None:
                spec.check(array, field=name)
        set_ = object.__setattr__  # frozen: the checked, normalized values are set once, by __post_init__
        set_(self, "temperature", number(self.temperature, field="temperature", allowed=self.TEMPERATURE))
        if self.top_k is not None:
            set_(self, "top_k", integer(self.top_k, field="top_k", allowed=self.TOP_K))
        if self.top_p is not None:
            set_(self, "top_p", number(self.top_p, field="top_p", allowed=self.TOP_P))
        if self.min_p is not None:
            set_(self, "min_p", number(self.min_p, field="min_p", allowed=self.MIN_P))
        set_(self, "truncation", Truncation(top_k=self.top_k, top_p=self.top_p, min_p=self.min_p))
