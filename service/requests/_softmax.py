"""The typed softmax request."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from service.kernels import SoftmaxResult, softmax, softmax_shapes
from service.requests._common import PRECISIONS, Bound, Precision, Work, choice, names
from service.requests._distribution import DistributionRequest, distribution_bound, distribution_work

SoftmaxOutput = Literal["log_probabilities"]


@dataclass(frozen=True)
class SoftmaxRequest(DistributionRequest):
    """Probabilities over the last axis of ``logits``, after mask, temperature, top-k, top-p and min-p."""

    include: frozenset[SoftmaxOutput] = frozenset()
    precision: Precision = "float64"
    shape: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.check_distribution()
        set_ = object.__setattr__  # frozen: the checked, normalized values are set once, here
        set_(self, "include", names(self.include, SoftmaxOutput, field="include"))
        set_(self, "precision", choice(self.precision, Precision, field="precision"))
        mask_shape = None if self.mask is None else self.mask.shape
        set_(self, "shape", softmax_shapes(self.logits.shape, mask_shape=mask_shape))

    def work(self) -> Work:
        """The probabilities (and, when asked for, the log-probabilities) are held whole; their arithmetic,
        the truncation's sort included, is bounded by the compute limit (:func:`distribution_work`)."""
        probabilities = math.prod(self.shape)
        rows = probabilities // self.shape[-1]
        arrays = 1 + ("log_probabilities" in self.include)
        computed = distribution_work(self, sampled=False)
        return Work(
            elements=probabilities,
            bounds=(Bound(probabilities, "probabilities"), distribution_bound(computed)),
            answer_elements=probabilities * arrays + 2 * rows,  # + entropy and argmax per row
            compute=computed,
        )

    def run(self) -> SoftmaxResult:
        """The kernel's answer to this request."""
        return softmax(
            self.logits,
            temperature=self.temperature,
            mask=self.mask,
            truncation=self.truncation,
            dtype=PRECISIONS[self.precision],
        )
