"""The contract's examples: the course's worked example, with responses computed by the kernels.

Computing the responses (rather than typing them) keeps the documentation true; a test also checks
that the live endpoints answer exactly these responses.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from service.api.schemas.likelihood import likelihood_response
from service.kernels import attention, sequence_log_likelihood, softmax


def _plain_dict(value: dict[str, Any]) -> dict[str, Any]:
    plain: dict[str, Any] = _plain(value)
    return plain


def _plain(value: Any) -> Any:
    """NumPy values to plain JSON-ready Python values (NaN/∞ → None, as the JSON provider writes them)."""
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, np.generic):
        return _plain(value.item())
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


ATTENTION_EXAMPLE_REQUEST: dict[str, Any] = {
    "query": [0, 1],
    "key": [[1, 0], [0, 1]],
    "value": [[6, 0], [0, 3]],
}


def _attention_example_response() -> dict[str, Any]:
    request = {
        name: np.asarray(values, dtype=np.float64) for name, values in ATTENTION_EXAMPLE_REQUEST.items()
    }
    result = attention(request["query"], request["key"], request["value"], return_weights=True)
    return _plain_dict(
        {
            "output": result.output,
            "weights": result.weights,
            "scale": result.scale,
            "empty_rows": result.empty_rows,
        }
    )


SOFTMAX_EXAMPLE_REQUEST: dict[str, Any] = {"logits": [2.0, 1.0, 0.1], "temperature": 0.5}


def _softmax_example_response() -> dict[str, Any]:
    result = softmax(np.asarray(SOFTMAX_EXAMPLE_REQUEST["logits"]), temperature=0.5)
    return _plain_dict(
        {
            "probabilities": result.probabilities,
            "entropy": result.entropy,
            "argmax": result.argmax,
            "temperature": result.temperature,
        }
    )


LIKELIHOOD_EXAMPLE_REQUEST: dict[str, Any] = {
    "logits": [[2.0, 0.5, -1.0], [0.1, 1.5, 0.3], [0.0, 0.2, 2.2]],
    "targets": [0, 1, 2],
    "shift": True,
}


def _likelihood_example_response() -> dict[str, Any]:
    result = sequence_log_likelihood(
        np.asarray(LIKELIHOOD_EXAMPLE_REQUEST["logits"]),
        np.asarray(LIKELIHOOD_EXAMPLE_REQUEST["targets"]),
        shift=True,
    )
    return _plain_dict(likelihood_response(result))


ATTENTION_EXAMPLE_RESPONSE = _attention_example_response()
SOFTMAX_EXAMPLE_RESPONSE = _softmax_example_response()
LIKELIHOOD_EXAMPLE_RESPONSE = _likelihood_example_response()
