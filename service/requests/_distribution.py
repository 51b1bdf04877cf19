"""What softmax and sample share: the logits and mask, the temperature and the truncation (top-k, top-p,
min-p), declared and checked once, since ``/v1/softmax`` shows exactly the distribution ``/v1/sample``
draws from."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from service.kernels import Range, Truncation
from service.requests._common import AnyArray, ArraySpec, Bound, integer, number


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


# The arithmetic of a distribution, per logit, in reference scores (the compute limit's unit, about 8 ns on
# the benchmark machine), measured on 8 million logits in rows of 64 to 8 million: tempering, exp and
# normalizing take 20-90 ns a logit (a single huge row is the slowest, its temporaries being fresh memory).
LOGIT_COST = 4
TOP_K_COST = 2  # np.partition: 15 ns a logit
PORTABLE_EXP_COST = 4  # the machine-independent exp that min-p, top-p and every draw decide on: 25-30 ns
# top-p sorts each row: 110-160 ns a logit more, growing with log2 V; counted as ⌈log2 V / 2⌉.
# A draw is a binary search over its row's cumulative sums: 15-20 ns for each of its log2 V steps.
DRAW_STEP_COST = 3


def distribution_work(request: DistributionRequest, *, sampled: bool) -> int:
    """The arithmetic of softmax's (or sample's) distribution, in reference scores: each logit counts
    ``LOGIT_COST``, more under ``top_k``, ``min_p`` and ``top_p`` (whose sort counts ⌈log2 V / 2⌉ a logit);
    sampling always takes the portable exp of every logit it draws from."""
    shape = request.logits.shape
    vocabulary = shape[-1]
    per_logit = LOGIT_COST
    if request.top_k is not None and request.top_k < vocabulary:
        per_logit += TOP_K_COST
    sorts = request.top_p is not None and request.top_p < 1
    if sampled or sorts or request.min_p:
        per_logit += PORTABLE_EXP_COST
    if sorts:
        per_logit += -(-vocabulary.bit_length() // 2)
    return math.prod(shape) * per_logit


def distribution_bound(computed: int, draws: str = "") -> Bound:
    """The compute bound of a distribution's ``computed`` arithmetic (and ``draws``, described)."""
    return Bound(
        computed,
        f"a distribution's arithmetic (logits × {LOGIT_COST}, more under top_k, min_p and top_p{draws})",
        setting="MAX_OUTPUT_ONLY_WORK_ELEMENTS",
    )
