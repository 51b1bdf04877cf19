"""The benchmarked requests, and for each the in-process floor: orjson parse + kernel + orjson dump."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from service.kernels import (
    AttentionOptions,
    MultiHeadWeights,
    attention,
    multi_head_attention,
    sequence_log_likelihood,
)
from service.protocols.declarations.attention import EXAMPLE as ATTENTION_EXAMPLE_REQUEST
from service.requests import PRECISIONS

Floor = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Case:
    """One request body sent to one endpoint, with the code a caller would write to do the same work."""

    name: str
    path: str
    body: dict[str, Any]
    floor: Floor
    raw: bytes = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "raw", orjson.dumps(self.body))

    def with_precision(self, precision: str) -> Case:
        return Case(f"{self.name} {precision}", self.path, {**self.body, "precision": precision}, self.floor)


def floor_bytes(case: Case) -> bytes:
    """What the floor does: parse the bytes, compute, write the bytes."""
    return orjson.dumps(
        case.floor(orjson.loads(case.raw)), option=orjson.OPT_SERIALIZE_NUMPY, default=_zero_dimensional
    )


def _zero_dimensional(value: Any) -> Any:
    # orjson writes arrays of rank 1 and more itself; a per-sequence total of one sequence has rank 0
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]  # its NumPy scalar, written in its own precision
    raise TypeError(f"cannot serialize {type(value).__name__}")


def _attention_floor(body: dict[str, Any]) -> dict[str, Any]:
    dtype = PRECISIONS[body.get("precision", "float64")]
    result = attention(
        np.asarray(body["query"], dtype=dtype),
        np.asarray(body["key"], dtype=dtype),
        np.asarray(body["value"], dtype=dtype),
        include={"weights"} if "weights" in body.get("include", ["weights"]) else (),
        dtype=dtype,
    )
    answer: dict[str, Any] = {"output": result.output, "scale": result.scale, "empty_rows": []}
    if result.weights is not None:
        answer["weights"] = result.weights
    return answer


def _likelihood_floor(body: dict[str, Any]) -> dict[str, Any]:
    dtype = PRECISIONS[body.get("precision", "float64")]
    result = sequence_log_likelihood(
        np.asarray(body["logits"], dtype=dtype), np.asarray(body["targets"], dtype=np.int64), dtype=dtype
    )
    return {
        "token_logprobs": result.token_logprobs,
        "ranks": result.ranks,
        "log_likelihood": result.log_likelihood,
        "num_tokens": result.num_tokens,
        "mean_nll": result.mean_nll,
        "perplexity": result.perplexity,
        "is_greedy": result.is_greedy,
    }


def _multi_head_floor(body: dict[str, Any]) -> dict[str, Any]:
    dtype = PRECISIONS[body.get("precision", "float64")]
    w_q, w_k, w_v, w_o = (np.asarray(body[name], dtype=dtype) for name in ("w_q", "w_k", "w_v", "w_o"))
    result = multi_head_attention(
        np.asarray(body["query"], dtype=dtype),
        weights=MultiHeadWeights(w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, num_heads=body["num_heads"]),
        options=AttentionOptions(causal=body.get("causal", False)),
        dtype=dtype,
    )
    return {"output": result.output, "scale": result.scale, "empty_rows": []}


def _multi_head_case(name: str, n: int, d_model: int, heads: int, *, rng: np.random.Generator) -> Case:
    """A causal self-attention layer: the four projections are d_model x d_model, as in AIAYN.

    Numbers are rounded to 4 significant digits or so: at full precision 1.3 million numbers take 26 MB of
    JSON, over the default 16 MiB body limit; rounded, 11 MB.
    """
    scale = 1 / np.sqrt(d_model)  # keeps the projected rows, and so the scores, of order one
    body: dict[str, Any] = {
        "query": np.round(rng.standard_normal((n, d_model)), 3).tolist(),
        **{
            name: np.round(rng.standard_normal((d_model, d_model)) * scale, 4).tolist()
            for name in ("w_q", "w_k", "w_v", "w_o")
        },
        "num_heads": heads,
        "causal": True,
    }
    return Case(name, "/v1/multi-head-attention", body, _multi_head_floor)


def _attention_case(name: str, n: int, d: int, *, weights: bool, rng: np.random.Generator) -> Case:
    body = {
        "query": rng.standard_normal((n, d)).tolist(),
        "key": rng.standard_normal((n, d)).tolist(),
        "value": rng.standard_normal((n, d)).tolist(),
        "include": ["weights"] if weights else [],
    }
    return Case(name, "/v1/attention", body, _attention_floor)


def all_cases() -> list[Case]:
    """The issue's sizes, from the seed example to a 2048×2048 output-only attention."""
    rng = np.random.default_rng(20240229)
    logits = rng.standard_normal((64, 8192)) * 3
    return [
        Case("tiny (seed example)", "/v1/attention", ATTENTION_EXAMPLE_REQUEST, _attention_floor),
        _attention_case("attention 128 weights", 128, 64, weights=True, rng=rng),
        _attention_case("attention 512 weights", 512, 64, weights=True, rng=rng),
        _attention_case("attention 2048 output", 2048, 64, weights=False, rng=rng),
        Case(
            "log-likelihood 64x8192",
            "/v1/log-likelihood",
            {"logits": logits.tolist(), "targets": rng.integers(0, 8192, 64).tolist()},
            _likelihood_floor,
        ),
        _multi_head_case("multi-head 512, d_model 512, 8 heads", 512, 512, 8, rng=rng),
    ]
