"""The typed sampling request."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from service.kernels import MAX_NUM_SAMPLES, MAX_SEED, Range, SampleResult, sample, sample_shapes
from service.requests._common import Bound, Work, integer
from service.requests._distribution import (
    DRAW_STEP_COST,
    DistributionRequest,
    distribution_bound,
    distribution_work,
)

HELD_PER_DRAW = 3  # arrays held whole per draw: its token, its log-probability and its uniform


@dataclass(frozen=True)
class SampleRequest(DistributionRequest):
    """Draw ``num_samples`` tokens from each row of ``logits``, from the distribution softmax shows
    (temperature 0 is greedy: each row's first argmax)."""

    NUM_SAMPLES: ClassVar[Range] = Range(minimum=1, maximum=MAX_NUM_SAMPLES)
    SEED: ClassVar[Range] = Range(minimum=0, maximum=MAX_SEED)

    num_samples: int = 1
    seed: int | None = None
    shape: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.check_distribution()
        set_ = object.__setattr__  # frozen: the checked, normalized values are set once, here
        set_(self, "num_samples", integer(self.num_samples, field="num_samples", allowed=self.NUM_SAMPLES))
        if self.seed is not None:
            set_(self, "seed", integer(self.seed, field="seed", allowed=self.SEED))
        mask_shape = None if self.mask is None else self.mask.shape
        set_(
            self,
            "shape",
            sample_shapes(self.logits.shape, mask_shape=mask_shape, num_samples=self.num_samples),
        )

    def work(self) -> Work:
        """The distribution is worked through a block of rows at a time, the logits held whole (as
        float64); the draws are held whole three times over (tokens, log-probabilities and their uniforms),
        so three elements each count against the work limit. The compute bound counts the distribution's
        arithmetic and each draw's binary search over its row."""
        distribution = math.prod(self.logits.shape)
        draws = math.prod(self.shape)
        search_steps = self.logits.shape[-1].bit_length()
        computed = distribution_work(self, sampled=True) + draws * search_steps * DRAW_STEP_COST
        return Work(
            elements=max(distribution, draws),
            bounds=(
                Bound(distribution, "probabilities"),
                Bound(HELD_PER_DRAW * draws, f"draws (rows × num_samples) × {HELD_PER_DRAW}"),
                distribution_bound(
                    computed, f", and each draw × {DRAW_STEP_COST} × log2 V for its binary search"
                ),
            ),
            answer_elements=2 * draws + 1,  # tokens, logprobs and the seed
            compute=computed,
        )

    def run(self) -> SampleResult:
        """The kernel's answer to this request."""
        return sample(
            self.logits,
            temperature=self.temperature,
            mask=self.mask,
            truncation=self.truncation,
            num_samples=self.num_samples,
            seed=self.seed,
        )
