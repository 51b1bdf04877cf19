"""What each call returns: small frozen records of NumPy arrays, named like the service's outputs.

Where the service's JSON would hold null, the arrays hold IEEE values: -inf for a hidden score, NaN for
the log-probability of an unscored position or an empty row's log-sum-exp; ranks of unscored positions
are 0. Arrays are read-only views of the answer's bytes (copy one to change it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.floating[Any]]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class AttentionResult:
    output: FloatArray
    weights: FloatArray | None
    scores: FloatArray | None
    logsumexp: FloatArray | None
    scale: float
    empty_rows: IntArray


@dataclass(frozen=True)
class SoftmaxResult:
    probabilities: FloatArray
    log_probabilities: FloatArray | None
    entropy: FloatArray
    argmax: IntArray
    temperature: float


@dataclass(frozen=True)
class SampleResult:
    tokens: IntArray
    logprobs: FloatArray
    seed: int


@dataclass(frozen=True)
class LikelihoodResult:
    token_logprobs: FloatArray
    ranks: IntArray
    log_likelihood: FloatArray
    num_tokens: IntArray
    mean_nll: FloatArray
    perplexity: FloatArray
    is_greedy: BoolArray
    top_logprobs: FloatArray | None
    top_tokens: IntArray | None
