"""Pure-NumPy numerical kernels: attention, softmax and sequence log-likelihood.

The implementation lives in private modules (``_attention``, ``_softmax``, ``_likelihood``, ``_visibility``,
``_common``, ``_errors``), as in SciPy's ``scipy.special`` and JAX's ``jax.nn``; this package re-exports the
public names, so that ``service.kernels.attention`` is the function and no module shadows it.
"""

from __future__ import annotations

from service.kernels._attention import (
    AttentionResult,
    AttentionShapes,
    EmptyRowPolicy,
    attention,
    attention_shapes,
)
from service.kernels._errors import EmptyRowError, KernelError, NumericalOverflowError, ShapeError
from service.kernels._likelihood import (
    MAX_TOP_LOGPROBS,
    LikelihoodResult,
    likelihood_shapes,
    sequence_log_likelihood,
)
from service.kernels._softmax import (
    SoftmaxResult,
    log_softmax,
    softmax,
    softmax_shapes,
    tempered_log_softmax,
)
from service.kernels._visibility import CausalAlignment

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
    "tempered_log_softmax",
]
