"""The most expensive body each endpoint accepts under the default limits, and its CPU time in process.

``worst_case_requests()`` gives, per endpoint, the path and JSON body of the costliest request its ``work()``
admits with the default settings (``MEMORY_BUDGET_BYTES`` = 384 MiB and the limits derived from it): the
target is that each runs within 2 s of CPU on the benchmark machine. Each builder takes ``step``: 0 is the
frontier body, 1 the next size up along the dimension that reaches a limit, which is refused with a 413
(``tests/test_worst_cases.py`` checks both). The attack suite sends these bodies; ``python -m bench
--worst-cases`` times each request's run (its typed request built from the body, then the kernel) in CPU
seconds, and ``docs/operations.md`` ("Worst case per endpoint") reports the figures.

How they were found: candidate shapes and options were scaled up to the first limit they reach (the compute
bound, the held arrays, the answer's size or the body), then timed with ``time.process_time``; the
docstring of each builder says what was searched. Values are rounded so that the bodies stay under the
16 MiB body limit. Each builder also takes ``shrink``, dividing its limiting dimension (for the smoke run).
Values that make subnormal numbers (below 2.2e-308) would cost 30-160× in any arithmetic; attention and the
multi-head layer flush them in their products, and docs/operations.md gives those bodies' times beside these.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from service import create_app
from service.protocols.declarations.attention import AttentionRequestSchema
from service.protocols.declarations.feed_forward import FeedForwardRequestSchema
from service.protocols.declarations.layer_norm import LayerNormRequestSchema
from service.protocols.declarations.likelihood import LikelihoodRequestSchema
from service.protocols.declarations.multihead import MultiHeadRequestSchema
from service.protocols.declarations.positions import PositionalEncodingRequestSchema
from service.protocols.declarations.sample import SampleRequestSchema
from service.protocols.declarations.schemas import RequestSchema
from service.protocols.declarations.softmax import SoftmaxRequestSchema
from service.protocols.declarations.transformer_block import TransformerBlockRequestSchema
from service.requests import SampleRequest, SoftmaxRequest
from service.web.limits import admit_work
from service.web.problems import Problem

TARGET_CPU_SECONDS = 2.0
Body = dict[str, Any]


def _numbers(rng: np.random.Generator, shape: tuple[int, ...], decimals: int = 2) -> list[Any]:
    """Standard normal numbers rounded to ``decimals``, as nested lists (short JSON, never subnormal)."""
    values: list[Any] = np.round(rng.standard_normal(shape), decimals).tolist()
    return values


def attention_worst_case(step: int = 0, shrink: int = 1) -> tuple[str, Body]:
    """n = m = 8184 (+ step) with d_k = d_v = 2 and every per-score option on: softcap, ALiBi, the causal band
    and a window, rotary, logsumexp and ``empty_rows: "zero"``, in float64 (n² scores and rotary's 16 n
    reach the compute bound, 8192², there).

    Searched: n, m in 1 … 8192 (equal, and 2 × 4096 both ways), d_k and d_v in 1 … 2000, batches broadcast
    between query and key (the kernel's one-row blocks), output only, with weights or with logsumexp, each
    option set, float64 and float32, each scaled to its first limit. Narrow rows cost one score each whatever
    their width, and the per-score options (ALiBi's distances, softcap's tanh, the band) roughly double a
    score's cost, so the widest score count with all of them is the most expensive (wide rows in small
    blocks are counted by their slowdown and stop earlier).
    """
    rng = np.random.default_rng(18)
    n = 8184 // shrink + step
    return "/v1/attention", {
        "query": _numbers(rng, (n, 2)),
        "key": _numbers(rng, (n, 2)),
        "value": _numbers(rng, (n, 2)),
        "causal": True,
        "window": [n, n],
        "alibi_slopes": 0.01,
        "softcap": 30.0,
        "rotary": {},
        "empty_rows": "zero",
        "include": ["logsumexp"],
    }


def multi_head_worst_case(step: int = 0, shrink: int = 1) -> tuple[str, Body]:
    """A batch of 2319 (+ step) sequences of 16 tokens, d_model = 64, 64 query heads of width 2 sharing one
    key/value head, with softcap, ALiBi and the causal mask.

    Searched: n in 1 … 8192, d_model in 1 … 2048, heads × width from 1 × 1 (the issue's narrow heads) to
    2 × 256 and 64 × 2, grouped (one key/value head) or not, output only, with weights, or with every
    projection shown, with and without softcap + ALiBi + causal, each scaled by the batch to its first limit.
    Many narrow heads over short sequences make the most scores per body byte, each a block of few rows.
    """
    rng = np.random.default_rng(18)
    heads, width, d_model = 64, 2, 64
    return "/v1/multi-head-attention", {
        "query": _numbers(rng, (2319 // shrink + step, 16, d_model)),
        "w_q": _numbers(rng, (d_model, heads * width)),
        "w_k": _numbers(rng, (d_model, width)),
        "w_v": _numbers(rng, (d_model, width)),
        "w_o": _numbers(rng, (heads * width, d_model)),
        "num_heads": heads,
        "num_kv_heads": 1,
        "causal": True,
        "softcap": 30.0,
        "alibi_slopes": [0.01] * heads,
    }


def softmax_worst_case(step: int = 0, shrink: int = 1) -> tuple[str, Body]:
    """One row of logits as long as the compute bound allows under top-p (its sort), top-k and min-p,
    with the log-probabilities.

    Searched: one row or rows of 64 … 2^20 logits, no truncation, top-p, top-p + top-k + min-p, with the
    log-probabilities; each scaled by its row count (or row length) to its first limit. Sorting one long row
    costs the most per logit.
    """
    options: Body = {"top_p": 0.999, "min_p": 1e-4, "include": ["log_probabilities"]}
    size = _longest_row("/v1/softmax", options) // shrink + step
    rng = np.random.default_rng(18)
    return "/v1/softmax", {"logits": _integers(rng, size), "top_k": size // 2, **options}


def sample_worst_case(step: int = 0, shrink: int = 1) -> tuple[str, Body]:
    """One row of logits as long as the compute bound allows under top-p, top-k and min-p, with the most
    draws a row may ask for (100,000).

    Searched as softmax, with 1, 1,000 and 100,000 draws per row.
    """
    options: Body = {"top_p": 0.999, "min_p": 1e-4, "num_samples": 100_000, "seed": 18}
    size = _longest_row("/v1/sample", options) // shrink + step
    rng = np.random.default_rng(18)
    return "/v1/sample", {"logits": _integers(rng, size), "top_k": size // 2, **options}


def likelihood_worst_case(step: int = 0, shrink: int = 1) -> tuple[str, Body]:
    """524,288 (+ step) positions of 8 equal logits with ``top_logprobs: 1``: every row ties at its top
    entry, so each is sorted again on its own (stable, lowest ids first), a NumPy call per row.

    Searched: T × V from 2047 × 4096 to 83 × 100,000 and 524,288 × 2 … 16, top_logprobs 0, 1 and 20, random
    and equal logits. Without ties the whole body is a few vectorized passes (well under 0.1 s).
    """
    positions = 524_288 // shrink + step  # × 32 per listed entry: MAX_WORK_ELEMENTS
    return "/v1/log-likelihood", {
        "logits": [[0] * 8] * positions,
        "targets": [0] * positions,
        "top_logprobs": 1,
    }


def positional_worst_case(step: int = 0, shrink: int = 1) -> tuple[str, Body]:
    """Rotary embedding of x [125,829 (+ step), 64] at its default positions: as many rotated values as the
    answer limit allows (8,053,063 at 25 bytes each), 32 angles per position.

    Searched: sinusoidal tables at the answer limit (n × d_model of 4,026,000 × 2 and 62,900 × 128), rotary
    over x of row width 2, 4, 8 and 64 at the body or answer limit, with and without the tables. All take
    0.1-0.25 s; width 64 the most (its body is 16.4 MB, just under the body limit).
    """
    rows = 125_829 // shrink + step
    return "/v1/positional-encoding", {"kind": "rotary", "x": [[1, 0] * 32] * rows}


def layer_norm_worst_case(step: int = 0, shrink: int = 1) -> tuple[str, Body]:
    """LayerNorm of x [1,398,101 (+ step), 4]: as many rows as the held arrays allow (three the size of x).

    Searched: d = 1, 2, 4, 8, 64, layer and rms, with and without weight and bias, each at its first limit
    (the held arrays, the answer or the body). Short rows cost the most per entry (a reduction per row), so
    the narrowest rows that the body can still carry up to the limit of the arrays are the most expensive;
    all took 0.1-0.2 s.
    """
    rows = 1_398_101 // shrink + step
    return "/v1/layer-norm", {"x": [[1, 0, 1, 0]] * rows, "weight": [1.0] * 4, "bias": [0.0] * 4}


def feed_forward_worst_case(step: int = 0, shrink: int = 1) -> tuple[str, Body]:
    """512 (+ step) sequences of one token, d_model 512, d_ff 2048, relu: one-row products at the compute
    bound.

    Searched: d_model 1 … 1024 with d_ff 4 × d_model or d_ff up to 1M, rows of one token (products at
    dot-product speed, counted 8 × slower) and of many, every activation (exact GELU's erfc at the held
    arrays' limit took 0.3 s), each scaled to its first limit within the body limit. The widest weights
    the body holds, multiplied one row at a time, cost the most per counted unit.
    """
    rng = np.random.default_rng(18)
    return "/v1/feed-forward", {
        "x": _numbers(rng, (512 // shrink + step, 1, 512)),
        "w_1": _numbers(rng, (512, 2048)),
        "w_2": _numbers(rng, (2048, 512)),
    }


def transformer_block_worst_case(step: int = 0, shrink: int = 1) -> tuple[str, Body]:
    """One sequence of 5772 (+ step) tokens, d_model 2, two query heads of width 1 on one key/value head,
    causal, softcap and ALiBi: the attention scores at the compute bound, as attention's own worst case.

    Searched: the multi-head layer's worst case inside a block, d_model 1 and 2 with feed-forward layers of
    64 to 4096 (gelu, geglu), and long single sequences; each scaled to its first limit. The block counts its
    parts as their endpoints do, summed: a long sequence is attention's scores, and costs what they cost.
    """
    rng = np.random.default_rng(18)
    n = 5772 // shrink + step
    return "/v1/transformer-block", {
        "x": _numbers(rng, (n, 2)),
        "attention": {
            "w_q": _numbers(rng, (2, 2)),
            "w_k": _numbers(rng, (2, 1)),
            "w_v": _numbers(rng, (2, 1)),
            "w_o": _numbers(rng, (2, 2)),
            "num_heads": 2,
            "num_kv_heads": 1,
            "causal": True,
            "softcap": 30.0,
            "alibi_slopes": [0.01, 0.02],
        },
        "feed_forward": {"w_1": _numbers(rng, (2, 8)), "w_2": _numbers(rng, (8, 2)), "activation": "gelu"},
        "norm_1": {"kind": "rms"},
    }


def _longest_row(path: str, options: Body) -> int:
    """The most logits one row may hold under ``options`` (top_k at half the row) before a limit refuses it:
    found by bisection on the typed request's work, with a broadcast row that allocates nothing."""

    def accepted(size: int) -> bool:
        logits = np.broadcast_to(np.float64(0), (size,))
        fields: dict[str, Any] = {name: value for name, value in options.items() if name != "include"}
        if "include" in options:
            fields["include"] = frozenset(options["include"])
        request_type = SoftmaxRequest if path == "/v1/softmax" else SampleRequest
        return admitted(request_type(logits, top_k=size // 2, **fields))

    low, high = 1, 1 << 24
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if accepted(middle) else (low, middle - 1)
    return low


def admitted(request: Any) -> bool:
    """Whether the default limits admit ``request``'s work (no 413)."""
    with _DEFAULT_APP.test_request_context():
        try:
            admit_work(request.work())
        except Problem:
            return False
    return True


_DEFAULT_APP = create_app()


def _integers(rng: np.random.Generator, size: int) -> list[int]:
    """Logits as small integers: short JSON, and enough distinct values to make the sort work."""
    values: list[int] = rng.integers(-50, 50, size).tolist()
    return values


BUILDERS: dict[str, Callable[[int, int], tuple[str, Body]]] = {
    "attention": attention_worst_case,
    "softmax": softmax_worst_case,
    "log-likelihood": likelihood_worst_case,
    "sample": sample_worst_case,
    "multi-head-attention": multi_head_worst_case,
    "positional-encoding": positional_worst_case,
    "layer-norm": layer_norm_worst_case,
    "feed-forward": feed_forward_worst_case,
    "transformer-block": transformer_block_worst_case,
}

SCHEMAS: dict[str, type[RequestSchema]] = {
    "/v1/attention": AttentionRequestSchema,
    "/v1/softmax": SoftmaxRequestSchema,
    "/v1/log-likelihood": LikelihoodRequestSchema,
    "/v1/sample": SampleRequestSchema,
    "/v1/multi-head-attention": MultiHeadRequestSchema,
    "/v1/positional-encoding": PositionalEncodingRequestSchema,
    "/v1/layer-norm": LayerNormRequestSchema,
    "/v1/feed-forward": FeedForwardRequestSchema,
    "/v1/transformer-block": TransformerBlockRequestSchema,
}


def worst_case_requests() -> dict[str, tuple[str, Body]]:
    """Endpoint name → (path, body) of its most expensive request accepted under the default limits."""
    return {name: build(0, 1) for name, build in BUILDERS.items()}


def typed_request(path: str, body: Body) -> Any:
    """The typed request the /v1 codec makes of ``body`` (inside an app context, as a view would)."""
    return SCHEMAS[path]().load(body)


@dataclass(frozen=True)
class WorstCaseRow:
    name: str
    cpu_seconds: float  # the kernel's run, the fastest of the repeats
    compute: int  # Work.compute of the request
    estimated_cpu_seconds: float


def measure(*, repeats: int = 3, shrink: int = 1) -> list[WorstCaseRow]:
    """Each worst case's run, in CPU seconds (``time.process_time``, the fastest of ``repeats``).

    ``shrink`` > 1 times bodies that many times smaller in their frontier dimension instead (the smoke run).
    """
    rows = []
    with _DEFAULT_APP.test_request_context():
        for name, build in BUILDERS.items():
            path, body = build(0, shrink)
            request = typed_request(path, body)
            work = request.work()
            times = []
            for _ in range(repeats):
                start = time.process_time()
                request.run()
                times.append(time.process_time() - start)
            rows.append(WorstCaseRow(name, min(times), work.compute, work.estimated_cpu_seconds))
    return rows


def table(rows: list[WorstCaseRow]) -> str:
    lines = [
        "| endpoint | CPU seconds (kernel) | of the 2 s target | Work.compute | estimated_cpu_seconds |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.name} | {row.cpu_seconds:.2f} | {row.cpu_seconds / TARGET_CPU_SECONDS:.0%} "
            f"| {row.compute:,} | {row.estimated_cpu_seconds:.2f} |"
        )
    return "\n".join(lines)


def main(*, smoke: bool = False) -> int:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        rows = measure(repeats=1, shrink=64) if smoke else measure()
    scope = "bodies cut to 1/64 (smoke: not the figures)" if smoke else "the full bodies"
    print(f"Worst case per endpoint, {scope}; load average {load:.1f} at the end:\n")
    print(table(rows))
    return 0
