"""``python -m bench --overhead``: in-process microseconds per request, per endpoint and for the bare app.

Each endpoint's worked example (the seed requests of the README) goes to the app twice over, as does the
bare Flask app of bench/bare.py: through werkzeug's test client, and straight into ``app.wsgi_app`` with an
environ built once (the test client builds the environ, wraps the response and reads it back itself, about
150 µs of harness per request on the bench machine, the same for every row). The difference to the bare
app is what the service's layers (parsing, validation, typed requests, kernels, the response, access log,
metrics, CORS, request ids) cost per small request, without the network. Each figure is the median over
rounds of the mean time per request in a round, the rows taking turns; one command shows a regression.
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from flask import Flask
from werkzeug.test import EnvironBuilder

from bench.bare import app as bare_app
from service import create_app
from service.protocols.declarations.model import declared_models

EXAMPLES = {name: dict(model.example) for name, model in declared_models().items()}

SEEDS: dict[str, tuple[str, dict[str, Any]]] = {
    "attention (seed)": ("/v1/attention", EXAMPLES["attention"]),
    "softmax (seed)": ("/v1/softmax", EXAMPLES["softmax"]),
    "log-likelihood (seed)": ("/v1/log-likelihood", EXAMPLES["log-likelihood"]),
}


@dataclass(frozen=True)
class OverheadRow:
    name: str
    microseconds: float  # through the test client: median over rounds of the mean per request
    spread: float  # max - min of the rounds' means, in microseconds
    direct_microseconds: float  # straight into app.wsgi_app, median over rounds likewise


def _poster(app: Flask, path: str, body: bytes) -> Callable[[], None]:
    client = app.test_client()

    def post() -> None:
        # Closed as a server closes every answer: that gives back what the request held of the memory budget.
        with client.post(path, data=body, content_type="application/json") as response:
            if response.status_code != 200:
                raise RuntimeError(f"{path}: {response.status_code} {response.get_data()[:200]!r}")

    return post


def _direct_caller(app: Flask, path: str, body: bytes) -> Callable[[], None]:
    """One request straight into ``app.wsgi_app``, with the environ built once and the body rewound."""
    environ = EnvironBuilder(
        path=path, method="POST", data=body, content_type="application/json"
    ).get_environ()
    statuses: list[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> Callable[[bytes], object]:
        statuses.append(status)
        return lambda data: None  # the body is returned, never written

    def post() -> None:
        statuses.clear()
        answer = app.wsgi_app({**environ, "wsgi.input": io.BytesIO(body)}, start_response)
        try:
            b"".join(answer)
        finally:
            close = getattr(answer, "close", None)
            if close is not None:
                close()  # the access log line of a streamed answer, the request's teardown
        if not statuses or not statuses[0].startswith("200"):
            raise RuntimeError(f"{path}: {statuses}")

    return post


def measure(requests: int = 2000, rounds: int = 5) -> list[OverheadRow]:
    """Time every seed request and the bare app, both ways, taking turns round by round so drift hits all
    alike."""
    app = create_app()
    seeds = {name: (app, path, orjson.dumps(body)) for name, (path, body) in SEEDS.items()}
    seeds["bare Flask app"] = (bare_app, "/v1/attention", orjson.dumps(EXAMPLES["attention"]))
    ways = {"client": _poster, "direct": _direct_caller}
    actions = {(name, way): make(*seed) for name, seed in seeds.items() for way, make in ways.items()}
    means: dict[tuple[str, str], list[float]] = {key: [] for key in actions}
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):  # the access log's lines
        for action in actions.values():
            for _ in range(min(requests, 50)):
                action()  # warm-up: lazy imports, first-call caches
        for _ in range(rounds):
            for key, action in actions.items():
                start = time.perf_counter()
                for _ in range(requests):
                    action()
                means[key].append((time.perf_counter() - start) / requests * 1e6)
    return [
        OverheadRow(
            name,
            statistics.median(means[name, "client"]),
            max(means[name, "client"]) - min(means[name, "client"]),
            statistics.median(means[name, "direct"]),
        )
        for name in seeds
    ]


def table(rows: list[OverheadRow]) -> str:
    bare = next(row for row in rows if row.name == "bare Flask app")
    lines = [
        "| request | µs per request, test client | × bare app | spread (test client) | µs per request, "
        "direct WSGI call | × bare app |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratio = row.microseconds / bare.microseconds
        direct_ratio = row.direct_microseconds / bare.direct_microseconds
        lines.append(
            f"| {row.name} | {row.microseconds:.0f} | {ratio:.1f} | {row.spread:.0f} µs "
            f"| {row.direct_microseconds:.0f} | {direct_ratio:.1f} |"
        )
    return "\n".join(lines)


def main(*, smoke: bool = False) -> int:
    rows = measure(requests=20, rounds=1) if smoke else measure()
    print(table(rows))
    return 0
