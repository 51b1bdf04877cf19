"""Seeded sampling of tokens from logits over the last axis, after temperature, top-k, top-p and min-p.

The algorithm, which fixes the tokens for a given request and seed on every machine:

1. The distribution is the one ``softmax`` shows for the same options: the tempered logits
   (:func:`tempered_shift`, shared with softmax and the log-likelihood), truncated by top-k, top-p and
   min-p in that order (:func:`truncate`, shared with softmax).
2. Each row's unnormalized probabilities are ``portable_exp`` of its tempered logits, which gives the
   same bits on every CPU (``np.exp`` does not), and its cumulative sum ``c`` is taken in index order.
3. The uniforms come from NumPy's PCG64 seeded with ``seed`` (through ``SeedSequence``, as
   ``np.random.default_rng(seed)`` does): 64-bit outputs ``x`` of ``random_raw``, each turned into
   ``u = (x >> 11) · 2⁻⁵³`` in [0, 1), which is what ``Generator.random`` computes. Bit generator streams
   are the part of NumPy's random API that is promised never to change. The uniforms are used in the C
   order of the answer ``[..., num_samples]``: all the samples of the first row, then the next row.
4. A uniform ``u`` draws the first token ``i`` with ``u · c[V-1] < c[i]``: token ``i`` owns
   ``[c[i-1], c[i])``, so a draw exactly on a boundary goes to the token after it, and a token of
   probability 0 owns an empty interval and is never drawn.

Temperature 0 is greedy: each row's argmax (the lowest index among equal maxima), with no randomness.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from service.kernels._common import FloatArray, IntArray, check_finite_scalar, check_int, rows_per_block
from service.kernels._softmax import masked_logits, normalize_shifted, softmax_shapes, tempered_shift
from service.kernels._truncation import NO_TRUNCATION, Float64Array, Truncation, kept_weights, truncate

# The largest seed: 2^53 - 1, the largest integer a JavaScript number (and so any JSON parser that reads
# numbers as doubles) holds exactly, so that the seed a client receives is the seed it can send back.
MAX_SEED = (1 << 53) - 1

# The most draws per row one request may ask for (the work limit bounds rows × num_samples as well).
MAX_NUM_SAMPLES = 100_000

_UNIFORM_SCALE = 2.0**-53


@dataclass(frozen=True)
class SampleResult:
    """``num_samples`` tokens drawn from each row, their log-probabilities, and the seed used."""

    tokens: IntArray
    logprobs: FloatArray
    seed: int


def sample_shapes(
    logits_shape: Sequence[int], *, mask_shape: Sequence[int] | None = None, num_samples: int = 1
) -> tuple[int, ...]:
    """Check the shapes (without allocating) and return the shape of the tokens, ``[..., num_samples]``."""
    shape = softmax_shapes(logits_shape, mask_shape=mask_shape)
    return (*shape[:-1], num_samples)


def fresh_seed() -> int:
    """A seed from the operating system's entropy, in [0, MAX_SEED]."""
    return secrets.randbits(53)


def sample(
    logits: ArrayLike,
    *,
    temperature: float = 1.0,
    mask: ArrayLike | None = None,
    truncation: Truncation = NO_TRUNCATION,
    num_samples: int = 1,
    seed: int | None = None,
) -> SampleResult:
    """Draw ``num_samples`` tokens (with replacement) from each row of ``logits`` ``[..., V]``.

    The distribution is softmax's for the same ``temperature``, ``mask`` and ``truncation``; the
    arithmetic is float64. ``tokens`` and ``logprobs`` are ``[..., num_samples]``. ``seed`` None draws a
    fresh one; the result says which.
    """
    temperature = check_finite_scalar(temperature, field="temperature", minimum=0.0)
    num_samples = check_int(num_samples, field="num_samples", minimum=1, maximum=MAX_NUM_SAMPLES)
    seed = fresh_seed() if seed is None else check_int(seed, field="seed", minimum=0, maximum=MAX_SEED)

    masked = masked_logits(logits, mask, np.dtype(np.float64))
    size = masked.shape[-1]
    rows = masked.reshape(-1, size)
    tokens = np.empty((rows.shape[0], num_samples), dtype=np.int64)
    logprobs = np.empty((rows.shape[0], num_samples), dtype=np.float64)
    uniform = None if temperature == 0 else uniforms(seed, tokens.shape)
    # A block of rows at a time keeps the temporaries (a few arrays the size of the block) small; each
    # row's numbers do not depend on the rows around it, nor its draws on anything but its own uniforms.
    # A block counts its draws too: the binary search holds about seven arrays of them, and 100,000 draws
    # from each of 111 rows of two logits, one block by the logits alone, took a worker 615 MiB past its
    # fresh size (its budget is 384).
    step = rows_per_block(max(size, num_samples), rows.shape[0])
    for start in range(0, rows.shape[0], step):
        block = slice(start, start + step)
        shifted = tempered_shift(rows[block], temperature)
        keep = truncate(rows[block], shifted, truncation)
        weights = kept_weights(shifted, keep)
        if uniform is None:
            # Greedy: every kept entry is a maximum of weight 1, and argmax takes the first of them.
            tokens[block] = np.argmax(weights, axis=-1)[:, None]
        else:
            tokens[block] = draw(weights, uniform[block])
        log_probabilities, _ = normalize_shifted(shifted, keep=keep)  # softmax's, to the bit
        logprobs[block] = np.take_along_axis(log_probabilities, tokens[block], axis=-1)
    answer_shape = (*masked.shape[:-1], num_samples)
    return SampleResult(
        tokens=tokens.reshape(answer_shape), logprobs=logprobs.reshape(answer_shape), seed=seed
    )


def uniforms(seed: int, shape: tuple[int, ...]) -> Float64Array:
    """Uniforms in [0, 1) from PCG64(seed): ``(x >> 11) · 2⁻⁵³`` of each 64-bit output, in C order."""
    raw = np.random.PCG64(seed).random_raw(int(np.prod(shape)))
    values = (raw >> np.uint64(11)).astype(np.float64) * _UNIFORM_SCALE  # exact: 53 bits
    return values.reshape(shape)


def draw(weights: Float64Array, uniform: Float64Array) -> IntArray:
    """For each row of ``weights`` ``[R, V]`` and each of its uniforms ``[R, S]``, the drawn index.

    Index ``i`` is drawn when ``c[i-1] <= u · c[V-1] < c[i]`` for the cumulative sums ``c``: a binary
    search for the first ``c[i]`` above the target, vectorized over rows and samples. Since ``u < 1``
    and ``c[V-1] >= 1`` (the row's maximum has weight 1), the rounded target stays below ``c[V-1]``.
    """
    cumulative = np.cumsum(weights, axis=-1, dtype=np.float64)  # in index order: the same sums anywhere
    targets = uniform * cumulative[:, -1:]
    low = np.zeros(targets.shape, dtype=np.int64)
    high = np.full(targets.shape, weights.shape[-1] - 1, dtype=np.int64)
    for _ in range(weights.shape[-1].bit_length()):  # halves [low, high] each time: enough steps
        middle = (low + high) // 2
        above = np.take_along_axis(cumulative, middle, axis=-1) <= targets
        low = np.where(above, middle + 1, low)
        high = np.where(above, high, middle)
    return low
