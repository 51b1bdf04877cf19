"""A Python client for the attention service: NumPy arrays in and out, over the Open Inference Protocol.

    >>> from attention_client import Client
    >>> with Client("http://127.0.0.1:8000") as service:
    ...     result = service.attention(query, key, value, causal=True)
    ...     result.output, result.weights

Sync (:class:`Client`) and async (:class:`AsyncClient`), one method per model of the service with every
option of its ``/v1`` endpoint (generated from the contract, ``openapi.yaml``), and ``health()``,
``ready()`` and ``metadata(model)``. Every failure raises :class:`ApiError` or one of its subclasses:

- :class:`InvalidInput`: an argument the service would refuse, named in ``argument``, before sending;
- :class:`ConnectionFailed`, :class:`Timeout` (both :class:`TransportError`): no answer came; the httpx
  exception is chained as ``__cause__``;
- :class:`MalformedAnswerError`: an answer that is not a well-formed one (a proxy's HTML page, a
  truncated body);
- :class:`ApiError` itself: the service's refusal, with its ``status``, ``title``, ``detail`` and
  ``errors`` (each field's messages) as in its problem document, and its ``retry_after``. A refusal of an
  overloaded service (``503`` or ``429``) whose ``Retry-After`` the client allows is first sent again
  (the clients' ``overload_retries`` and ``most_retry_wait``).
"""

from __future__ import annotations

from attention_client._client import DEFAULT_BASE_URL, AsyncClient, Client
from attention_client._errors import (
    ApiError,
    ConnectionFailed,
    InvalidInput,
    MalformedAnswerError,
    Timeout,
    TransportError,
)
from attention_client._models import (
    AttentionInclude,
    AttentionResult,
    CausalAlignment,
    EmptyRows,
    LikelihoodResult,
    MultiHeadAttentionInclude,
    MultiHeadResult,
    PositionalEncodingInclude,
    PositionalEncodingResult,
    Precision,
    Rotary,
    SampleResult,
    SoftmaxInclude,
    SoftmaxResult,
)

__version__ = "2.1.0"

__all__ = [
    "DEFAULT_BASE_URL",
    "ApiError",
    "AsyncClient",
    "AttentionInclude",
    "AttentionResult",
    "CausalAlignment",
    "Client",
    "ConnectionFailed",
    "EmptyRows",
    "InvalidInput",
    "LikelihoodResult",
    "MalformedAnswerError",
    "MultiHeadAttentionInclude",
    "MultiHeadResult",
    "PositionalEncodingInclude",
    "PositionalEncodingResult",
    "Precision",
    "Rotary",
    "SampleResult",
    "SoftmaxInclude",
    "SoftmaxResult",
    "Timeout",
    "TransportError",
    "__version__",
]
