"""Pure-NumPy numerical kernels: attention, softmax and sequence log-likelihood."""

from __future__ import annotations

from service.kernels.attention import (
    AttentionResult,
    AttentionShapes,
    CausalAlignment,
    EmptyRowPolicy,
    attention,
    attention_shapes,
)
from service.kernels.errors import EmptyRowError, KernelError, NumericalOverflowError, ShapeError
from service.kernels.likelihood import (
    MAX_TOP_LOGPROBS,
    LikelihoodResult,
    likelihood_shapes,
    sequence_log_likelihood,
)
from service.kernels.softmax import SoftmaxResult, log_softmax, softmax, softmax_shapes

__all__ = [
    "MAX_TOP_LOGPROBS",
    "AttentionResult",
    "AttentionShapes",
    "CausalAlignment",
    "EmptyRowError",
    "EmptyRowPolicy",
    "KernelError",
    "LikelihoodResult",
    "NumericalOverflowError",
    "ShapeError",
    "SoftmaxResult",
    "attention",
    "attention_shapes",
    "likelihood_shapes",
    "log_softmax",
    "sequence_log_likelihood",
    "softmax",
    "softmax_shapes",
]
