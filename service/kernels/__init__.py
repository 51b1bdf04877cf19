"""Pure-NumPy numerical kernels: attention, multi-head layers, positional encodings, normalization,
feed-forward layers, Transformer blocks, softmax, likelihood, sampling.

Each computation is one function of its arrays, an options object and the outputs asked for:
``attention(query, key, value, AttentionOptions(causal=True), include={"weights"})``,
``multi_head_attention(x, weights=MultiHeadWeights(...), options=...)``,
``layer_norm(x, NormOptions(kind="rms"))``, ``transformer_block(x, TransformerBlockLayers(...), options)``,
``softmax(logits, truncation=Truncation(top_p=0.9))``. The options objects are frozen dataclasses checked
when made, so the typed requests hold them and pass them down whole.

The implementation lives in private modules (``_attention``, ``_multihead``, ``_positions``, ``_norms``,
``_feed_forward``, ``_block``, ``_softmax``,
``_likelihood``, ``_sampling``, ``_truncation``, ``_visibility``, ``_common``, ``_errors``), as in SciPy's
``scipy.special`` and JAX's ``jax.nn``; this package re-exports the public names, so that
``service.kernels.attention`` is the function and no module shadows it.
"""

from __future__ import annotations

from service.kernels._attention import (
    AttentionOptions,
    AttentionOutput,
    AttentionResult,
    AttentionShapes,
    EmptyRowPolicy,
    attention,
    attention_shapes,
    check_window,
)
from service.kernels._block import (
    BlockOutput,
    NormPosition,
    TransformerBlockLayers,
    TransformerBlockResult,
    TransformerBlockShapes,
    transformer_block,
    transformer_block_shapes,
)
from service.kernels._common import BLOCK_ELEMENTS, Range, all_finite, rows_per_block
from service.kernels._errors import (
    EmptyRowError,
    KernelError,
    NumericalOverflowError,
    ShapeError,
    fields_under,
)
from service.kernels._feed_forward import (
    Activation,
    FeedForwardOutput,
    FeedForwardResult,
    FeedForwardShapes,
    FeedForwardWeights,
    feed_forward,
    feed_forward_shapes,
)
from service.kernels._likelihood import (
    MAX_TOP_LOGPROBS,
    LikelihoodResult,
    likelihood_shapes,
    sequence_log_likelihood,
)
from service.kernels._multihead import (
    MultiHeadOutput,
    MultiHeadResult,
    MultiHeadShapes,
    MultiHeadWeights,
    multi_head_attention,
    multi_head_shapes,
)
from service.kernels._norms import NormKind, NormOptions, layer_norm, norm_shape
from service.kernels._positions import (
    Rotary,
    RotaryStyle,
    RotaryTables,
    apply_rotary,
    check_rotary,
    rotary_tables,
    sinusoidal_encoding,
)
from service.kernels._sampling import MAX_NUM_SAMPLES, MAX_SEED, SampleResult, sample, sample_shapes
from service.kernels._softmax import (
    SoftmaxResult,
    log_softmax,
    softmax,
    softmax_shapes,
    tempered_log_softmax,
)
from service.kernels._truncation import Truncation
from service.kernels._visibility import CausalAlignment

__all__ = [
    "BLOCK_ELEMENTS",
    "MAX_NUM_SAMPLES",
    "MAX_SEED",
    "MAX_TOP_LOGPROBS",
    "Activation",
    "AttentionOptions",
    "AttentionOutput",
    "AttentionResult",
    "AttentionShapes",
    "BlockOutput",
    "CausalAlignment",
    "EmptyRowError",
    "EmptyRowPolicy",
    "FeedForwardOutput",
    "FeedForwardResult",
    "FeedForwardShapes",
    "FeedForwardWeights",
    "KernelError",
    "LikelihoodResult",
    "MultiHeadOutput",
    "MultiHeadResult",
    "MultiHeadShapes",
    "MultiHeadWeights",
    "NormKind",
    "NormOptions",
    "NormPosition",
    "NumericalOverflowError",
    "Range",
    "Rotary",
    "RotaryStyle",
    "RotaryTables",
    "SampleResult",
    "ShapeError",
    "SoftmaxResult",
    "TransformerBlockLayers",
    "TransformerBlockResult",
    "TransformerBlockShapes",
    "Truncation",
    "all_finite",
    "apply_rotary",
    "attention",
    "attention_shapes",
    "check_rotary",
    "check_window",
    "feed_forward",
    "feed_forward_shapes",
    "fields_under",
    "layer_norm",
    "likelihood_shapes",
    "log_softmax",
    "multi_head_attention",
    "multi_head_shapes",
    "norm_shape",
    "rotary_tables",
    "rows_per_block",
    "sample",
    "sample_shapes",
    "sequence_log_likelihood",
    "sinusoidal_encoding",
    "softmax",
    "softmax_shapes",
    "tempered_log_softmax",
    "transformer_block",
    "transformer_block_shapes",
]
