"""A Python client for the attention service: NumPy arrays in and out, over the Open Inference Protocol.

    >>> from attention_client import Client
    >>> with Client("http://127.0.0.1:8000") as service:
    ...     result = service.attention(query, key, value, causal=True)
    ...     result.output, result.weights

Sync (:class:`Client`) and async (:class:`AsyncClient`); every refusal raises :class:`ApiError`, and an
answer that is not a well-formed one (a proxy's HTML page, a truncated body) raises its subclass
:class:`MalformedAnswerError`.
"""

from __future__ import annotations

from attention_client._client import DEFAULT_BASE_URL, AsyncClient, Client
from attention_client._errors import ApiError, MalformedAnswerError
from attention_client._results import AttentionResult, LikelihoodResult, SampleResult, SoftmaxResult

__all__ = [
    "DEFAULT_BASE_URL",
    "ApiError",
    "AsyncClient",
    "AttentionResult",
    "Client",
    "LikelihoodResult",
    "MalformedAnswerError",
    "SampleResult",
    "SoftmaxResult",
]
