"""Typed requests: one frozen object per model, made by either protocol's codec and run by its kernel.

A request object that exists has passed every rule (ranks, ranges, allowed values, matching shapes), and
``work()`` says how much it asks for before anything large is allocated.
"""

from __future__ import annotations

from service.kernels import AttentionOutput, BlockOutput, FeedForwardOutput, MultiHeadOutput, Range
from service.requests._attention import AttentionRequest
from service.requests._block import TransformerBlockRequest
from service.requests._common import (
    MAX_RANK,
    PRECISIONS,
    ArrayKind,
    ArraySpec,
    Bound,
    Precision,
    RequestError,
    Work,
)
from service.requests._feed_forward import FeedForwardRequest
from service.requests._likelihood import TOP_LOGPROB_COST, LikelihoodRequest
from service.requests._multihead import MultiHeadRequest
from service.requests._norms import LayerNormRequest, LayerNormResult
from service.requests._positions import PositionalEncodingRequest, PositionalOutput
from service.requests._sample import SampleRequest
from service.requests._softmax import SoftmaxOutput, SoftmaxRequest

__all__ = [
    "MAX_RANK",
    "PRECISIONS",
    "TOP_LOGPROB_COST",
    "ArrayKind",
    "ArraySpec",
    "AttentionOutput",
    "AttentionRequest",
    "BlockOutput",
    "Bound",
    "FeedForwardOutput",
    "FeedForwardRequest",
    "LayerNormRequest",
    "LayerNormResult",
    "LikelihoodRequest",
    "MultiHeadOutput",
    "MultiHeadRequest",
    "PositionalEncodingRequest",
    "PositionalOutput",
    "Precision",
    "Range",
    "RequestError",
    "SampleRequest",
    "SoftmaxOutput",
    "SoftmaxRequest",
    "TransformerBlockRequest",
    "Work",
]
