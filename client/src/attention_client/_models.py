"""The client's model methods and results, generated from openapi.yaml (make clients): don't edit.

Regenerate after the contract changes (``make openapi`` does both); ``tests/client`` fails when this file
is stale.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from numpy.typing import ArrayLike, NDArray

from attention_client._results import BoolArray, FloatArray, IntArray
from attention_client._spec import ModelSpec, Option, Output, Tensor

Activation = Literal["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu"]
AttentionInclude = Literal["weights", "scores", "logsumexp"]
CausalAlignment = Literal["lower_right", "upper_left"]
EmptyRows = Literal["error", "zero"]
FeedForwardInclude = Literal["hidden"]
LayerNormKind = Literal["layer", "rms"]
MultiHeadAttentionInclude = Literal["weights", "scores", "heads", "q", "k", "v"]
NormPosition = Literal["pre", "post"]
PositionalEncodingInclude = Literal["tables"]
PositionalEncodingKind = Literal["sinusoidal", "rotary"]
Precision = Literal["float64", "float32"]
SoftmaxInclude = Literal["log_probabilities"]
Style = Literal["half", "interleaved"]
TransformerBlockInclude = Literal["weights", "residual"]
TransformerBlockKind = Literal["layer", "rms"]


ATTENTION_INCLUDE: tuple[AttentionInclude, ...] = ("weights",)


class FeedForwardFields(TypedDict, total=False):
    """The body of /v1/feed-forward without x, include and precision; w_2 must give d_model columns."""

    w_1: Sequence[Sequence[float]]
    """First projection, [d_model, d_ff] (x @ w_1); the gated one for swiglu and geglu."""
    w_2: Sequence[Sequence[float]]
    """Output projection, [d_ff, d_out]."""
    b_1: Sequence[float] | None
    """Bias of w_1, [d_ff]."""
    b_2: Sequence[float] | None
    """Bias of w_2, [d_out]."""
    activation: Activation | None
    """relu, gelu (exact: z·Φ(z)), gelu_tanh (PyTorch's approximate='tanh'), silu: act(x @ w_1 + b_1) @ w_2 +
    b_2. swiglu and geglu (gated, LLaMA's convention): (act(x @ w_1 + b_1) ⊙ (x @ w_3 + b_3)) @ w_2 + b_2 with
    act silu or gelu."""
    w_3: Sequence[Sequence[float]] | None
    """The gated activations' other projection, [d_model, d_ff]: required for swiglu and geglu, refused for
    the others."""
    b_3: Sequence[float] | None
    """Bias of w_3, [d_ff]; gated activations only."""


class MultiHeadFields(TypedDict, total=False):
    """The body of /v1/multi-head-attention without query, key, value, include and precision: self-attention
    over the block's rows, with every option (causal, rotary, …); w_o must give d_model columns."""

    causal: bool | None
    """Hide future keys."""
    causal_alignment: CausalAlignment | None
    """lower_right: the queries are the last n of the m positions (key j is hidden from query i when j > i + m
    - n); upper_left: hidden when j > i (PyTorch's is_causal)."""
    scale: float | None
    """Multiplies QKᵀ; default 1/sqrt(d_k)."""
    window: Sequence[int | None] | None
    """[left, right] (null = unbounded on that side): key j is visible from query i only when i' - left <= j
    <= i' + right, where i' = i + m - n under lower_right alignment and i under upper_left. Combined with mask
    and causal by AND (FlashAttention's window_size)."""
    softcap: float | None
    """Logit soft-capping (Gemma 2): scaled scores become softcap * tanh(scores / softcap), before bias, ALiBi
    and masking."""
    rotary: Rotary | None
    """Rotary position embedding of the query and key rows before the scores (the scores and weights returned
    are the rotated ones)."""
    empty_rows: EmptyRows | None
    """What to do with a query row that sees no key: error (422 naming the row) or zero (all-zero weights and
    output, row listed in empty_rows)."""
    w_q: Sequence[Sequence[float]]
    """Query projection, [d_model, num_heads · d_k] (x @ w_q)."""
    w_k: Sequence[Sequence[float]]
    """Key projection, [d_kv_model, num_kv_heads · d_k]."""
    w_v: Sequence[Sequence[float]]
    """Value projection, [d_kv_model, num_kv_heads · d_v]."""
    w_o: Sequence[Sequence[float]]
    """Output projection of the concatenated heads, [num_heads · d_v, d_out]."""
    b_q: Sequence[float] | None
    """Query projection bias, [num_heads · d_k]."""
    b_k: Sequence[float] | None
    """Key projection bias, [num_kv_heads · d_k]."""
    b_v: Sequence[float] | None
    """Value projection bias, [num_kv_heads · d_v]."""
    b_o: Sequence[float] | None
    """Output projection bias, [d_out]."""
    num_heads: int
    """Query heads H_q."""
    num_kv_heads: int | None
    """Key/value heads H_kv (default num_heads); num_heads must be a multiple. Query head i reads key/value
    head i // (num_heads / num_kv_heads): grouped-query attention; 1 is multi-query attention."""
    mask: (
        Sequence[bool]
        | Sequence[Sequence[bool]]
        | Sequence[Sequence[Sequence[bool]]]
        | Sequence[Sequence[Sequence[Sequence[bool]]]]
        | None
    )
    """true = may attend; broadcastable to the per-head weights [..., H_q, n, m]."""
    bias: (
        Sequence[float]
        | Sequence[Sequence[float]]
        | Sequence[Sequence[Sequence[float]]]
        | Sequence[Sequence[Sequence[Sequence[float]]]]
        | None
    )
    """Added to every head's scaled scores; broadcastable to [..., H_q, n, m]."""
    alibi_slopes: (
        float
        | Sequence[float]
        | Sequence[Sequence[float]]
        | Sequence[Sequence[Sequence[float]]]
        | Sequence[Sequence[Sequence[Sequence[float]]]]
        | None
    )
    """ALiBi: one slope per head, broadcastable to [..., H_q]."""


class NormFields(TypedDict, total=False):
    """Before the feed-forward layer (pre) or after its residual add (post). The body of /v1/layer-norm
    without x (kind, weight, bias, eps); default: LayerNorm with weight 1, bias 0 and eps 1e-5, as PyTorch's
    layers start."""

    kind: LayerNormKind | None
    """layer: (x − mean) / sqrt(var + eps) · weight + bias over the last axis, with the population variance
    (PyTorch's F.layer_norm); rms: x / sqrt(mean(x²) + eps) · weight (nn.RMSNorm)."""
    weight: Sequence[float] | None
    """Scales each feature, [d]; default ones."""
    bias: Sequence[float] | None
    """Shifts each feature, [d]; default zeros; kind layer only (refused for rms)."""
    eps: float | None
    """Added to the variance (or the mean square) under the square root."""


class Rotary(TypedDict, total=False):
    """Rotary position embedding of the query and key rows before the scores (the scores and weights returned
    are the rotated ones)."""

    base: float | None
    """Frequencies base^(-2i/dim)."""
    style: Style | None
    """half: feature i pairs with i + dim/2 (GPT-NeoX, Llama rotate_half; the default); interleaved: 2i pairs
    with 2i + 1 (GPT-J, RoFormer)."""
    dim: int | None
    """How many leading features rotate (even, at most d_k); default d_k."""
    query_offset: int | None
    """Position of query row 0; default m - n (lower_right) or 0 (upper_left). Every query's position is
    within ±2**53, where float64 positions are exact."""
    key_offset: int | None
    """Position of key row 0; default 0. Every key's position is within ±2**53."""


@dataclass(frozen=True, kw_only=True)
class AttentionResult:
    """What attention answers (the outputs of the /v2 model attention)."""

    output: FloatArray
    """Weighted mix of the values, [..., n, d_v]."""
    weights: FloatArray | None = None
    """Attention weights, [..., n, m]; masked = 0; rows sum to 1."""
    scores: FloatArray | None = None
    """Scaled scores plus bias, [..., n, m]; masked entries are null (minus infinity)."""
    logsumexp: FloatArray | None = None
    """Log-sum-exp of the visible scores per query, [..., n]; null for an empty row (minus infinity)."""
    scale: float
    """The scale that was used."""
    empty_rows: IntArray
    """Index lists (into [..., n]) of query rows that saw no key."""


@dataclass(frozen=True, kw_only=True)
class FeedForwardResult:
    """What feed_forward answers (the outputs of the /v2 model feed-forward)."""

    output: FloatArray
    """The layer's output, [..., d_out]."""
    hidden: FloatArray | None = None
    """The hidden activations, [..., d_ff]."""


@dataclass(frozen=True, kw_only=True)
class LayerNormResult:
    """What layer_norm answers (the outputs of the /v2 model layer-norm)."""

    output: FloatArray
    """x normalized, [..., d]."""


@dataclass(frozen=True, kw_only=True)
class LikelihoodResult:
    """What log_likelihood answers (the outputs of the /v2 model log-likelihood)."""

    token_logprobs: FloatArray
    """log P(target) per position, [..., T]; null where not scored."""
    ranks: IntArray
    """1 + the number of logits above the target's, [..., T]; null where not scored."""
    log_likelihood: FloatArray
    """Sum over scored tokens, [...]."""
    num_tokens: IntArray
    """Scored tokens, [...]."""
    mean_nll: FloatArray
    """-log_likelihood / num_tokens."""
    perplexity: FloatArray
    """exp(mean_nll)."""
    is_greedy: BoolArray
    """Every scored target has rank 1."""
    top_logprobs: NDArray[Any] | None = None
    """[..., T, k] lists of {token, logprob}, most probable first; null rows where not scored. Present when
    top_logprobs > 0."""
    top_tokens: NDArray[Any] | None = None


@dataclass(frozen=True, kw_only=True)
class MultiHeadResult:
    """What multi_head_attention answers (the outputs of the /v2 model multi-head-attention)."""

    output: FloatArray
    """The layer's output, [..., n, d_out]."""
    weights: FloatArray | None = None
    """Per-head attention weights, [..., H_q, n, m]."""
    scores: FloatArray | None = None
    """Per-head scores, [..., H_q, n, m]; hidden entries are null."""
    heads: FloatArray | None = None
    """Per-head outputs before w_o, [..., H_q, n, d_v]."""
    q: FloatArray | None = None
    """Projected queries per head, [..., H_q, n, d_k] (after rotary)."""
    k: FloatArray | None = None
    """Projected keys per key/value head, [..., H_kv, m, d_k] (after rotary)."""
    v: FloatArray | None = None
    """Projected values per key/value head, [..., H_kv, m, d_v]."""
    scale: float
    """The scale that was used."""
    empty_rows: IntArray
    """Index lists (into [..., H_q, n]) of query rows that saw no key."""


@dataclass(frozen=True, kw_only=True)
class PositionalEncodingResult:
    """What positional_encoding answers (the outputs of the /v2 model positional-encoding)."""

    encoding: FloatArray | None = None
    """sinusoidal: the table, [n, d_model]."""
    output: FloatArray | None = None
    """rotary: x rotated, [..., n, d]."""
    cos: FloatArray | None = None
    """rotary: cos of the angles, [n, dim / 2]."""
    sin: FloatArray | None = None
    """rotary: sin of the angles, [n, dim / 2]."""


@dataclass(frozen=True, kw_only=True)
class SampleResult:
    """What sample answers (the outputs of the /v2 model sample)."""

    tokens: IntArray
    """Drawn token indices, [..., num_samples]: the logits' batch dims, then the draws."""
    logprobs: FloatArray
    """Natural-log probability of each drawn token under the distribution, [..., num_samples]."""
    seed: int
    """The seed used: send it back to repeat the draw."""


@dataclass(frozen=True, kw_only=True)
class SoftmaxResult:
    """What softmax answers (the outputs of the /v2 model softmax)."""

    probabilities: FloatArray
    """Same shape as the logits; rows sum to 1."""
    log_probabilities: FloatArray | None = None
    """Natural-log probabilities; null where the probability is 0 (minus infinity)."""
    entropy: FloatArray
    """Entropy of each row in nats, [...]."""
    argmax: IntArray
    """Index of the most probable entry of each row (the first on ties), [...]."""
    temperature: float
    """The temperature that was used."""


@dataclass(frozen=True, kw_only=True)
class TransformerBlockResult:
    """What transformer_block answers (the outputs of the /v2 model transformer-block)."""

    output: FloatArray
    """The block's output, [..., n, d_model]."""
    weights: FloatArray | None = None
    """Per-head attention weights, [..., H, n, n]."""
    residual: FloatArray | None = None
    """The residual stream h between the sublayers, [..., n, d_model]."""


ATTENTION = ModelSpec(
    operation_id="attention",
    v1_path="/v1/attention",
    v2_model="attention",
    tensors=(
        Tensor("query", "number", 1, 4, required=True),
        Tensor("key", "number", 2, 4, required=True),
        Tensor("value", "number", 2, 4, required=True),
        Tensor("mask", "boolean", 1, 4, required=False),
        Tensor("bias", "number", 1, 4, required=False),
        Tensor("alibi_slopes", "number", 0, 4, required=False),
    ),
    options=(
        Option("causal", {"type": ["boolean", "null"], "default": False}, v2=("causal",), flatten="none"),
        Option(
            "causal_alignment",
            {
                "default": "lower_right",
                "anyOf": [{"type": "string", "enum": ["lower_right", "upper_left"]}, {"type": "null"}],
            },
            v2=("causal_alignment",),
            flatten="none",
        ),
        Option("scale", {"type": ["number", "null"], "exclusiveMinimum": 0.0}, v2=("scale",), flatten="none"),
        Option(
            "window",
            {
                "type": ["array", "null"],
                "minItems": 2,
                "maxItems": 2,
                "items": {"type": ["integer", "null"], "minimum": 0},
            },
            v2=("window",),
            flatten="none",
        ),
        Option(
            "softcap", {"type": ["number", "null"], "exclusiveMinimum": 0.0}, v2=("softcap",), flatten="none"
        ),
        Option(
            "rotary",
            {
                "anyOf": [
                    {
                        "type": "object",
                        "properties": {
                            "base": {"type": ["number", "null"], "default": 10000.0, "exclusiveMinimum": 0.0},
                            "style": {
                                "anyOf": [
                                    {"type": "string", "enum": ["half", "interleaved"]},
                                    {"type": "null"},
                                ]
                            },
                            "dim": {"type": ["integer", "null"], "minimum": 2},
                            "query_offset": {"type": ["integer", "null"]},
                            "key_offset": {"type": ["integer", "null"]},
                        },
                        "additionalProperties": False,
                    },
                    {"type": "null"},
                ]
            },
            v2=("rotary.base", "rotary.style", "rotary.dim", "rotary.query_offset", "rotary.key_offset"),
            flatten="object",
        ),
        Option(
            "empty_rows",
            {"default": "error", "anyOf": [{"type": "string", "enum": ["error", "zero"]}, {"type": "null"}]},
            v2=("empty_rows",),
            flatten="none",
        ),
        Option(
            "precision",
            {
                "default": "float64",
                "anyOf": [{"type": "string", "enum": ["float64", "float32"]}, {"type": "null"}],
            },
            v2=("precision",),
            flatten="none",
        ),
        Option(
            "enable_gqa", {"type": ["boolean", "null"], "default": False}, v2=("enable_gqa",), flatten="none"
        ),
    ),
    include=("weights", "scores", "logsumexp"),
    include_v2=True,
    outputs=(
        Output("output", "number", required=True),
        Output("weights", "number"),
        Output("scores", "number", null_as=-math.inf),
        Output("logsumexp", "number", null_as=-math.inf),
        Output("scale", "number", required=True, scalar=True),
        Output("empty_rows", "integer", required=True, depth=2),
    ),
    result=AttentionResult,
)


FEED_FORWARD = ModelSpec(
    operation_id="feedForward",
    v1_path="/v1/feed-forward",
    v2_model="feed-forward",
    tensors=(
        Tensor("x", "number", 1, 4, required=True),
        Tensor("w_1", "number", 2, 2, required=True),
        Tensor("w_2", "number", 2, 2, required=True),
        Tensor("b_1", "number", 1, 1, required=False),
        Tensor("b_2", "number", 1, 1, required=False),
        Tensor("w_3", "number", 2, 2, required=False),
        Tensor("b_3", "number", 1, 1, required=False),
    ),
    options=(
        Option(
            "activation",
            {
                "default": "relu",
                "anyOf": [
                    {"type": "string", "enum": ["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu"]},
                    {"type": "null"},
                ],
            },
            v2=("activation",),
            flatten="none",
        ),
        Option(
            "precision",
            {
                "default": "float64",
                "anyOf": [{"type": "string", "enum": ["float64", "float32"]}, {"type": "null"}],
            },
            v2=("precision",),
            flatten="none",
        ),
    ),
    include=("hidden",),
    include_v2=True,
    outputs=(
        Output("output", "number", required=True),
        Output("hidden", "number"),
    ),
    result=FeedForwardResult,
)


LAYER_NORM = ModelSpec(
    operation_id="layerNorm",
    v1_path="/v1/layer-norm",
    v2_model="layer-norm",
    tensors=(
        Tensor("x", "number", 1, 4, required=True),
        Tensor("weight", "number", 1, 1, required=False),
        Tensor("bias", "number", 1, 1, required=False),
    ),
    options=(
        Option(
            "kind",
            {"default": "layer", "anyOf": [{"type": "string", "enum": ["layer", "rms"]}, {"type": "null"}]},
            v2=("kind",),
            flatten="none",
        ),
        Option(
            "eps",
            {"type": ["number", "null"], "default": 1e-05, "exclusiveMinimum": 0.0},
            v2=("eps",),
            flatten="none",
        ),
        Option(
            "precision",
            {
                "default": "float64",
                "anyOf": [{"type": "string", "enum": ["float64", "float32"]}, {"type": "null"}],
            },
            v2=("precision",),
            flatten="none",
        ),
    ),
    include=None,
    outputs=(Output("output", "number", required=True),),
    result=LayerNormResult,
)


LOG_LIKELIHOOD = ModelSpec(
    operation_id="logLikelihood",
    v1_path="/v1/log-likelihood",
    v2_model="log-likelihood",
    tensors=(
        Tensor("logits", "number", 2, 4, required=True),
        Tensor("targets", "integer", 1, 3, required=True),
    ),
    options=(
        Option("shift", {"type": ["boolean", "null"], "default": False}, v2=("shift",), flatten="none"),
        Option(
            "ignore_index",
            {"type": ["integer", "null"], "default": -100},
            v2=("ignore_index",),
            flatten="none",
        ),
        Option(
            "temperature",
            {"type": ["number", "null"], "default": 1.0, "exclusiveMinimum": 0.0},
            v2=("temperature",),
            flatten="none",
        ),
        Option(
            "top_logprobs",
            {"type": ["integer", "null"], "default": 0, "minimum": 0, "maximum": 20},
            v2=("top_logprobs",),
            flatten="none",
        ),
        Option(
            "precision",
            {
                "default": "float64",
                "anyOf": [{"type": "string", "enum": ["float64", "float32"]}, {"type": "null"}],
            },
            v2=("precision",),
            flatten="none",
        ),
    ),
    include=None,
    outputs=(
        Output("token_logprobs", "number", required=True),
        Output("ranks", "integer", required=True),
        Output("log_likelihood", "number", required=True),
        Output("num_tokens", "integer", required=True),
        Output("mean_nll", "number", required=True),
        Output("perplexity", "number", required=True),
        Output("is_greedy", "boolean", required=True),
        Output("top_logprobs", "any"),
        Output("top_tokens", "any"),
    ),
    result=LikelihoodResult,
)


MULTI_HEAD_ATTENTION = ModelSpec(
    operation_id="multiHeadAttention",
    v1_path="/v1/multi-head-attention",
    v2_model="multi-head-attention",
    tensors=(
        Tensor("query", "number", 2, 4, required=True),
        Tensor("key", "number", 2, 4, required=False),
        Tensor("value", "number", 2, 4, required=False),
        Tensor("w_q", "number", 2, 2, required=True),
        Tensor("w_k", "number", 2, 2, required=True),
        Tensor("w_v", "number", 2, 2, required=True),
        Tensor("w_o", "number", 2, 2, required=True),
        Tensor("b_q", "number", 1, 1, required=False),
        Tensor("b_k", "number", 1, 1, required=False),
        Tensor("b_v", "number", 1, 1, required=False),
        Tensor("b_o", "number", 1, 1, required=False),
        Tensor("mask", "boolean", 1, 4, required=False),
        Tensor("bias", "number", 1, 4, required=False),
        Tensor("alibi_slopes", "number", 0, 4, required=False),
    ),
    options=(
        Option("causal", {"type": ["boolean", "null"], "default": False}, v2=("causal",), flatten="none"),
        Option(
            "causal_alignment",
            {
                "default": "lower_right",
                "anyOf": [{"type": "string", "enum": ["lower_right", "upper_left"]}, {"type": "null"}],
            },
            v2=("causal_alignment",),
            flatten="none",
        ),
        Option("scale", {"type": ["number", "null"], "exclusiveMinimum": 0.0}, v2=("scale",), flatten="none"),
        Option(
            "window",
            {
                "type": ["array", "null"],
                "minItems": 2,
                "maxItems": 2,
                "items": {"type": ["integer", "null"], "minimum": 0},
            },
            v2=("window",),
            flatten="none",
        ),
        Option(
            "softcap", {"type": ["number", "null"], "exclusiveMinimum": 0.0}, v2=("softcap",), flatten="none"
        ),
        Option(
            "rotary",
            {
                "anyOf": [
                    {
                        "type": "object",
                        "properties": {
                            "base": {"type": ["number", "null"], "default": 10000.0, "exclusiveMinimum": 0.0},
                            "style": {
                                "anyOf": [
                                    {"type": "string", "enum": ["half", "interleaved"]},
                                    {"type": "null"},
                                ]
                            },
                            "dim": {"type": ["integer", "null"], "minimum": 2},
                            "query_offset": {"type": ["integer", "null"]},
                            "key_offset": {"type": ["integer", "null"]},
                        },
                        "additionalProperties": False,
                    },
                    {"type": "null"},
                ]
            },
            v2=("rotary.base", "rotary.style", "rotary.dim", "rotary.query_offset", "rotary.key_offset"),
            flatten="object",
        ),
        Option(
            "empty_rows",
            {"default": "error", "anyOf": [{"type": "string", "enum": ["error", "zero"]}, {"type": "null"}]},
            v2=("empty_rows",),
            flatten="none",
        ),
        Option(
            "precision",
            {
                "default": "float64",
                "anyOf": [{"type": "string", "enum": ["float64", "float32"]}, {"type": "null"}],
            },
            v2=("precision",),
            flatten="none",
        ),
        Option("num_heads", {"type": "integer", "minimum": 1}, v2=("num_heads",), flatten="none"),
        Option(
            "num_kv_heads", {"type": ["integer", "null"], "minimum": 1}, v2=("num_kv_heads",), flatten="none"
        ),
    ),
    include=("weights", "scores", "heads", "q", "k", "v"),
    include_v2=True,
    outputs=(
        Output("output", "number", required=True),
        Output("weights", "number"),
        Output("scores", "number", null_as=-math.inf),
        Output("heads", "number"),
        Output("q", "number"),
        Output("k", "number"),
        Output("v", "number"),
        Output("scale", "number", required=True, scalar=True),
        Output("empty_rows", "integer", required=True, depth=2),
    ),
    result=MultiHeadResult,
)


POSITIONAL_ENCODING = ModelSpec(
    operation_id="positionalEncoding",
    v1_path="/v1/positional-encoding",
    v2_model="positional-encoding",
    tensors=(
        Tensor("positions", "integer", 1, 1, required=False),
        Tensor("x", "number", 2, 4, required=False),
    ),
    options=(
        Option("kind", {"type": "string", "enum": ["sinusoidal", "rotary"]}, v2=("kind",), flatten="none"),
        Option("length", {"type": ["integer", "null"], "minimum": 1}, v2=("length",), flatten="none"),
        Option("d_model", {"type": ["integer", "null"], "minimum": 2}, v2=("d_model",), flatten="none"),
        Option(
            "base",
            {"type": ["number", "null"], "default": 10000.0, "exclusiveMinimum": 0.0},
            v2=("base",),
            flatten="none",
        ),
        Option(
            "style",
            {"anyOf": [{"type": "string", "enum": ["half", "interleaved"]}, {"type": "null"}]},
            v2=("style",),
            flatten="none",
        ),
        Option("dim", {"type": ["integer", "null"], "minimum": 2}, v2=("dim",), flatten="none"),
        Option(
            "precision",
            {
                "default": "float64",
                "anyOf": [{"type": "string", "enum": ["float64", "float32"]}, {"type": "null"}],
            },
            v2=("precision",),
            flatten="none",
        ),
    ),
    include=("tables",),
    include_v2=True,
    outputs=(
        Output("encoding", "number"),
        Output("output", "number"),
        Output("cos", "number"),
        Output("sin", "number"),
    ),
    result=PositionalEncodingResult,
)


SAMPLE = ModelSpec(
    operation_id="sample",
    v1_path="/v1/sample",
    v2_model="sample",
    tensors=(
        Tensor("logits", "number", 1, 4, required=True),
        Tensor("mask", "boolean", 1, 4, required=False),
    ),
    options=(
        Option(
            "temperature",
            {"type": ["number", "null"], "default": 1.0, "minimum": 0.0},
            v2=("temperature",),
            flatten="none",
        ),
        Option("top_k", {"type": ["integer", "null"], "minimum": 1}, v2=("top_k",), flatten="none"),
        Option(
            "top_p",
            {"type": ["number", "null"], "maximum": 1.0, "exclusiveMinimum": 0.0},
            v2=("top_p",),
            flatten="none",
        ),
        Option(
            "min_p",
            {"type": ["number", "null"], "minimum": 0.0, "maximum": 1.0},
            v2=("min_p",),
            flatten="none",
        ),
        Option(
            "num_samples",
            {"type": ["integer", "null"], "default": 1, "minimum": 1, "maximum": 100000},
            v2=("num_samples",),
            flatten="none",
        ),
        Option(
            "seed",
            {"type": ["integer", "null"], "minimum": 0, "maximum": 9007199254740991},
            v2=("seed",),
            flatten="none",
        ),
    ),
    include=None,
    outputs=(
        Output("tokens", "integer", required=True),
        Output("logprobs", "number", required=True),
        Output("seed", "integer", required=True, scalar=True),
    ),
    result=SampleResult,
)


SOFTMAX = ModelSpec(
    operation_id="softmax",
    v1_path="/v1/softmax",
    v2_model="softmax",
    tensors=(
        Tensor("logits", "number", 1, 4, required=True),
        Tensor("mask", "boolean", 1, 4, required=False),
    ),
    options=(
        Option(
            "temperature",
            {"type": ["number", "null"], "default": 1.0, "minimum": 0.0},
            v2=("temperature",),
            flatten="none",
        ),
        Option("top_k", {"type": ["integer", "null"], "minimum": 1}, v2=("top_k",), flatten="none"),
        Option(
            "top_p",
            {"type": ["number", "null"], "maximum": 1.0, "exclusiveMinimum": 0.0},
            v2=("top_p",),
            flatten="none",
        ),
        Option(
            "min_p",
            {"type": ["number", "null"], "minimum": 0.0, "maximum": 1.0},
            v2=("min_p",),
            flatten="none",
        ),
        Option(
            "precision",
            {
                "default": "float64",
                "anyOf": [{"type": "string", "enum": ["float64", "float32"]}, {"type": "null"}],
            },
            v2=("precision",),
            flatten="none",
        ),
    ),
    include=("log_probabilities",),
    include_v2=True,
    outputs=(
        Output("probabilities", "number", required=True),
        Output("log_probabilities", "number", null_as=-math.inf),
        Output("entropy", "number", required=True),
        Output("argmax", "integer", required=True),
        Output("temperature", "number", required=True, scalar=True),
    ),
    result=SoftmaxResult,
)


TRANSFORMER_BLOCK = ModelSpec(
    operation_id="transformerBlock",
    v1_path="/v1/transformer-block",
    v2_model="transformer-block",
    tensors=(Tensor("x", "number", 2, 4, required=True),),
    options=(
        Option(
            "attention",
            {
                "type": "object",
                "properties": {
                    "causal": {"type": ["boolean", "null"], "default": False},
                    "causal_alignment": {
                        "default": "lower_right",
                        "anyOf": [
                            {"type": "string", "enum": ["lower_right", "upper_left"]},
                            {"type": "null"},
                        ],
                    },
                    "scale": {"type": ["number", "null"], "exclusiveMinimum": 0.0},
                    "window": {
                        "type": ["array", "null"],
                        "minItems": 2,
                        "maxItems": 2,
                        "items": {"type": ["integer", "null"], "minimum": 0},
                    },
                    "softcap": {"type": ["number", "null"], "exclusiveMinimum": 0.0},
                    "rotary": {
                        "anyOf": [
                            {
                                "type": "object",
                                "properties": {
                                    "base": {
                                        "type": ["number", "null"],
                                        "default": 10000.0,
                                        "exclusiveMinimum": 0.0,
                                    },
                                    "style": {
                                        "anyOf": [
                                            {"type": "string", "enum": ["half", "interleaved"]},
                                            {"type": "null"},
                                        ]
                                    },
                                    "dim": {"type": ["integer", "null"], "minimum": 2},
                                    "query_offset": {"type": ["integer", "null"]},
                                    "key_offset": {"type": ["integer", "null"]},
                                },
                                "additionalProperties": False,
                            },
                            {"type": "null"},
                        ]
                    },
                    "empty_rows": {
                        "default": "error",
                        "anyOf": [{"type": "string", "enum": ["error", "zero"]}, {"type": "null"}],
                    },
                    "w_q": {
                        "type": "array",
                        "items": {"type": "array", "items": {"type": "number"}, "minItems": 1},
                        "minItems": 1,
                    },
                    "w_k": {
                        "type": "array",
                        "items": {"type": "array", "items": {"type": "number"}, "minItems": 1},
                        "minItems": 1,
                    },
                    "w_v": {
                        "type": "array",
                        "items": {"type": "array", "items": {"type": "number"}, "minItems": 1},
                        "minItems": 1,
                    },
                    "w_o": {
                        "type": "array",
                        "items": {"type": "array", "items": {"type": "number"}, "minItems": 1},
                        "minItems": 1,
                    },
                    "b_q": {
                        "anyOf": [
                            {"type": "array", "items": {"type": "number"}, "minItems": 1},
                            {"type": "null"},
                        ]
                    },
                    "b_k": {
                        "anyOf": [
                            {"type": "array", "items": {"type": "number"}, "minItems": 1},
                            {"type": "null"},
                        ]
                    },
                    "b_v": {
                        "anyOf": [
                            {"type": "array", "items": {"type": "number"}, "minItems": 1},
                            {"type": "null"},
                        ]
                    },
                    "b_o": {
                        "anyOf": [
                            {"type": "array", "items": {"type": "number"}, "minItems": 1},
                            {"type": "null"},
                        ]
                    },
                    "num_heads": {"type": "integer", "minimum": 1},
                    "num_kv_heads": {"type": ["integer", "null"], "minimum": 1},
                    "mask": {
                        "anyOf": [
                            {
                                "anyOf": [
                                    {"type": "array", "items": {"type": "boolean"}, "minItems": 1},
                                    {
                                        "type": "array",
                                        "items": {
                                            "type": "array",
                                            "items": {"type": "boolean"},
                                            "minItems": 1,
                                        },
                                        "minItems": 1,
                                    },
                                    {
                                        "type": "array",
                                        "items": {
                                            "type": "array",
                                            "items": {
                                                "type": "array",
                                                "items": {"type": "boolean"},
                                                "minItems": 1,
                                            },
                                            "minItems": 1,
                                        },
                                        "minItems": 1,
                                    },
                                    {
                                        "type": "array",
                                        "items": {
                                            "type": "array",
                                            "items": {
                                                "type": "array",
                                                "items": {
                                                    "type": "array",
                                                    "items": {"type": "boolean"},
                                                    "minItems": 1,
                                                },
                                                "minItems": 1,
                                            },
                                            "minItems": 1,
                                        },
                                        "minItems": 1,
                                    },
                                ]
                            },
                            {"type": "null"},
                        ]
                    },
                    "bias": {
                        "anyOf": [
                            {
                                "anyOf": [
                                    {"type": "array", "items": {"type": "number"}, "minItems": 1},
                                    {
                                        "type": "array",
                                        "items": {
                                            "type": "array",
                                            "items": {"type": "number"},
                                            "minItems": 1,
                                        },
                                        "minItems": 1,
                                    },
                                    {
                                        "type": "array",
                                        "items": {
                                            "type": "array",
                                            "items": {
                                                "type": "array",
                                                "items": {"type": "number"},
                                                "minItems": 1,
                                            },
                                            "minItems": 1,
                                        },
                                        "minItems": 1,
                                    },
                                    {
                                        "type": "array",
                                        "items": {
                                            "type": "array",
                                            "items": {
                                                "type": "array",
                                                "items": {
                                                    "type": "array",
                                                    "items": {"type": "number"},
                                                    "minItems": 1,
                                                },
                                                "minItems": 1,
                                            },
                                            "minItems": 1,
                                        },
                                        "minItems": 1,
                                    },
                                ]
                            },
                            {"type": "null"},
                        ]
                    },
                    "alibi_slopes": {
                        "anyOf": [
                            {
                                "anyOf": [
                                    {"type": "number"},
                                    {"type": "array", "items": {"type": "number"}, "minItems": 1},
                                    {
                                        "type": "array",
                                        "items": {
                                            "type": "array",
                                            "items": {"type": "number"},
                                            "minItems": 1,
                                        },
                                        "minItems": 1,
                                    },
                                    {
                                        "type": "array",
                                        "items": {
                                            "type": "array",
                                            "items": {
                                                "type": "array",
                                                "items": {"type": "number"},
                                                "minItems": 1,
                                            },
                                            "minItems": 1,
                                        },
                                        "minItems": 1,
                                    },
                                    {
                                        "type": "array",
                                        "items": {
                                            "type": "array",
                                            "items": {
                                                "type": "array",
                                                "items": {
                                                    "type": "array",
                                                    "items": {"type": "number"},
                                                    "minItems": 1,
                                                },
                                                "minItems": 1,
                                            },
                                            "minItems": 1,
                                        },
                                        "minItems": 1,
                                    },
                                ]
                            },
                            {"type": "null"},
                        ]
                    },
                },
                "required": ["num_heads", "w_k", "w_o", "w_q", "w_v"],
                "additionalProperties": False,
            },
            v2=(
                "attention.causal",
                "attention.causal_alignment",
                "attention.scale",
                "attention.window",
                "attention.softcap",
                "attention.rotary.base",
                "attention.rotary.style",
                "attention.rotary.dim",
                "attention.rotary.query_offset",
                "attention.rotary.key_offset",
                "attention.empty_rows",
                "attention.num_heads",
                "attention.num_kv_heads",
            ),
            flatten="object",
            tensors=(
                Tensor("attention.w_q", "number", 2, 2, required=False),
                Tensor("attention.w_k", "number", 2, 2, required=False),
                Tensor("attention.w_v", "number", 2, 2, required=False),
                Tensor("attention.w_o", "number", 2, 2, required=False),
                Tensor("attention.b_q", "number", 1, 1, required=False),
                Tensor("attention.b_k", "number", 1, 1, required=False),
                Tensor("attention.b_v", "number", 1, 1, required=False),
                Tensor("attention.b_o", "number", 1, 1, required=False),
                Tensor("attention.mask", "boolean", 1, 4, required=False),
                Tensor("attention.bias", "number", 1, 4, required=False),
                Tensor("attention.alibi_slopes", "number", 0, 4, required=False),
            ),
        ),
        Option(
            "feed_forward",
            {
                "type": "object",
                "properties": {
                    "w_1": {
                        "type": "array",
                        "items": {"type": "array", "items": {"type": "number"}, "minItems": 1},
                        "minItems": 1,
                    },
                    "w_2": {
                        "type": "array",
                        "items": {"type": "array", "items": {"type": "number"}, "minItems": 1},
                        "minItems": 1,
                    },
                    "b_1": {
                        "anyOf": [
                            {"type": "array", "items": {"type": "number"}, "minItems": 1},
                            {"type": "null"},
                        ]
                    },
                    "b_2": {
                        "anyOf": [
                            {"type": "array", "items": {"type": "number"}, "minItems": 1},
                            {"type": "null"},
                        ]
                    },
                    "activation": {
                        "default": "relu",
                        "anyOf": [
                            {
                                "type": "string",
                                "enum": ["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu"],
                            },
                            {"type": "null"},
                        ],
                    },
                    "w_3": {
                        "anyOf": [
                            {
                                "type": "array",
                                "items": {"type": "array", "items": {"type": "number"}, "minItems": 1},
                                "minItems": 1,
                            },
                            {"type": "null"},
                        ]
                    },
                    "b_3": {
                        "anyOf": [
                            {"type": "array", "items": {"type": "number"}, "minItems": 1},
                            {"type": "null"},
                        ]
                    },
                },
                "required": ["w_1", "w_2"],
                "additionalProperties": False,
            },
            v2=("feed_forward.activation",),
            flatten="object",
            tensors=(
                Tensor("feed_forward.w_1", "number", 2, 2, required=False),
                Tensor("feed_forward.w_2", "number", 2, 2, required=False),
                Tensor("feed_forward.b_1", "number", 1, 1, required=False),
                Tensor("feed_forward.b_2", "number", 1, 1, required=False),
                Tensor("feed_forward.w_3", "number", 2, 2, required=False),
                Tensor("feed_forward.b_3", "number", 1, 1, required=False),
            ),
        ),
        Option(
            "norm_1",
            {
                "anyOf": [
                    {
                        "type": "object",
                        "properties": {
                            "kind": {
                                "default": "layer",
                                "anyOf": [{"type": "string", "enum": ["layer", "rms"]}, {"type": "null"}],
                            },
                            "weight": {
                                "anyOf": [
                                    {"type": "array", "items": {"type": "number"}, "minItems": 1},
                                    {"type": "null"},
                                ]
                            },
                            "bias": {
                                "anyOf": [
                                    {"type": "array", "items": {"type": "number"}, "minItems": 1},
                                    {"type": "null"},
                                ]
                            },
                            "eps": {"type": ["number", "null"], "default": 1e-05, "exclusiveMinimum": 0.0},
                        },
                        "additionalProperties": False,
                    },
                    {"type": "null"},
                ]
            },
            v2=("norm_1.kind", "norm_1.eps"),
            flatten="object",
            tensors=(
                Tensor("norm_1.weight", "number", 1, 1, required=False),
                Tensor("norm_1.bias", "number", 1, 1, required=False),
            ),
        ),
        Option(
            "norm_2",
            {
                "anyOf": [
                    {
                        "type": "object",
                        "properties": {
                            "kind": {
                                "default": "layer",
                                "anyOf": [{"type": "string", "enum": ["layer", "rms"]}, {"type": "null"}],
                            },
                            "weight": {
                                "anyOf": [
                                    {"type": "array", "items": {"type": "number"}, "minItems": 1},
                                    {"type": "null"},
                                ]
                            },
                            "bias": {
                                "anyOf": [
                                    {"type": "array", "items": {"type": "number"}, "minItems": 1},
                                    {"type": "null"},
                                ]
                            },
                            "eps": {"type": ["number", "null"], "default": 1e-05, "exclusiveMinimum": 0.0},
                        },
                        "additionalProperties": False,
                    },
                    {"type": "null"},
                ]
            },
            v2=("norm_2.kind", "norm_2.eps"),
            flatten="object",
            tensors=(
                Tensor("norm_2.weight", "number", 1, 1, required=False),
                Tensor("norm_2.bias", "number", 1, 1, required=False),
            ),
        ),
        Option(
            "norm_position",
            {"default": "pre", "anyOf": [{"type": "string", "enum": ["pre", "post"]}, {"type": "null"}]},
            v2=("norm_position",),
            flatten="none",
        ),
        Option(
            "precision",
            {
                "default": "float64",
                "anyOf": [{"type": "string", "enum": ["float64", "float32"]}, {"type": "null"}],
            },
            v2=("precision",),
            flatten="none",
        ),
    ),
    include=("weights", "residual"),
    include_v2=True,
    outputs=(
        Output("output", "number", required=True),
        Output("weights", "number"),
        Output("residual", "number"),
    ),
    result=TransformerBlockResult,
)


class SyncModels:
    """One method per model of the contract (calls); the transport: ``_call``."""

    def _call(self, spec: ModelSpec[Any], arguments: dict[str, Any]) -> Any:
        raise NotImplementedError

    def attention(
        self,
        query: ArrayLike,
        key: ArrayLike,
        value: ArrayLike,
        *,
        causal: bool = False,
        causal_alignment: CausalAlignment = "lower_right",
        scale: float | None = None,
        window: Sequence[int | None] | None = None,
        softcap: float | None = None,
        rotary: Rotary | None = None,
        empty_rows: EmptyRows = "error",
        precision: Precision | None = None,
        mask: ArrayLike | None = None,
        bias: ArrayLike | None = None,
        enable_gqa: bool = False,
        alibi_slopes: ArrayLike | None = None,
        include: Collection[AttentionInclude] = ATTENTION_INCLUDE,
    ) -> AttentionResult:
        """Scaled dot-product attention with optional mask, causal mask and bias.

        scores = Q Kᵀ · scale + bias, hidden scores set to minus infinity, a row-wise softmax gives the
        weights, and the output mixes the values with them.

        Sent to /v2/models/attention/infer as binary tensors.

        Args:
            query: Queries, shape [..., n, d_k]; a 1-D [d_k] is a single query.
            key: Keys, [..., m, d_k].
            value: Values, [..., m, d_v].
            causal: Hide future keys.
            causal_alignment: lower_right: the queries are the last n of the m positions (key j is hidden from
                query i when j > i + m - n); upper_left: hidden when j > i (PyTorch's is_causal).
            scale: Multiplies QKᵀ; default 1/sqrt(d_k).
            window: [left, right] (null = unbounded on that side): key j is visible from query i only when i'
                - left <= j <= i' + right, where i' = i + m - n under lower_right alignment and i under
                upper_left. Combined with mask and causal by AND (FlashAttention's window_size).
            softcap: Logit soft-capping (Gemma 2): scaled scores become softcap * tanh(scores / softcap),
                before bias, ALiBi and masking.
            rotary: Rotary position embedding of the query and key rows before the scores (the scores and
                weights returned are the rotated ones).
            empty_rows: What to do with a query row that sees no key: error (422 naming the row) or zero
                (all-zero weights and output, row listed in empty_rows).
            precision: Floating-point type used for the arithmetic and the numbers in the response. float32
                roughly halves the response size at about 1e-6 relative accuracy. None: float32 when every
                float input is float32, else float64.
            mask: true = this query may attend to this key; broadcastable to [..., n, m] (a 1-D [m] mask is
                per-key visibility). Combined with causal by AND.
            bias: Added to the scaled scores before softmax; broadcastable to [..., n, m].
            enable_gqa: Grouped-query attention (PyTorch's enable_gqa): the query has H_q heads at dim -3, key
                and value H_kv, with H_q a multiple of H_kv; query head i reads key/value head i // (H_q /
                H_kv). H_kv = 1 is multi-query attention.
            alibi_slopes: ALiBi: one slope per head, broadcastable to the leading dimensions [..., H]; adds
                -slope * |i' - j| to the scores, after bias.
            include: Extra arrays to return (default ["weights"]).

        Returns a :class:`AttentionResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: AttentionResult = self._call(
            ATTENTION,
            {
                "causal": causal,
                "causal_alignment": causal_alignment,
                "scale": scale,
                "window": window,
                "softcap": softcap,
                "rotary": rotary,
                "empty_rows": empty_rows,
                "precision": precision,
                "query": query,
                "key": key,
                "value": value,
                "mask": mask,
                "bias": bias,
                "enable_gqa": enable_gqa,
                "alibi_slopes": alibi_slopes,
                "include": include,
            },
        )
        return result

    def feed_forward(
        self,
        x: ArrayLike,
        w_1: ArrayLike,
        w_2: ArrayLike,
        *,
        b_1: ArrayLike | None = None,
        b_2: ArrayLike | None = None,
        activation: Activation = "relu",
        w_3: ArrayLike | None = None,
        b_3: ArrayLike | None = None,
        include: Collection[FeedForwardInclude] = (),
        precision: Precision | None = None,
    ) -> FeedForwardResult:
        """A feed-forward layer, plain (relu, gelu, gelu_tanh, silu) or gated (swiglu, geglu).

        In the x @ W convention: act(x @ w_1 + b_1) @ w_2 + b_2, or for the gated activations (act(x @ w_1 +
        b_1) ⊙ (x @ w_3 + b_3)) @ w_2 + b_2 (LLaMA's MLP: w_1 is gate_proj, w_3 up_proj, w_2 down_proj).

        Sent to /v2/models/feed-forward/infer as binary tensors.

        Args:
            x: The rows, [..., d_model].
            w_1: First projection, [d_model, d_ff] (x @ w_1); the gated one for swiglu and geglu.
            w_2: Output projection, [d_ff, d_out].
            b_1: Bias of w_1, [d_ff].
            b_2: Bias of w_2, [d_out].
            activation: relu, gelu (exact: z·Φ(z)), gelu_tanh (PyTorch's approximate='tanh'), silu: act(x @
                w_1 + b_1) @ w_2 + b_2. swiglu and geglu (gated, LLaMA's convention): (act(x @ w_1 + b_1) ⊙ (x
                @ w_3 + b_3)) @ w_2 + b_2 with act silu or gelu.
            w_3: The gated activations' other projection, [d_model, d_ff]: required for swiglu and geglu,
                refused for the others.
            b_3: Bias of w_3, [d_ff]; gated activations only.
            include: ["hidden"] adds the hidden activations [..., d_ff] (what w_2 maps).
            precision: Floating-point type used for the arithmetic and the numbers in the response. float32
                roughly halves the response size at about 1e-6 relative accuracy. None: float32 when every
                float input is float32, else float64.

        Returns a :class:`FeedForwardResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: FeedForwardResult = self._call(
            FEED_FORWARD,
            {
                "x": x,
                "w_1": w_1,
                "w_2": w_2,
                "b_1": b_1,
                "b_2": b_2,
                "activation": activation,
                "w_3": w_3,
                "b_3": b_3,
                "include": include,
                "precision": precision,
            },
        )
        return result

    def layer_norm(
        self,
        x: ArrayLike,
        *,
        kind: LayerNormKind = "layer",
        weight: ArrayLike | None = None,
        bias: ArrayLike | None = None,
        eps: float = 1e-05,
        precision: Precision | None = None,
    ) -> LayerNormResult:
        """LayerNorm or RMSNorm over the last axis, with an optional weight and bias per feature.

        kind layer: (x − mean) / sqrt(var + eps) · weight + bias, the population variance, as
        torch.nn.functional.layer_norm; a constant row's output is the bias. kind rms: x / sqrt(mean(x²) +
        eps) · weight, as torch.nn.RMSNorm. The statistics are computed in float64 whatever the precision.

        Sent to /v2/models/layer-norm/infer as binary tensors.

        Args:
            x: The rows to normalize, [..., d].
            kind: layer: (x − mean) / sqrt(var + eps) · weight + bias over the last axis, with the population
                variance (PyTorch's F.layer_norm); rms: x / sqrt(mean(x²) + eps) · weight (nn.RMSNorm).
            weight: Scales each feature, [d]; default ones.
            bias: Shifts each feature, [d]; default zeros; kind layer only (refused for rms).
            eps: Added to the variance (or the mean square) under the square root.
            precision: Floating-point type used for the arithmetic and the numbers in the response. float32
                roughly halves the response size at about 1e-6 relative accuracy. None: float32 when every
                float input is float32, else float64.

        Returns a :class:`LayerNormResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: LayerNormResult = self._call(
            LAYER_NORM,
            {
                "x": x,
                "kind": kind,
                "weight": weight,
                "bias": bias,
                "eps": eps,
                "precision": precision,
            },
        )
        return result

    def log_likelihood(
        self,
        logits: ArrayLike,
        targets: ArrayLike,
        *,
        shift: bool = False,
        ignore_index: int = -100,
        temperature: float = 1.0,
        top_logprobs: int = 0,
        precision: Precision | None = None,
    ) -> LikelihoodResult:
        """Per-token log-probabilities and ranks, and per-sequence log-likelihood, NLL and perplexity.

        Sent to /v2/models/log-likelihood/infer as binary tensors.

        Args:
            logits: Next-token logits per position.
            targets: Token ids in [0, V), or ignore_index for padding.
            shift: Causal training shift: the logits row at position i scores targets[i+1].
            ignore_index: Target id that marks padding.
            temperature: Divides the logits before scoring.
            top_logprobs: How many of the most probable tokens to list per scored position.
            precision: Floating-point type used for the arithmetic and the numbers in the response. float32
                roughly halves the response size at about 1e-6 relative accuracy. None: float32 when every
                float input is float32, else float64.

        Returns a :class:`LikelihoodResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: LikelihoodResult = self._call(
            LOG_LIKELIHOOD,
            {
                "logits": logits,
                "targets": targets,
                "shift": shift,
                "ignore_index": ignore_index,
                "temperature": temperature,
                "top_logprobs": top_logprobs,
                "precision": precision,
            },
        )
        return result

    def multi_head_attention(
        self,
        query: ArrayLike,
        w_q: ArrayLike,
        w_k: ArrayLike,
        w_v: ArrayLike,
        w_o: ArrayLike,
        *,
        num_heads: int,
        causal: bool = False,
        causal_alignment: CausalAlignment = "lower_right",
        scale: float | None = None,
        window: Sequence[int | None] | None = None,
        softcap: float | None = None,
        rotary: Rotary | None = None,
        empty_rows: EmptyRows = "error",
        precision: Precision | None = None,
        key: ArrayLike | None = None,
        value: ArrayLike | None = None,
        b_q: ArrayLike | None = None,
        b_k: ArrayLike | None = None,
        b_v: ArrayLike | None = None,
        b_o: ArrayLike | None = None,
        num_kv_heads: int | None = None,
        mask: ArrayLike | None = None,
        bias: ArrayLike | None = None,
        alibi_slopes: ArrayLike | None = None,
        include: Collection[MultiHeadAttentionInclude] = (),
    ) -> MultiHeadResult:
        """A multi-head attention layer: projections, attention per head, concatenation, output projection.

        Q = query @ w_q + b_q (and K, V likewise) split into heads; each head is /v1/attention with every
        option given; the heads' outputs are concatenated and projected by w_o. num_kv_heads < num_heads
        shares key/value heads (grouped-query attention).

        Sent to /v2/models/multi-head-attention/infer as binary tensors.

        Args:
            query: Inputs of the queries, [..., n, d_model].
            w_q: Query projection, [d_model, num_heads · d_k] (x @ w_q).
            w_k: Key projection, [d_kv_model, num_kv_heads · d_k].
            w_v: Value projection, [d_kv_model, num_kv_heads · d_v].
            w_o: Output projection of the concatenated heads, [num_heads · d_v, d_out].
            num_heads: Query heads H_q.
            causal: Hide future keys.
            causal_alignment: lower_right: the queries are the last n of the m positions (key j is hidden from
                query i when j > i + m - n); upper_left: hidden when j > i (PyTorch's is_causal).
            scale: Multiplies QKᵀ; default 1/sqrt(d_k).
            window: [left, right] (null = unbounded on that side): key j is visible from query i only when i'
                - left <= j <= i' + right, where i' = i + m - n under lower_right alignment and i under
                upper_left. Combined with mask and causal by AND (FlashAttention's window_size).
            softcap: Logit soft-capping (Gemma 2): scaled scores become softcap * tanh(scores / softcap),
                before bias, ALiBi and masking.
            rotary: Rotary position embedding of the query and key rows before the scores (the scores and
                weights returned are the rotated ones).
            empty_rows: What to do with a query row that sees no key: error (422 naming the row) or zero
                (all-zero weights and output, row listed in empty_rows).
            precision: Floating-point type used for the arithmetic and the numbers in the response. float32
                roughly halves the response size at about 1e-6 relative accuracy. None: float32 when every
                float input is float32, else float64.
            key: Inputs of the keys, [..., m, d_kv_model]; default: the query (self-attention).
            value: Inputs of the values, [..., m, d_kv_model]; default: the key.
            b_q: Query projection bias, [num_heads · d_k].
            b_k: Key projection bias, [num_kv_heads · d_k].
            b_v: Value projection bias, [num_kv_heads · d_v].
            b_o: Output projection bias, [d_out].
            num_kv_heads: Key/value heads H_kv (default num_heads); num_heads must be a multiple. Query head i
                reads key/value head i // (num_heads / num_kv_heads): grouped-query attention; 1 is
                multi-query attention.
            mask: true = may attend; broadcastable to the per-head weights [..., H_q, n, m].
            bias: Added to every head's scaled scores; broadcastable to [..., H_q, n, m].
            alibi_slopes: ALiBi: one slope per head, broadcastable to [..., H_q].
            include: The steps to return beside the output: per-head weights and scores [..., H_q, n, m],
                heads (per-head outputs before w_o) [..., H_q, n, d_v], and the projections q [..., H_q, n,
                d_k], k [..., H_kv, m, d_k], v [..., H_kv, m, d_v] as the scores used them (after rotary).

        Returns a :class:`MultiHeadResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: MultiHeadResult = self._call(
            MULTI_HEAD_ATTENTION,
            {
                "causal": causal,
                "causal_alignment": causal_alignment,
                "scale": scale,
                "window": window,
                "softcap": softcap,
                "rotary": rotary,
                "empty_rows": empty_rows,
                "precision": precision,
                "query": query,
                "key": key,
                "value": value,
                "w_q": w_q,
                "w_k": w_k,
                "w_v": w_v,
                "w_o": w_o,
                "b_q": b_q,
                "b_k": b_k,
                "b_v": b_v,
                "b_o": b_o,
                "num_heads": num_heads,
                "num_kv_heads": num_kv_heads,
                "mask": mask,
                "bias": bias,
                "alibi_slopes": alibi_slopes,
                "include": include,
            },
        )
        return result

    def positional_encoding(
        self,
        *,
        kind: PositionalEncodingKind,
        positions: ArrayLike | None = None,
        length: int | None = None,
        d_model: int | None = None,
        x: ArrayLike | None = None,
        base: float = 10000.0,
        style: Style | None = None,
        dim: int | None = None,
        include: Collection[PositionalEncodingInclude] = (),
        precision: Precision | None = None,
    ) -> PositionalEncodingResult:
        """The sinusoidal table for some positions, or rotary embedding applied to rows at their positions.

        Sent to /v2/models/positional-encoding/infer as binary tensors.

        Args:
            kind: sinusoidal: the table of Attention Is All You Need §3.5, PE(pos, 2i) = sin(pos /
                base^(2i/d_model)), PE(pos, 2i+1) = cos(...); rotary: RoPE applied to x.
            positions: Integer positions, [n]; default 0 … n − 1 (rotary) or 0 … length − 1.
            length: sinusoidal: the positions 0 … length − 1 (instead of positions).
            d_model: sinusoidal: the table's width (even).
            x: rotary: the rows to rotate, [..., n, d].
            base: Frequencies base^(-2i/d).
            style: rotary: half pairs feature i with i + dim/2 (GPT-NeoX, Llama; the default); interleaved
                pairs 2i with 2i + 1 (GPT-J, RoFormer).
            dim: rotary: how many leading features rotate (even, at most d); default d.
            include: rotary: ["tables"] adds the cos and sin tables.
            precision: Floating-point type used for the arithmetic and the numbers in the response. float32
                roughly halves the response size at about 1e-6 relative accuracy. None: float32 when every
                float input is float32, else float64.

        Returns a :class:`PositionalEncodingResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: PositionalEncodingResult = self._call(
            POSITIONAL_ENCODING,
            {
                "kind": kind,
                "positions": positions,
                "length": length,
                "d_model": d_model,
                "x": x,
                "base": base,
                "style": style,
                "dim": dim,
                "include": include,
                "precision": precision,
            },
        )
        return result

    def sample(
        self,
        logits: ArrayLike,
        *,
        temperature: float = 1.0,
        mask: ArrayLike | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        num_samples: int = 1,
        seed: int | None = None,
    ) -> SampleResult:
        """Tokens drawn from each row of the logits, reproducibly from a seed.

        From the distribution /v1/softmax shows: temperature, top_k, top_p, min_p, each on what is left.

        Sent to /v2/models/sample/infer as binary tensors.

        Args:
            logits: Logits; each row over the last axis is a distribution to draw from.
            temperature: Divides the logits; 0 is greedy: the argmax, the lowest index on ties.
            mask: false = excluded (probability 0); broadcastable to the logits' shape.
            top_k: Keep every entry whose logit is at least the k-th largest.
            top_p: Keep the smallest set of most probable entries whose probability sums to at least p (never
                fewer than one), after temperature and top_k.
            min_p: Keep the entries whose probability is at least min_p times the largest one, after
                temperature, top_k and top_p (as Hugging Face's MinPLogitsWarper and vLLM).
            num_samples: Independent draws per row, with replacement.
            seed: Seeds NumPy's PCG64; the same request and seed give the same tokens on every machine.
                Absent: a fresh seed, returned in the answer. At most 2^53 - 1, so that JavaScript holds it
                exactly.

        Returns a :class:`SampleResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: SampleResult = self._call(
            SAMPLE,
            {
                "logits": logits,
                "temperature": temperature,
                "mask": mask,
                "top_k": top_k,
                "top_p": top_p,
                "min_p": min_p,
                "num_samples": num_samples,
                "seed": seed,
            },
        )
        return result

    def softmax(
        self,
        logits: ArrayLike,
        *,
        temperature: float = 1.0,
        mask: ArrayLike | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        include: Collection[SoftmaxInclude] = (),
        precision: Precision | None = None,
    ) -> SoftmaxResult:
        """Probabilities over the last axis of the logits, after mask, temperature, top-k, top-p and min-p.

        Sent to /v2/models/softmax/infer as binary tensors.

        Args:
            logits: Logits; softmax over the last axis.
            temperature: Divides the logits; 0 is the greedy limit (ties share the probability).
            mask: false = excluded (probability 0); broadcastable to the logits' shape.
            top_k: Keep every entry whose logit is at least the k-th largest.
            top_p: Keep the smallest set of most probable entries whose probability sums to at least p (never
                fewer than one), after temperature and top_k.
            min_p: Keep the entries whose probability is at least min_p times the largest one, after
                temperature, top_k and top_p (as Hugging Face's MinPLogitsWarper and vLLM).
            include: Extra arrays to return.
            precision: Floating-point type used for the arithmetic and the numbers in the response. float32
                roughly halves the response size at about 1e-6 relative accuracy. None: float32 when every
                float input is float32, else float64.

        Returns a :class:`SoftmaxResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: SoftmaxResult = self._call(
            SOFTMAX,
            {
                "logits": logits,
                "temperature": temperature,
                "mask": mask,
                "top_k": top_k,
                "top_p": top_p,
                "min_p": min_p,
                "include": include,
                "precision": precision,
            },
        )
        return result

    def transformer_block(
        self,
        x: ArrayLike,
        *,
        attention: MultiHeadFields,
        feed_forward: FeedForwardFields,
        norm_1: NormFields | None = None,
        norm_2: NormFields | None = None,
        norm_position: NormPosition = "pre",
        include: Collection[TransformerBlockInclude] = (),
        precision: Precision | None = None,
    ) -> TransformerBlockResult:
        """One Transformer block over a sequence (self-attention), pre-norm or post-norm.

        pre: h = x + MHA(norm_1(x)), y = h + FFN(norm_2(h)); post: h = norm_1(x + MHA(x)), y = norm_2(h +
        FFN(h)). attention, feed_forward, norm_1 and norm_2 are the bodies of /v1/multi-head-attention,
        /v1/feed-forward and /v1/layer-norm without their inputs; an error inside one names its path
        (feed_forward.w_3). The work limits count the whole block.

        Sent to /v2/models/transformer-block/infer as binary tensors.

        Args:
            x: The tokens' vectors, [..., n, d_model]: the residual stream's input.
            attention: The body of /v1/multi-head-attention without query, key, value, include and precision:
                self-attention over the block's rows, with every option (causal, rotary, …); w_o must give
                d_model columns.
            feed_forward: The body of /v1/feed-forward without x, include and precision; w_2 must give d_model
                columns.
            norm_1: Before attention (pre) or after its residual add (post). The body of /v1/layer-norm
                without x (kind, weight, bias, eps); default: LayerNorm with weight 1, bias 0 and eps 1e-5, as
                PyTorch's layers start.
            norm_2: Before the feed-forward layer (pre) or after its residual add (post). The body of
                /v1/layer-norm without x (kind, weight, bias, eps); default: LayerNorm with weight 1, bias 0
                and eps 1e-5, as PyTorch's layers start.
            norm_position: pre (GPT-2, LLaMA): h = x + MHA(norm_1(x)), y = h + FFN(norm_2(h)); post (Attention
                Is All You Need §3.1): h = norm_1(x + MHA(x)), y = norm_2(h + FFN(h)).
            include: weights: the per-head attention weights [..., H, n, n]; residual: the residual stream h
                between the two sublayers [..., n, d_model].
            precision: Floating-point type used for the arithmetic and the numbers in the response. float32
                roughly halves the response size at about 1e-6 relative accuracy. None: float32 when every
                float input is float32, else float64.

        Returns a :class:`TransformerBlockResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: TransformerBlockResult = self._call(
            TRANSFORMER_BLOCK,
            {
                "x": x,
                "attention": attention,
                "feed_forward": feed_forward,
                "norm_1": norm_1,
                "norm_2": norm_2,
                "norm_position": norm_position,
                "include": include,
                "precision": precision,
            },
        )
        return result


class AsyncModels:
    """One method per model of the contract (asyncio calls); the transport: ``_call``."""

    async def _call(self, spec: ModelSpec[Any], arguments: dict[str, Any]) -> Any:
        raise NotImplementedError

    async def attention(
        self,
        query: ArrayLike,
        key: ArrayLike,
        value: ArrayLike,
        *,
        causal: bool = False,
        causal_alignment: CausalAlignment = "lower_right",
        scale: float | None = None,
        window: Sequence[int | None] | None = None,
        softcap: float | None = None,
        rotary: Rotary | None = None,
        empty_rows: EmptyRows = "error",
        precision: Precision | None = None,
        mask: ArrayLike | None = None,
        bias: ArrayLike | None = None,
        enable_gqa: bool = False,
        alibi_slopes: ArrayLike | None = None,
        include: Collection[AttentionInclude] = ATTENTION_INCLUDE,
    ) -> AttentionResult:
        """Scaled dot-product attention with optional mask, causal mask and bias.

        scores = Q Kᵀ · scale + bias, hidden scores set to minus infinity, a row-wise softmax gives the
        weights, and the output mixes the values with them.

        Sent to /v2/models/attention/infer as binary tensors.

        Args:
            query: Queries, shape [..., n, d_k]; a 1-D [d_k] is a single query.
            key: Keys, [..., m, d_k].
            value: Values, [..., m, d_v].
            causal: Hide future keys.
            causal_alignment: lower_right: the queries are the last n of the m positions (key j is hidden from
                query i when j > i + m - n); upper_left: hidden when j > i (PyTorch's is_causal).
            scale: Multiplies QKᵀ; default 1/sqrt(d_k).
            window: [left, right] (null = unbounded on that side): key j is visible from query i only when i'
                - left <= j <= i' + right, where i' = i + m - n under lower_right alignment and i under
                upper_left. Combined with mask and causal by AND (FlashAttention's window_size).
            softcap: Logit soft-capping (Gemma 2): scaled scores become softcap * tanh(scores / softcap),
                before bias, ALiBi and masking.
            rotary: Rotary position embedding of the query and key rows before the scores (the scores and
                weights returned are the rotated ones).
            empty_rows: What to do with a query row that sees no key: error (422 naming the row) or zero
                (all-zero weights and output, row listed in empty_rows).
            precision: Floating-point type used for the arithmetic and the numbers in the response. float32
                roughly halves the response size at about 1e-6 relative accuracy. None: float32 when every
                float input is float32, else float64.
            mask: true = this query may attend to this key; broadcastable to [..., n, m] (a 1-D [m] mask is
                per-key visibility). Combined with causal by AND.
            bias: Added to the scaled scores before softmax; broadcastable to [..., n, m].
            enable_gqa: Grouped-query attention (PyTorch's enable_gqa): the query has H_q heads at dim -3, key
                and value H_kv, with H_q a multiple of H_kv; query head i reads key/value head i // (H_q /
                H_kv). H_kv = 1 is multi-query attention.
            alibi_slopes: ALiBi: one slope per head, broadcastable to the leading dimensions [..., H]; adds
                -slope * |i' - j| to the scores, after bias.
            include: Extra arrays to return (default ["weights"]).

        Returns a :class:`AttentionResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: AttentionResult = await self._call(
            ATTENTION,
            {
                "causal": causal,
                "causal_alignment": causal_alignment,
                "scale": scale,
                "window": window,
                "softcap": softcap,
                "rotary": rotary,
                "empty_rows": empty_rows,
                "precision": precision,
                "query": query,
                "key": key,
                "value": value,
                "mask": mask,
                "bias": bias,
                "enable_gqa": enable_gqa,
                "alibi_slopes": alibi_slopes,
                "include": include,
            },
        )
        return result

    async def feed_forward(
        self,
        x: ArrayLike,
        w_1: ArrayLike,
        w_2: ArrayLike,
        *,
        b_1: ArrayLike | None = None,
        b_2: ArrayLike | None = None,
        activation: Activation = "relu",
        w_3: ArrayLike | None = None,
        b_3: ArrayLike | None = None,
        include: Collection[FeedForwardInclude] = (),
        precision: Precision | None = None,
    ) -> FeedForwardResult:
        """A feed-forward layer, plain (relu, gelu, gelu_tanh, silu) or gated (swiglu, geglu).

        In the x @ W convention: act(x @ w_1 + b_1) @ w_2 + b_2, or for the gated activations (act(x @ w_1 +
        b_1) ⊙ (x @ w_3 + b_3)) @ w_2 + b_2 (LLaMA's MLP: w_1 is gate_proj, w_3 up_proj, w_2 down_proj).

        Sent to /v2/models/feed-forward/infer as binary tensors.

        Args:
            x: The rows, [..., d_model].
            w_1: First projection, [d_model, d_ff] (x @ w_1); the gated one for swiglu and geglu.
            w_2: Output projection, [d_ff, d_out].
            b_1: Bias of w_1, [d_ff].
            b_2: Bias of w_2, [d_out].
            activation: relu, gelu (exact: z·Φ(z)), gelu_tanh (PyTorch's approximate='tanh'), silu: act(x @
                w_1 + b_1) @ w_2 + b_2. swiglu and geglu (gated, LLaMA's convention): (act(x @ w_1 + b_1) ⊙ (x
                @ w_3 + b_3)) @ w_2 + b_2 with act silu or gelu.
            w_3: The gated activations' other projection, [d_model, d_ff]: required for swiglu and geglu,
                refused for the others.
            b_3: Bias of w_3, [d_ff]; gated activations only.
            include: ["hidden"] adds the hidden activations [..., d_ff] (what w_2 maps).
            precision: Floating-point type used for the arithmetic and the numbers in the response. float32
                roughly halves the response size at about 1e-6 relative accuracy. None: float32 when every
                float input is float32, else float64.

        Returns a :class:`FeedForwardResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: FeedForwardResult = await self._call(
            FEED_FORWARD,
            {
                "x": x,
                "w_1": w_1,
                "w_2": w_2,
                "b_1": b_1,
                "b_2": b_2,
                "activation": activation,
                "w_3": w_3,
                "b_3": b_3,
                "include": include,
                "precision": precision,
            },
        )
        return result

    async def layer_norm(
        self,
        x: ArrayLike,
        *,
        kind: LayerNormKind = "layer",
        weight: ArrayLike | None = None,
        bias: ArrayLike | None = None,
        eps: float = 1e-05,
        precision: Precision | None = None,
    ) -> LayerNormResult:
        """LayerNorm or RMSNorm over the last axis, with an optional weight and bias per feature.

        kind layer: (x − mean) / sqrt(var + eps) · weight + bias, the population variance, as
        torch.nn.functional.layer_norm; a constant row's output is the bias. kind rms: x / sqrt(mean(x²) +
        eps) · weight, as torch.nn.RMSNorm. The statistics are computed in float64 whatever the precision.

        Sent to /v2/models/layer-norm/infer as binary tensors.

        Args:
            x: The rows to normalize, [..., d].
            kind: layer: (x − mean) / sqrt(var + eps) · weight + bias over the last axis, with the population
                variance (PyTorch's F.layer_norm); rms: x / sqrt(mean(x²) + eps) · weight (nn.RMSNorm).
            weight: Scales each feature, [d]; default ones.
            bias: Shifts each feature, [d]; default zeros; kind layer only (refused for rms).
            eps: Added to the variance (or the mean square) under the square root.
            precision: Floating-point type used for the arithmetic and the numbers in the response. float32
                roughly halves the response size at about 1e-6 relative accuracy. None: float32 when every
                float input is float32, else float64.

        Returns a :class:`LayerNormResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: LayerNormResult = await self._call(
            LAYER_NORM,
            {
                "x": x,
                "kind": kind,
                "weight": weight,
                "bias": bias,
                "eps": eps,
                "precision": precision,
            },
        )
        return result

    async def log_likelihood(
        self,
        logits: ArrayLike,
        targets: ArrayLike,
        *,
        shift: bool = False,
        ignore_index: int = -100,
        temperature: float = 1.0,
        top_logprobs: int = 0,
        precision: Precision | None = None,
    ) -> LikelihoodResult:
        """Per-token log-probabilities and ranks, and per-sequence log-likelihood, NLL and perplexity.

        Sent to /v2/models/log-likelihood/infer as binary tensors.

        Args:
            logits: Next-token logits per position.
            targets: Token ids in [0, V), or ignore_index for padding.
            shift: Causal training shift: the logits row at position i scores targets[i+1].
            ignore_index: Target id that marks padding.
            temperature: Divides the logits before scoring.
            top_logprobs: How many of the most probable tokens to list per scored position.
            precision: Floating-point type used for the arithmetic and the numbers in the response. float32
                roughly halves the response size at about 1e-6 relative accuracy. None: float32 when every
                float input is float32, else float64.

        Returns a :class:`LikelihoodResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: LikelihoodResult = await self._call(
            LOG_LIKELIHOOD,
            {
                "logits": logits,
                "targets": targets,
                "shift": shift,
                "ignore_index": ignore_index,
                "temperature": temperature,
                "top_logprobs": top_logprobs,
                "precision": precision,
            },
        )
        return result

    async def multi_head_attention(
        self,
        query: ArrayLike,
        w_q: ArrayLike,
        w_k: ArrayLike,
        w_v: ArrayLike,
        w_o: ArrayLike,
        *,
        num_heads: int,
        causal: bool = False,
        causal_alignment: CausalAlignment = "lower_right",
        scale: float | None = None,
        window: Sequence[int | None] | None = None,
        softcap: float | None = None,
        rotary: Rotary | None = None,
        empty_rows: EmptyRows = "error",
        precision: Precision | None = None,
        key: ArrayLike | None = None,
        value: ArrayLike | None = None,
        b_q: ArrayLike | None = None,
        b_k: ArrayLike | None = None,
        b_v: ArrayLike | None = None,
        b_o: ArrayLike | None = None,
        num_kv_heads: int | None = None,
        mask: ArrayLike | None = None,
        bias: ArrayLike | None = None,
        alibi_slopes: ArrayLike | None = None,
        include: Collection[MultiHeadAttentionInclude] = (),
    ) -> MultiHeadResult:
        """A multi-head attention layer: projections, attention per head, concatenation, output projection.

        Q = query @ w_q + b_q (and K, V likewise) split into heads; each head is /v1/attention with every
        option given; the heads' outputs are concatenated and projected by w_o. num_kv_heads < num_heads
        shares key/value heads (grouped-query attention).

        Sent to /v2/models/multi-head-attention/infer as binary tensors.

        Args:
            query: Inputs of the queries, [..., n, d_model].
            w_q: Query projection, [d_model, num_heads · d_k] (x @ w_q).
            w_k: Key projection, [d_kv_model, num_kv_heads · d_k].
            w_v: Value projection, [d_kv_model, num_kv_heads · d_v].
            w_o: Output projection of the concatenated heads, [num_heads · d_v, d_out].
            num_heads: Query heads H_q.
            causal: Hide future keys.
            causal_alignment: lower_right: the queries are the last n of the m positions (key j is hidden from
                query i when j > i + m - n); upper_left: hidden when j > i (PyTorch's is_causal).
            scale: Multiplies QKᵀ; default 1/sqrt(d_k).
            window: [left, right] (null = unbounded on that side): key j is visible from query i only when i'
                - left <= j <= i' + right, where i' = i + m - n under lower_right alignment and i under
                upper_left. Combined with mask and causal by AND (FlashAttention's window_size).
            softcap: Logit soft-capping (Gemma 2): scaled scores become softcap * tanh(scores / softcap),
                before bias, ALiBi and masking.
            rotary: Rotary position embedding of the query and key rows before the scores (the scores and
                weights returned are the rotated ones).
            empty_rows: What to do with a query row that sees no key: error (422 naming the row) or zero
                (all-zero weights and output, row listed in empty_rows).
            precision: Floating-point type used for the arithmetic and the numbers in the response. float32
                roughly halves the response size at about 1e-6 relative accuracy. None: float32 when every
                float input is float32, else float64.
            key: Inputs of the keys, [..., m, d_kv_model]; default: the query (self-attention).
            value: Inputs of the values, [..., m, d_kv_model]; default: the key.
            b_q: Query projection bias, [num_heads · d_k].
            b_k: Key projection bias, [num_kv_heads · d_k].
            b_v: Value projection bias, [num_kv_heads · d_v].
            b_o: Output projection bias, [d_out].
            num_kv_heads: Key/value heads H_kv (default num_heads); num_heads must be a multiple. Query head i
                reads key/value head i // (num_heads / num_kv_heads): grouped-query attention; 1 is
                multi-query attention.
            mask: true = may attend; broadcastable to the per-head weights [..., H_q, n, m].
            bias: Added to every head's scaled scores; broadcastable to [..., H_q, n, m].
            alibi_slopes: ALiBi: one slope per head, broadcastable to [..., H_q].
            include: The steps to return beside the output: per-head weights and scores [..., H_q, n, m],
                heads (per-head outputs before w_o) [..., H_q, n, d_v], and the projections q [..., H_q, n,
                d_k], k [..., H_kv, m, d_k], v [..., H_kv, m, d_v] as the scores used them (after rotary).

        Returns a :class:`MultiHeadResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: MultiHeadResult = await self._call(
            MULTI_HEAD_ATTENTION,
            {
                "causal": causal,
                "causal_alignment": causal_alignment,
                "scale": scale,
                "window": window,
                "softcap": softcap,
                "rotary": rotary,
                "empty_rows": empty_rows,
                "precision": precision,
                "query": query,
                "key": key,
                "value": value,
                "w_q": w_q,
                "w_k": w_k,
                "w_v": w_v,
                "w_o": w_o,
                "b_q": b_q,
                "b_k": b_k,
                "b_v": b_v,
                "b_o": b_o,
                "num_heads": num_heads,
                "num_kv_heads": num_kv_heads,
                "mask": mask,
                "bias": bias,
                "alibi_slopes": alibi_slopes,
                "include": include,
            },
        )
        return result

    async def positional_encoding(
        self,
        *,
        kind: PositionalEncodingKind,
        positions: ArrayLike | None = None,
        length: int | None = None,
        d_model: int | None = None,
        x: ArrayLike | None = None,
        base: float = 10000.0,
        style: Style | None = None,
        dim: int | None = None,
        include: Collection[PositionalEncodingInclude] = (),
        precision: Precision | None = None,
    ) -> PositionalEncodingResult:
        """The sinusoidal table for some positions, or rotary embedding applied to rows at their positions.

        Sent to /v2/models/positional-encoding/infer as binary tensors.

        Args:
            kind: sinusoidal: the table of Attention Is All You Need §3.5, PE(pos, 2i) = sin(pos /
                base^(2i/d_model)), PE(pos, 2i+1) = cos(...); rotary: RoPE applied to x.
            positions: Integer positions, [n]; default 0 … n − 1 (rotary) or 0 … length − 1.
            length: sinusoidal: the positions 0 … length − 1 (instead of positions).
            d_model: sinusoidal: the table's width (even).
            x: rotary: the rows to rotate, [..., n, d].
            base: Frequencies base^(-2i/d).
            style: rotary: half pairs feature i with i + dim/2 (GPT-NeoX, Llama; the default); interleaved
                pairs 2i with 2i + 1 (GPT-J, RoFormer).
            dim: rotary: how many leading features rotate (even, at most d); default d.
            include: rotary: ["tables"] adds the cos and sin tables.
            precision: Floating-point type used for the arithmetic and the numbers in the response. float32
                roughly halves the response size at about 1e-6 relative accuracy. None: float32 when every
                float input is float32, else float64.

        Returns a :class:`PositionalEncodingResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: PositionalEncodingResult = await self._call(
            POSITIONAL_ENCODING,
            {
                "kind": kind,
                "positions": positions,
                "length": length,
                "d_model": d_model,
                "x": x,
                "base": base,
                "style": style,
                "dim": dim,
                "include": include,
                "precision": precision,
            },
        )
        return result

    async def sample(
        self,
        logits: ArrayLike,
        *,
        temperature: float = 1.0,
        mask: ArrayLike | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        num_samples: int = 1,
        seed: int | None = None,
    ) -> SampleResult:
        """Tokens drawn from each row of the logits, reproducibly from a seed.

        From the distribution /v1/softmax shows: temperature, top_k, top_p, min_p, each on what is left.

        Sent to /v2/models/sample/infer as binary tensors.

        Args:
            logits: Logits; each row over the last axis is a distribution to draw from.
            temperature: Divides the logits; 0 is greedy: the argmax, the lowest index on ties.
            mask: false = excluded (probability 0); broadcastable to the logits' shape.
            top_k: Keep every entry whose logit is at least the k-th largest.
            top_p: Keep the smallest set of most probable entries whose probability sums to at least p (never
                fewer than one), after temperature and top_k.
            min_p: Keep the entries whose probability is at least min_p times the largest one, after
                temperature, top_k and top_p (as Hugging Face's MinPLogitsWarper and vLLM).
            num_samples: Independent draws per row, with replacement.
            seed: Seeds NumPy's PCG64; the same request and seed give the same tokens on every machine.
                Absent: a fresh seed, returned in the answer. At most 2^53 - 1, so that JavaScript holds it
                exactly.

        Returns a :class:`SampleResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: SampleResult = await self._call(
            SAMPLE,
            {
                "logits": logits,
                "temperature": temperature,
                "mask": mask,
                "top_k": top_k,
                "top_p": top_p,
                "min_p": min_p,
                "num_samples": num_samples,
                "seed": seed,
            },
        )
        return result

    async def softmax(
        self,
        logits: ArrayLike,
        *,
        temperature: float = 1.0,
        mask: ArrayLike | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        include: Collection[SoftmaxInclude] = (),
        precision: Precision | None = None,
    ) -> SoftmaxResult:
        """Probabilities over the last axis of the logits, after mask, temperature, top-k, top-p and min-p.

        Sent to /v2/models/softmax/infer as binary tensors.

        Args:
            logits: Logits; softmax over the last axis.
            temperature: Divides the logits; 0 is the greedy limit (ties share the probability).
            mask: false = excluded (probability 0); broadcastable to the logits' shape.
            top_k: Keep every entry whose logit is at least the k-th largest.
            top_p: Keep the smallest set of most probable entries whose probability sums to at least p (never
                fewer than one), after temperature and top_k.
            min_p: Keep the entries whose probability is at least min_p times the largest one, after
                temperature, top_k and top_p (as Hugging Face's MinPLogitsWarper and vLLM).
            include: Extra arrays to return.
            precision: Floating-point type used for the arithmetic and the numbers in the response. float32
                roughly halves the response size at about 1e-6 relative accuracy. None: float32 when every
                float input is float32, else float64.

        Returns a :class:`SoftmaxResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: SoftmaxResult = await self._call(
            SOFTMAX,
            {
                "logits": logits,
                "temperature": temperature,
                "mask": mask,
                "top_k": top_k,
                "top_p": top_p,
                "min_p": min_p,
                "include": include,
                "precision": precision,
            },
        )
        return result

    async def transformer_block(
        self,
        x: ArrayLike,
        *,
        attention: MultiHeadFields,
        feed_forward: FeedForwardFields,
        norm_1: NormFields | None = None,
        norm_2: NormFields | None = None,
        norm_position: NormPosition = "pre",
        include: Collection[TransformerBlockInclude] = (),
        precision: Precision | None = None,
    ) -> TransformerBlockResult:
        """One Transformer block over a sequence (self-attention), pre-norm or post-norm.

        pre: h = x + MHA(norm_1(x)), y = h + FFN(norm_2(h)); post: h = norm_1(x + MHA(x)), y = norm_2(h +
        FFN(h)). attention, feed_forward, norm_1 and norm_2 are the bodies of /v1/multi-head-attention,
        /v1/feed-forward and /v1/layer-norm without their inputs; an error inside one names its path
        (feed_forward.w_3). The work limits count the whole block.

        Sent to /v2/models/transformer-block/infer as binary tensors.

        Args:
            x: The tokens' vectors, [..., n, d_model]: the residual stream's input.
            attention: The body of /v1/multi-head-attention without query, key, value, include and precision:
                self-attention over the block's rows, with every option (causal, rotary, …); w_o must give
                d_model columns.
            feed_forward: The body of /v1/feed-forward without x, include and precision; w_2 must give d_model
                columns.
            norm_1: Before attention (pre) or after its residual add (post). The body of /v1/layer-norm
                without x (kind, weight, bias, eps); default: LayerNorm with weight 1, bias 0 and eps 1e-5, as
                PyTorch's layers start.
            norm_2: Before the feed-forward layer (pre) or after its residual add (post). The body of
                /v1/layer-norm without x (kind, weight, bias, eps); default: LayerNorm with weight 1, bias 0
                and eps 1e-5, as PyTorch's layers start.
            norm_position: pre (GPT-2, LLaMA): h = x + MHA(norm_1(x)), y = h + FFN(norm_2(h)); post (Attention
                Is All You Need §3.1): h = norm_1(x + MHA(x)), y = norm_2(h + FFN(h)).
            include: weights: the per-head attention weights [..., H, n, n]; residual: the residual stream h
                between the two sublayers [..., n, d_model].
            precision: Floating-point type used for the arithmetic and the numbers in the response. float32
                roughly halves the response size at about 1e-6 relative accuracy. None: float32 when every
                float input is float32, else float64.

        Returns a :class:`TransformerBlockResult`; raises :class:`InvalidInput` for an argument
        the service would refuse, :class:`ApiError` for a refusal or a failed call.
        """
        result: TransformerBlockResult = await self._call(
            TRANSFORMER_BLOCK,
            {
                "x": x,
                "attention": attention,
                "feed_forward": feed_forward,
                "norm_1": norm_1,
                "norm_2": norm_2,
                "norm_position": norm_position,
                "include": include,
                "precision": precision,
            },
        )
        return result


MODELS: tuple[ModelSpec[Any], ...] = (
    ATTENTION,
    FEED_FORWARD,
    LAYER_NORM,
    LOG_LIKELIHOOD,
    MULTI_HEAD_ATTENTION,
    POSITIONAL_ENCODING,
    SAMPLE,
    SOFTMAX,
    TRANSFORMER_BLOCK,
)

__all__ = [
    "MODELS",
    "Activation",
    "AsyncModels",
    "AttentionInclude",
    "AttentionResult",
    "CausalAlignment",
    "EmptyRows",
    "FeedForwardFields",
    "FeedForwardInclude",
    "FeedForwardResult",
    "LayerNormKind",
    "LayerNormResult",
    "LikelihoodResult",
    "MultiHeadAttentionInclude",
    "MultiHeadFields",
    "MultiHeadResult",
    "NormFields",
    "NormPosition",
    "PositionalEncodingInclude",
    "PositionalEncodingKind",
    "PositionalEncodingResult",
    "Precision",
    "Rotary",
    "SampleResult",
    "SoftmaxInclude",
    "SoftmaxResult",
    "Style",
    "SyncModels",
    "TransformerBlockInclude",
    "TransformerBlockKind",
    "TransformerBlockResult",
]
