"""How much each request asks for, in the terms of the limits (the README's configuration table).

Checked in the views after validation and before the kernels allocate anything large; the size of each
accepted computation is then counted, once, in the ``attention_work_elements`` histogram.
"""

from __future__ import annotations

import math

from service.kernels import AttentionShapes
from service.web.limits import ensure_work_within
from service.web.metrics import record_work

# The output-only limit bounds time, which grows with d_k + d_v (one product for the scores, one for the
# output); it is stated for d_k = d_v = 64, and wider rows count proportionally more.
REFERENCE_ROW_WIDTH = 128

# A {token, logprob} object of top_logprobs is built from Python objects (a dict, an int, a float)
# before it is written: about as much memory as 32 float64 elements.
TOP_LOGPROB_COST = 32


def check_attention_work(shapes: AttentionShapes, *, include: set[str], empty_rows: str) -> None:
    """Weights and scores are held whole (each one counts); output-only scores go a block at a time."""
    rows = math.prod(shapes.batch) * shapes.n
    held_matrices = len(include & {"weights", "scores"})
    # Under empty_rows="zero" every row could be listed, as an index of len(batch) + 1 integers.
    listed = rows * (len(shapes.batch) + 1) if empty_rows == "zero" else 0
    if held_matrices:
        held = max(shapes.scores_elements * held_matrices, shapes.output_elements, listed)
        ensure_work_within(
            held, what="attention arrays (batch × n × m for each of weights and scores asked for)"
        )
        record_work(held)
        return
    ensure_work_within(max(shapes.output_elements, listed), what="an attention output (batch × n × d_v)")
    widening = max(1.0, (shapes.d_k + shapes.d_v) / REFERENCE_ROW_WIDTH)
    computed = math.ceil(shapes.scores_elements * widening)
    ensure_work_within(
        computed,
        what="attention scores (batch × n × m, output only, × (d_k + d_v) / 128 when that is more than 1)",
        setting="MAX_OUTPUT_ONLY_WORK_ELEMENTS",
    )
    record_work(computed)


def check_softmax_work(shape: tuple[int, ...]) -> None:
    probabilities = math.prod(shape)
    ensure_work_within(probabilities, what="probabilities")
    record_work(probabilities)


def check_likelihood_work(batch: tuple[int, ...], length: int, vocabulary: int, *, top_logprobs: int) -> None:
    positions = math.prod(batch) * length
    held = max(positions * vocabulary, positions * min(top_logprobs, vocabulary) * TOP_LOGPROB_COST)
    ensure_work_within(
        held, what=f"log-probabilities (batch × T × V; each top_logprobs entry counts {TOP_LOGPROB_COST})"
    )
    record_work(held)
