"""Per-token log-likelihood of target sequences under a model's logits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
from numpy.typing import ArrayLike

from service.kernels._common import (
    BoolArray,
    DTypeArg,
    FloatArray,
    FloatDType,
    IntArray,
    all_finite,
    as_float_array,
    check_finite_scalar,
    check_int,
    overflow_error,
    resolve_float_dtype,
    rows_per_block,
)
from service.kernels._errors import KernelError, ShapeError, format_shape
from service.kernels._softmax import tempered_log_softmax

MAX_TOP_LOGPROBS = 20


def likelihood_shapes(
    logits_shape: Sequence[int], targets_shape: Sequence[int]
) -> tuple[tuple[int, ...], int, int]:
    """Check the shapes (without allocating) and return ``(batch, T, V)``; nothing broadcasts."""
    logits_shape, targets_shape = tuple(logits_shape), tuple(targets_shape)
    if len(logits_shape) < 2 or logits_shape[-1] < 1:
        raise ShapeError(
            f"logits must have at least 2 dimensions [..., T, V] with V >= 1 but has shape "
            f"{format_shape(logits_shape)}",
            field="logits",
        )
    if targets_shape != logits_shape[:-1]:
        raise ShapeError(
            f"targets shape {format_shape(targets_shape)} does not match logits shape "
            f"{format_shape(logits_shape)}: targets must have shape {format_shape(logits_shape[:-1])}, "
            "one token id per logits row",
            field="targets",
        )
    return logits_shape[:-2], logits_shape[-2], logits_shape[-1]


@dataclass(frozen=True)
class LikelihoodResult:
    """Per-token scores and per-sequence totals; positions that are not scored hold NaN / 0 / -1."""

    token_logprobs: FloatArray
    ranks: IntArray
    scored: BoolArray
    log_likelihood: FloatArray
    num_tokens: IntArray
    mean_nll: FloatArray
    perplexity: FloatArray
    is_greedy: BoolArray
    top_ids: IntArray | None
    top_values: FloatArray | None


def sequence_log_likelihood(
    logits: ArrayLike,
    targets: ArrayLike,
    *,
    shift: bool = False,
    ignore_index: int = -100,
    temperature: float = 1.0,
    top_logprobs: int = 0,
    dtype: DTypeArg = np.float64,
) -> LikelihoodResult:
    """Score ``targets`` under ``log_softmax(logits / temperature)``.

    Without ``shift`` logits row i scores ``targets[i]``; with ``shift`` (causal LM loss) row i scores
    ``targets[i + 1]``, and results stay aligned with ``targets`` (position 0 is never scored).
    Positions whose target is ``ignore_index`` are skipped. Only the scoring rows are read, a block of
    rows at a time, so temporaries are O(block x V).
    """
    float_dtype = resolve_float_dtype(dtype)
    temperature = check_finite_scalar(temperature, field="temperature", minimum=0.0, strict=True)
    top_logprobs = check_int(top_logprobs, field="top_logprobs", minimum=0, maximum=MAX_TOP_LOGPROBS)
    ignore_index = check_int(ignore_index, field="ignore_index", minimum=-(2**63))

    x = as_float_array(logits, float_dtype, field="logits")
    target_ids = _as_token_ids(targets)
    batch, length, vocabulary = likelihood_shapes(x.shape, target_ids.shape)

    counted = target_ids != ignore_index
    out_of_range = counted & ((target_ids < 0) | (target_ids >= vocabulary))
    if out_of_range.any():
        position = tuple(int(i) for i in np.argwhere(out_of_range)[0])
        raise KernelError(
            f"targets{list(position)} = {int(target_ids[position])} is not a token id: the vocabulary has "
            f"V={vocabulary} entries (0 to {vocabulary - 1}), and ignore_index is {ignore_index}",
            field="targets",
        )
    scored = counted.copy()
    if shift:
        scored[..., :1] = False

    # Flattened views: position p is scored by logits row p - shift of the same sequence.
    rows_2d = x.reshape(-1, vocabulary)
    scored_positions = scored.reshape(-1).nonzero()[0]  # np.flatnonzero, without its wrappers
    scoring_rows = scored_positions - int(shift)
    scored_targets = target_ids.reshape(-1)[scored_positions]
    k = min(top_logprobs, vocabulary)

    count = scored_positions.size
    logprobs = np.empty(count, dtype=float_dtype)
    ranks = np.empty(count, dtype=np.int64)
    top_ids = np.empty((count, k), dtype=np.int64)
    top_values = np.empty((count, k), dtype=float_dtype)
    block = rows_per_block(vocabulary, count)
    for start in range(0, count, block):
        stop = min(start + block, count)
        rows = rows_2d[scoring_rows[start:stop]]  # a copy: fancy indexing
        if not all_finite(rows):
            raise overflow_error("logits", float_dtype, field="logits")
        # Each row's target is picked by (row, id) pairs: plain fancy indexing, a fraction of what
        # np.take_along_axis costs per call, and the same entries.
        in_block, block_targets = np.arange(stop - start), scored_targets[start:stop]
        # Ranks and top ids compare the logits themselves: a temperature does not change their order, and
        # dividing by a small one would round distinct logits to the same -inf.
        target_logits = rows[in_block, block_targets]
        ranks[start:stop] = 1 + (rows > target_logits[:, np.newaxis]).sum(axis=-1)
        if k:
            top_ids[start:stop] = _top_ids(rows, k)
        # The same helper as /v1/softmax, so the same logits and temperature give the same bits.
        log_probabilities = tempered_log_softmax(rows, temperature)
        logprobs[start:stop] = log_probabilities[in_block, block_targets]
        if k:
            top_values[start:stop] = log_probabilities[in_block[:, np.newaxis], top_ids[start:stop]]
        if (logprobs[start:stop] == -np.inf).any():
            raise overflow_error("the log-probability of a target token", float_dtype, field="logits")

    return _summarize(
        scored=scored,
        scored_positions=scored_positions,
        logprobs=logprobs,
        ranks=ranks,
        top=(top_ids, top_values) if top_logprobs else None,
        shape=(*batch, length),
        dtype=float_dtype,
    )


def _as_token_ids(targets: ArrayLike) -> IntArray:
    array = np.asarray(targets)
    if array.dtype.kind in "iu":
        return array.astype(np.int64, copy=False)
    if array.size == 0:  # np.asarray([]) is float64
        return array.astype(np.int64)
    if array.dtype.kind == "f" and bool(np.isfinite(array).all()) and bool((array == np.round(array)).all()):
        return array.astype(np.int64)
    raise KernelError(f"targets must be integer token ids, got {array.dtype}", field="targets")


def _top_ids(tempered: FloatArray, k: int) -> IntArray:
    """The ``k`` largest entries of each row, by value descending then id ascending."""
    candidates = np.argpartition(-tempered, k - 1, axis=-1)[:, :k]
    values = cast("FloatArray", np.take_along_axis(tempered, candidates, axis=-1))
    # argpartition picks arbitrarily among values tied with the k-th largest; where such a tie extends
    # beyond the chosen k, redo that row with a full stable sort so that lower ids win.
    kth = values.min(axis=-1, keepdims=True)
    ambiguous = np.count_nonzero(tempered == kth, axis=-1) > np.count_nonzero(values == kth, axis=-1)
    order = np.lexsort((candidates, -values), axis=-1)
    chosen: IntArray = np.take_along_axis(candidates, order, axis=-1).astype(np.int64, copy=False)
    for row in np.flatnonzero(ambiguous):
        chosen[row] = np.argsort(-tempered[row], kind="stable")[:k]
    return chosen


def _summarize(
    *,
    scored: BoolArray,
    scored_positions: IntArray,
    logprobs: FloatArray,
    ranks: IntArray,
    top: tuple[IntArray, FloatArray] | None,
    shape: tuple[int, ...],
    dtype: FloatDType,
) -> LikelihoodResult:
    """Scatter per-scored-token results back to ``shape`` and reduce them per sequence."""
    token_logprobs = np.full(shape, np.nan, dtype=dtype)
    token_logprobs.reshape(-1)[scored_positions] = logprobs
    token_ranks = np.zeros(shape, dtype=np.int64)
    token_ranks.reshape(-1)[scored_positions] = ranks

    log_likelihood = cast(
        "FloatArray", np.asarray(np.where(scored, token_logprobs, 0).sum(axis=-1), dtype=dtype)
    )
    num_tokens = np.asarray(scored.sum(axis=-1), dtype=np.int64)
    has_tokens = num_tokens > 0
    mean_nll = np.full(num_tokens.shape, np.nan, dtype=dtype)
    np.divide(-log_likelihood, num_tokens.astype(dtype), out=mean_nll, where=has_tokens)
    perplexity = np.full(num_tokens.shape, np.nan, dtype=dtype)
    with np.errstate(over="ignore"):
        np.exp(mean_nll, out=perplexity, where=has_tokens)
    if not all_finite(perplexity[has_tokens]):
        raise overflow_error(
            "the perplexity (exp of the mean negative log-likelihood)", dtype, field="logits"
        )
    is_greedy = np.asarray(((token_ranks == 1) | ~scored).all(axis=-1))

    top_ids: IntArray | None = None
    top_values: FloatArray | None = None
    if top is not None:
        ids, values = top
        k = ids.shape[-1]
        top_ids = np.full((*shape, k), -1, dtype=np.int64)
        top_ids.reshape(-1, k)[scored_positions] = ids
        top_values = np.full((*shape, k), np.nan, dtype=dtype)
        top_values.reshape(-1, k)[scored_positions] = values
    return LikelihoodResult(
        token_logprobs=token_logprobs,
        ranks=token_ranks,
        scored=scored,
        log_likelihood=log_likelihood,
        num_tokens=num_tokens,
        mean_nll=mean_nll,
        perplexity=perplexity,
        is_greedy=is_greedy,
        top_ids=top_ids,
        top_values=top_values,
    )
