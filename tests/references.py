"""Independent references for the kernels and the HTTP API: plain Python loops with math.exp.

Each reference works one row or one sequence at a time, written for clarity rather than speed, and
shares no code with ``service.kernels``. The hypothesis strategies draw the random cases both the
kernel tests and the HTTP tests check against them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

Array = NDArray[Any]
IGNORE = -100


@dataclass
class Reference:
    output: Array
    weights: Array
    logsumexp: Array
    empty: Array


def reference_attention(
    query: Array,
    key: Array,
    value: Array,
    *,
    mask: Array | None = None,
    bias: Array | None = None,
    causal: str | None = None,
    scale: float | None = None,
) -> Reference:
    """Loops over batch, query rows and keys with math.exp; every input already has the full batch."""
    batch, n, d_k = query.shape[:-2], query.shape[-2], query.shape[-1]
    m, d_v = key.shape[-2], value.shape[-1]
    scale = 1 / math.sqrt(d_k) if scale is None else scale
    output = np.zeros((*batch, n, d_v))
    weights = np.zeros((*batch, n, m))
    lse = np.full((*batch, n), -math.inf)
    empty = np.zeros((*batch, n), dtype=bool)
    for index in np.ndindex(*batch):
        for i in range(n):
            scores = {}
            for j in range(m):
                if mask is not None and not mask[(*index, i, j)]:
                    continue
                if causal == "lower_right" and j > i + m - n:
                    continue
                if causal == "upper_left" and j > i:
                    continue
                dot = sum(float(query[(*index, i, t)]) * float(key[(*index, j, t)]) for t in range(d_k))
                scores[j] = dot * scale + (0.0 if bias is None else float(bias[(*index, i, j)]))
            if not scores:
                empty[(*index, i)] = True
                continue
            top = max(scores.values())
            exps = {j: math.exp(s - top) for j, s in scores.items()}
            total = sum(exps.values())
            lse[(*index, i)] = top + math.log(total)
            for j, e in exps.items():
                weights[(*index, i, j)] = e / total
            for c in range(d_v):
                output[(*index, i, c)] = sum(
                    weights[(*index, i, j)] * value[(*index, j, c)] for j in range(m)
                )
    return Reference(output, weights, lse, empty)


@st.composite
def attention_cases(draw: st.DrawFn) -> dict[str, Any]:
    """Random batched shapes where each input may drop or shrink batch dims to exercise broadcasting."""
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    n, m = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    d_k, d_v = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def lead() -> tuple[int, ...]:
        # Each batch dim is kept, set to 1, or (leading ones only) dropped.
        kept = batch[draw(st.integers(0, len(batch))) :] if batch else ()
        return tuple(size if draw(st.booleans()) else 1 for size in kept)

    case: dict[str, Any] = {
        "query": rng.normal(size=(*lead(), n, d_k)) * draw(st.sampled_from([0.1, 1.0, 5.0])),
        "key": rng.normal(size=(*lead(), m, d_k)),
        "value": rng.normal(size=(*lead(), m, d_v)),
    }
    # Masks and bias may not add batch dims, so they are drawn within what query/key/value span.
    batch = np.broadcast_shapes(*(case[name].shape[:-2] for name in ("query", "key", "value")))
    case["batch"] = batch
    mask_kind = draw(st.sampled_from(["none", "full", "per_key", "lead"]))
    if mask_kind == "full":
        case["mask"] = rng.random((*batch, n, m)) < 0.7
    elif mask_kind == "per_key":
        case["mask"] = rng.random(m) < 0.7
    elif mask_kind == "lead":
        case["mask"] = rng.random((*lead(), 1, m)) < 0.7
    if draw(st.booleans()):
        case["bias"] = rng.normal(size=(*lead(), n, m))
    case["causal"] = draw(st.sampled_from([None, "lower_right", "upper_left"]))
    case["scale"] = draw(st.sampled_from([None, 0.5, 2.0, -1.0]))
    return case


def full(array: Array | None, shape: tuple[int, ...]) -> Array | None:
    return None if array is None else np.broadcast_to(array, shape)


def reference_for_case(case: dict[str, Any], *, scale: float | None) -> Reference:
    """The reference for an :func:`attention_cases` case, every input broadcast to the full batch."""
    batch = case["batch"]
    n, d_k = case["query"].shape[-2:]
    m, d_v = case["value"].shape[-2:]
    return reference_attention(
        np.broadcast_to(case["query"], (*batch, n, d_k)),
        np.broadcast_to(case["key"], (*batch, m, d_k)),
        np.broadcast_to(case["value"], (*batch, m, d_v)),
        mask=full(case.get("mask"), (*batch, n, m)),
        bias=full(case.get("bias"), (*batch, n, m)),
        causal=case["causal"],
        scale=scale,
    )


def reference_row(
    logits: list[float],
    *,
    visible: list[bool],
    temperature: float,
    top_k: int | None,
    top_p: float | None,
) -> tuple[list[float], list[bool]]:
    """One row, step by step: mask → temperature → top_k → top_p → renormalize. Returns (probs, kept)."""
    indices = [i for i in range(len(logits)) if visible[i]]
    if temperature == 0:
        best = max(logits[i] for i in indices)
        kept = {i for i in indices if logits[i] == best}
    else:
        kept = set(indices)
    if top_k is not None and top_k < len(indices):
        kth = sorted((logits[i] for i in indices), reverse=True)[top_k - 1]
        kept = {i for i in kept if logits[i] >= kth}

    def distribution(members: set[int]) -> dict[int, float]:
        if temperature == 0:
            return {i: 1 / len(members) for i in members}
        top = max(logits[i] for i in members)
        exps = {i: math.exp((logits[i] - top) / temperature) for i in members}
        total = sum(exps.values())
        return {i: e / total for i, e in exps.items()}

    if top_p is not None:
        probs = distribution(kept)
        order = sorted(kept, key=lambda i: (-probs[i], i))
        nucleus: set[int] = set()
        mass = 0.0
        for i in order:
            nucleus.add(i)
            mass += probs[i]
            if mass >= top_p:
                break
        kept = nucleus
    final = distribution(kept)
    return [final.get(i, 0.0) for i in range(len(logits))], [i in kept for i in range(len(logits))]


def nucleus_is_ambiguous(
    row: list[float], visible: list[bool], temperature: float, top_k: int | None, top_p: float
) -> bool:
    """True when a cumulative probability is within rounding of top_p, where either answer is right."""
    probs, kept = reference_row(row, visible=visible, temperature=temperature, top_k=top_k, top_p=None)
    ordered = sorted((p for p, k in zip(probs, kept, strict=True) if k), reverse=True)
    return any(abs(sum(ordered[: i + 1]) - top_p) < 1e-9 for i in range(len(ordered)))


@st.composite
def logits_cases(draw: st.DrawFn) -> dict[str, Any]:
    shape = (*draw(st.lists(st.integers(1, 3), max_size=2)), draw(st.integers(1, 8)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # Rounded logits make ties (top-k boundaries, greedy splits) common.
    logits = np.round(
        rng.normal(size=shape) * draw(st.sampled_from([0.5, 3.0, 30.0])), draw(st.integers(0, 3))
    )
    mask = None
    if draw(st.booleans()):
        mask = rng.random(shape) < 0.6
        mask[..., rng.integers(shape[-1])] = True  # at least one visible entry per row
    return {
        "logits": logits,
        "mask": mask,
        "temperature": draw(st.sampled_from([1.0, 0.5, 2.0, 0.01, 0.0, 7.0])),
        "top_k": draw(st.none() | st.integers(1, 9)),
        "top_p": draw(st.none() | st.sampled_from([1.0, 0.5, 0.9]) | st.floats(0.01, 1.0)),
    }


def reference_sequence(
    logits: Array, targets: Array, *, shift: bool, temperature: float, top_k: int
) -> dict[str, Any]:
    """One sequence ([T, V] logits, [T] targets) with explicit loops and math.exp / math.log."""
    length, vocabulary = logits.shape
    logprobs: list[float | None] = [None] * length
    ranks = [0] * length
    tops: list[list[tuple[int, float]] | None] = [None] * length
    for position in range(length):
        row = position - 1 if shift else position
        target = int(targets[position])
        if row < 0 or target == IGNORE:
            continue
        tempered = [float(x) / temperature for x in logits[row]]
        top = max(tempered)
        log_total = math.log(sum(math.exp(x - top) for x in tempered))
        row_logprobs = [(x - top) - log_total for x in tempered]
        logprobs[position] = row_logprobs[target]
        ranks[position] = 1 + sum(1 for x in tempered if x > tempered[target])
        ordered = sorted(range(vocabulary), key=lambda i: (-tempered[i], i))
        tops[position] = [(i, row_logprobs[i]) for i in ordered[:top_k]]
    scored = [value is not None for value in logprobs]
    total = sum(value for value in logprobs if value is not None)
    count = sum(scored)
    return {
        "logprobs": logprobs,
        "ranks": ranks,
        "scored": scored,
        "log_likelihood": total,
        "num_tokens": count,
        "mean_nll": -total / count if count else math.nan,
        "is_greedy": all(rank == 1 for rank, s in zip(ranks, scored, strict=True) if s),
        "tops": tops,
    }


@st.composite
def likelihood_cases(draw: st.DrawFn) -> dict[str, Any]:
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    length, vocabulary = draw(st.integers(1, 6)), draw(st.integers(1, 7))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # Rounding makes tied logits (rank and top-k tie rules) common.
    logits = np.round(rng.normal(size=(*batch, length, vocabulary)) * 3, draw(st.integers(0, 2)))
    targets = rng.integers(0, vocabulary, size=(*batch, length))
    targets[rng.random(targets.shape) < 0.25] = IGNORE
    return {
        "logits": logits,
        "targets": targets,
        "shift": draw(st.booleans()),
        "temperature": draw(st.sampled_from([1.0, 0.5, 2.0, 0.1])),
        "top_logprobs": draw(st.integers(0, 8)),
    }


def reference_warpers_row(
    logits: list[float],
    *,
    visible: list[bool],
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    min_p: float | None,
) -> tuple[list[float], list[bool]]:
    """One row through Hugging Face's warpers as documented, in their order; returns (probs, kept).

    Temperature divides the scores (0: only the maxima stay, sharing equally); ``TopKLogitsWarper``
    removes scores below the k-th largest; ``TopPLogitsWarper`` sorts ascending and removes the tokens
    whose cumulative probability is <= 1 - top_p, always keeping the most probable; ``MinPLogitsWarper``
    removes probabilities below min_p × the largest. Each works on what the previous left (-inf scores).
    Where HF's unstable sort leaves a tie at the nucleus edge open, the higher index goes first.
    """
    size = len(logits)
    if temperature == 0:
        best = max(logits[i] for i in range(size) if visible[i])
        scores = [0.0 if visible[i] and logits[i] == best else -math.inf for i in range(size)]
    else:
        scores = [logits[i] / temperature if visible[i] else -math.inf for i in range(size)]

    def probabilities() -> list[float]:
        top = max(scores)
        exps = [0.0 if s == -math.inf else math.exp(s - top) for s in scores]
        total = sum(exps)
        return [e / total for e in exps]

    if top_k is not None:
        kth = sorted(scores, reverse=True)[min(top_k, size) - 1]
        scores = [s if s >= kth else -math.inf for s in scores]
    if top_p is not None:
        probs = probabilities()
        ascending = sorted(range(size), key=lambda i: (probs[i], -i))
        cumulative = 0.0
        for position, i in enumerate(ascending):
            cumulative += probs[i]
            if cumulative <= 1 - top_p and position < size - 1:
                scores[i] = -math.inf
    if min_p is not None:
        probs = probabilities()
        threshold = min_p * max(probs)
        scores = [s if probs[i] >= threshold else -math.inf for i, s in enumerate(scores)]
    final = probabilities()
    return final, [s > -math.inf and p > 0 for s, p in zip(scores, final, strict=True)]


def warpers_are_ambiguous(
    logits: list[float],
    *,
    visible: list[bool],
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    min_p: float | None,
) -> bool:
    """True when a top-p or min-p decision is within rounding of its threshold: either answer is right."""
    if top_p is not None:
        probs, _ = reference_warpers_row(
            logits, visible=visible, temperature=temperature, top_k=top_k, top_p=None, min_p=None
        )
        ascending = sorted(probs)
        cumulative = [sum(ascending[: i + 1]) for i in range(len(ascending))]
        if any(abs(c - (1 - top_p)) < 1e-9 for c in cumulative):
            return True
    if min_p is not None:
        probs, _ = reference_warpers_row(
            logits, visible=visible, temperature=temperature, top_k=top_k, top_p=top_p, min_p=None
        )
        largest = max(probs)
        if any(p > 0 and abs(p / largest - min_p) < 1e-9 for p in probs):
            return True
    return False


@st.composite
def sampling_cases(draw: st.DrawFn) -> dict[str, Any]:
    """A softmax case plus min_p: each truncation drawn absent or present, so they combine."""
    case = draw(logits_cases())
    case["min_p"] = draw(st.none() | st.sampled_from([0.0, 0.05, 0.5, 1.0]) | st.floats(0.0, 1.0))
    return case


def reference_sample(
    logits: list[list[float]],
    *,
    num_samples: int,
    seed: int,
    temperature: float = 1.0,
    mask: Any = None,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
) -> list[list[int]]:
    """The documented draw, row by row: NumPy's ``Generator(PCG64(seed)).random()`` gives the uniforms
    in order; each picks the first token whose cumulative probability (math.exp, summed left to right)
    exceeds it. Greedy (temperature 0) is the first maximum. ``mask`` broadcasts to the logits."""
    rng = np.random.Generator(np.random.PCG64(seed))
    shape = (len(logits), len(logits[0]))
    masks = np.ones(shape, dtype=bool) if mask is None else np.broadcast_to(mask, shape)
    tokens = []
    for row, row_mask in zip(logits, masks, strict=True):
        visible = [bool(v) for v in row_mask]
        probs, _ = reference_warpers_row(
            row, visible=visible, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p
        )
        if temperature == 0:
            tokens.append([probs.index(max(probs))] * num_samples)
            continue
        drawn = []
        for _ in range(num_samples):
            u, cumulative = float(rng.random()), 0.0
            for i, p in enumerate(probs):
                cumulative += p
                if u < cumulative and p > 0:
                    drawn.append(i)
                    break
            else:
                drawn.append(max(i for i, p in enumerate(probs) if p > 0))
        tokens.append(drawn)
    return tokens
