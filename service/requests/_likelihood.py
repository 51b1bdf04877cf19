"""The typed log-likelihood request."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from service.kernels import (
    MAX_TOP_LOGPROBS,
    LikelihoodResult,
    Range,
    likelihood_shapes,
    sequence_log_likelihood,
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
    number,
)
from service.requests._distribution import LOGIT_COST, TOP_K_COST

# Logits are at most [batch, head, T, V], so targets [batch, head, T].
TARGETS_MAX_RANK = 3

# A {token, logprob} object of top_logprobs is built from Python objects (a dict, an int, a float)
# before it is written: about as much memory as 32 float64 elements.
TOP_LOGPROB_COST = 32
# A row whose top entries tie at the k-th largest is sorted again on its own (stable, so that lower ids win),
# a NumPy call per row: about 2 µs, 64 reference scores, counted for every listed row.
TIED_ROW_COST = 64


@dataclass(frozen=True)
class LikelihoodRequest:
    """Score ``targets`` under ``log_softmax(logits / temperature)``, optionally shifted (causal LM loss)."""

    ARRAYS: ClassVar[dict[str, ArraySpec]] = {
        "logits": ArraySpec(min_rank=2, axes="[..., T, V]"),
        "targets": ArraySpec(kind="integer", min_rank=1, max_rank=TARGETS_MAX_RANK, axes="[..., T]"),
    }
    TEMPERATURE: ClassVar[Range] = Range(minimum=0, min_inclusive=False)
    TOP_LOGPROBS: ClassVar[Range] = Range(minimum=0, maximum=MAX_TOP_LOGPROBS)

    logits: AnyArray
    targets: AnyArray
    shift: bool = False
    ignore_index: int = -100
    temperature: float = 1.0
    top_logprobs: int = 0
    precision: Precision = "float64"
    batch: tuple[int, ...] = field(init=False, repr=False)
    length: int = field(init=False, repr=False)
    vocabulary: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name, spec in self.ARRAYS.items():
            spec.check(getattr(self, name), field=name)
        set_ = object.__setattr__  # frozen: the checked, normalized values are set once, here
        set_(self, "shift", boolean(self.shift, field="shift"))
        set_(self, "ignore_index", integer(self.ignore_index, field="ignore_index"))
        set_(self, "temperature", number(self.temperature, field="temperature", allowed=self.TEMPERATURE))
        set_(
            self, "top_logprobs", integer(self.top_logprobs, field="top_logprobs", allowed=self.TOP_LOGPROBS)
        )
        set_(self, "precision", choice(self.precision, Precision, field="precision"))
        batch, length, vocabulary = likelihood_shapes(self.logits.shape, self.targets.shape)
        set_(self, "batch", batch)
        set_(self, "length", length)
        set_(self, "vocabulary", vocabulary)

    def work(self) -> Work:
        """The log-probabilities of a block of rows, or the top_logprobs objects, whichever is larger."""
        sequences = math.prod(self.batch)
        positions = sequences * self.length
        listed = min(self.top_logprobs, self.vocabulary)
        held = max(positions * self.vocabulary, positions * listed * TOP_LOGPROB_COST)
        what = f"log-probabilities (batch × T × V; each top_logprobs entry counts {TOP_LOGPROB_COST})"
        return Work(
            elements=held,
            bounds=(Bound(held, what),),
            # token log-probabilities and ranks per position, five totals per sequence, 2 per listed token
            answer_elements=2 * positions + 5 * sequences + 2 * positions * listed,
            # a log-softmax of every row (and a partial sort for top_logprobs): within MAX_WORK_ELEMENTS
            # the worst accepted body takes about a second (docs/operations.md), so no compute bound
            compute=positions * self.vocabulary * (LOGIT_COST + (TOP_K_COST if listed else 0))
            + (positions * TIED_ROW_COST if listed else 0),
        )

    def run(self) -> LikelihoodResult:
        """The kernel's answer to this request."""
        return sequence_log_likelihood(
            self.logits,
            self.targets,
            shift=self.shift,
            ignore_index=self.ignore_index,
            temperature=self.temperature,
            top_logprobs=self.top_logprobs,
            dtype=PRECISIONS[self.precision],
        )
