"""``python -m bench --overhead``: in-process microseconds per request, per endpoint and for the bare app.

Each endpoint's worked example (the seed requests of the README) goes through the app's WSGI callable
with werkzeug's test client, as does the bare Flask app of bench/bare.py: the difference is what the
service's layers (parsing, validation, typed requests, kernels, the response, access log, metrics, CORS,
request ids) cost per small request, without the network. The figure is the median over rounds of the mean
time per request in a round; one command shows a regression.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from flask import Flask

from bench.bare import app as bare_app
from service import create_app
from service.api.examples import (
    ATTENTION_EXAMPLE_REQUEST,
    LIKELIHOOD_EXAMPLE_REQUEST,
    SOFTMAX_EXAMPLE_REQUEST,
)

SEEDS: dict[str, tuple[str, dict[str, Any]]] = {
    "attention (seed)": ("/v1/attention", ATTENTION_EXAMPLE_REQUEST),
    "softmax (seed)": ("/v1/softmax", SOFTMAX_EXAMPLE_REQUEST),
    "log-likelihood (seed)": ("/v1/log-likelihood", LIKELIHOOD_EXAMPLE_REQUEST),
}


@dataclass(frozen=True)
class OverheadRow:
    name: str
    microseconds: float  # median over rounds of the mean per request
    spread: float  # max - min of the rounds' means, in microseconds


def _poster(app: Flask, path: str, body: bytes) -> Callable[[], None]:
    client = app.test_client()

    def post() -> None:
        response = client.post(path, data=body, content_type="application/json")
        if response.status_code != 200:
            raise RuntimeError(f"{path}: {response.status_code} {response.get_data()[:200]!r}")

    return post


def measure(requests: int = 2000, rounds: int = 5) -> list[OverheadRow]:
    """Time every seed request and the bare app, taking turns round by round so drift hits all alike."""
    app = create_app()
    actions = {name: _poster(app, path, orjson.dumps(body)) for name, (path, body) in SEEDS.items()}
    actions["bare Flask app"] = _poster(bare_app, "/v1/attention", orjson.dumps(ATTENTION_EXAMPLE_REQUEST))
    means: dict[str, list[float]] = {name: [] for name in actions}
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):  # the access log's lines
        for action in actions.values():
            for _ in range(min(requests, 50)):
                action()  # warm-up: lazy imports, first-call caches
        for _ in range(rounds):
            for name, action in actions.items():
                start = time.perf_counter()
                for _ in range(requests):
                    action()
                means[name].append((time.perf_counter() - start) / requests * 1e6)
    return [
        OverheadRow(name, statistics.median(values), max(values) - min(values))
        for name, values in means.items()
    ]


def table(rows: list[OverheadRow]) -> str:
    bare = next(row.microseconds for row in rows if row.name == "bare Flask app")
    lines = [
        "| request | µs per request (in-process) | × bare app | spread over rounds |",
        "|---|---|---|---|",
    ]
    for row in rows:
        ratio = row.microseconds / bare
        lines.append(f"| {row.name} | {row.microseconds:.0f} | {ratio:.1f} | {row.spread:.0f} µs |")
    return "\n".join(lines)


def main(*, smoke: bool = False) -> int:
    rows = measure(requests=20, rounds=1) if smoke else measure()
    print(table(rows))
    return 0
