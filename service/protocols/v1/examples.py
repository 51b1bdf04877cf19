"""The contract's examples: the course's worked example, with responses computed by the kernels.

Computing the responses (rather than typing them) keeps the documentation true; the tests check them
against the loop references and check that the live endpoints answer them, within the rounding below.

The last bits of a float64 result depend on the machine (which SIMD code NumPy and OpenBLAS pick for the
CPU), so the numbers are rounded to EXAMPLE_DIGITS significant digits: the committed contract is then the
same bytes wherever it is generated.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
from marshmallow import Schema

from service.kernels import (
    AttentionOptions,
    MultiHeadWeights,
    attention,
    multi_head_attention,
    sample,
    sequence_log_likelihood,
    sinusoidal_encoding,
    softmax,
)
from service.protocols.declarations.attention import AttentionResponseSchema, attention_response
from service.protocols.declarations.likelihood import LikelihoodResponseSchema, likelihood_response
from service.protocols.declarations.multihead import MultiHeadResponseSchema, multi_head_response
from service.protocols.declarations.positions import PositionalEncodingResponseSchema
from service.protocols.declarations.sample import SampleResponseSchema, sample_response
from service.protocols.declarations.softmax import SoftmaxResponseSchema, softmax_response
from service.web.json_provider import dumps_bytes

# float64 carries about 16 digits and different CPUs' paths agree to about 1e-15 relative; 12 digits leave a
# wide margin (a test checks that no example sits within that margin of a rounding boundary).
EXAMPLE_DIGITS = 12


def _as_written(schema: Schema, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as a client reads it: dumped by its response schema, written by the JSON provider."""
    written: dict[str, Any] = orjson.loads(dumps_bytes(schema.dump(body)))
    return written


def round_floats(value: Any, digits: int = EXAMPLE_DIGITS) -> Any:
    """``value`` (parsed JSON) with every float rounded to ``digits`` significant digits."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, list):
        return [round_floats(item, digits) for item in value]
    if isinstance(value, dict):
        return {key: round_floats(item, digits) for key, item in value.items()}
    return value


ATTENTION_EXAMPLE_REQUEST: dict[str, Any] = {
    "query": [0, 1],
    "key": [[1, 0], [0, 1]],
    "value": [[6, 0], [0, 3]],
}
SOFTMAX_EXAMPLE_REQUEST: dict[str, Any] = {"logits": [2.0, 1.0, 0.1], "temperature": 0.5}
LIKELIHOOD_EXAMPLE_REQUEST: dict[str, Any] = {
    "logits": [[2.0, 0.5, -1.0], [0.1, 1.5, 0.3], [0.0, 0.2, 2.2]],
    "targets": [0, 1, 2],
    "shift": True,
}

# Two tokens, d_model = 2, two heads of width 1, the identity as every projection: each head attends over
# one feature, so the layer's arithmetic can be followed by hand.
MULTI_HEAD_EXAMPLE_REQUEST: dict[str, Any] = {
    "query": [[1.0, 0.0], [0.0, 1.0]],
    "w_q": [[1.0, 0.0], [0.0, 1.0]],
    "w_k": [[1.0, 0.0], [0.0, 1.0]],
    "w_v": [[1.0, 0.0], [0.0, 1.0]],
    "w_o": [[1.0, 0.0], [0.0, 1.0]],
    "num_heads": 2,
    "causal": True,
    "include": ["weights"],
}
POSITIONAL_EXAMPLE_REQUEST: dict[str, Any] = {"kind": "sinusoidal", "length": 3, "d_model": 4}
# The softmax example's logits, drawn from eight times with a seed: the same tokens on every machine.
SAMPLE_EXAMPLE_REQUEST: dict[str, Any] = {"logits": [2.0, 1.0, 0.1], "num_samples": 8, "seed": 0}


def computed_attention_example_response() -> dict[str, Any]:
    query, key, value = (np.asarray(ATTENTION_EXAMPLE_REQUEST[name]) for name in ("query", "key", "value"))
    result = attention(query, key, value, include={"weights"})
    return _as_written(AttentionResponseSchema(), attention_response(result, include=["weights"]))


def computed_softmax_example_response() -> dict[str, Any]:
    request = SOFTMAX_EXAMPLE_REQUEST
    result = softmax(np.asarray(request["logits"]), temperature=request["temperature"])
    return _as_written(SoftmaxResponseSchema(), softmax_response(result, include=[]))


def computed_likelihood_example_response() -> dict[str, Any]:
    request = LIKELIHOOD_EXAMPLE_REQUEST
    result = sequence_log_likelihood(
        np.asarray(request["logits"]), np.asarray(request["targets"]), shift=request["shift"]
    )
    return _as_written(LikelihoodResponseSchema(), likelihood_response(result))


def computed_multi_head_example_response() -> dict[str, Any]:
    request = MULTI_HEAD_EXAMPLE_REQUEST
    query, w_q, w_k, w_v, w_o = (np.asarray(request[name]) for name in ("query", "w_q", "w_k", "w_v", "w_o"))
    result = multi_head_attention(
        query,
        weights=MultiHeadWeights(w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, num_heads=request["num_heads"]),
        options=AttentionOptions(causal=True),
        include={"weights"},
    )
    return _as_written(MultiHeadResponseSchema(), multi_head_response(result, include=["weights"]))


def computed_positional_example_response() -> dict[str, Any]:
    request = POSITIONAL_EXAMPLE_REQUEST
    table = sinusoidal_encoding(np.arange(request["length"]), request["d_model"])
    return _as_written(PositionalEncodingResponseSchema(), {"encoding": table})


def computed_sample_example_response() -> dict[str, Any]:
    request = SAMPLE_EXAMPLE_REQUEST
    result = sample(np.asarray(request["logits"]), num_samples=request["num_samples"], seed=request["seed"])
    return _as_written(SampleResponseSchema(), sample_response(result))


ATTENTION_EXAMPLE_RESPONSE = round_floats(computed_attention_example_response())
SOFTMAX_EXAMPLE_RESPONSE = round_floats(computed_softmax_example_response())
LIKELIHOOD_EXAMPLE_RESPONSE = round_floats(computed_likelihood_example_response())
MULTI_HEAD_EXAMPLE_RESPONSE = round_floats(computed_multi_head_example_response())
POSITIONAL_EXAMPLE_RESPONSE = round_floats(computed_positional_example_response())
SAMPLE_EXAMPLE_RESPONSE = round_floats(computed_sample_example_response())
