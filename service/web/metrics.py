"""Prometheus metrics, correct under several gunicorn workers.

With ``PROMETHEUS_MULTIPROC_DIR`` set (gunicorn.conf.py sets and empties it at start) every worker
writes its samples to files there and ``/metrics`` adds them up across workers; without it (tests,
``flask run``) the metrics live in this process's default registry. Endpoints are labelled by their
route template, never the raw path, so a client cannot create new time series.
"""

from __future__ import annotations

import os

from flask import Flask, Response, request
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    multiprocess,
)
from prometheus_client.exposition import choose_encoder

from service.web.request_clock import request_seconds

disable_created_metrics()  # type: ignore[no-untyped-call]  # the *_created series double the output and multiprocess mode has none

UNMATCHED = "<unmatched>"  # 404s: one label value for every unknown path

REQUESTS = Counter(
    "attention_http_requests",
    "HTTP requests answered, by route template, method and status.",
    ["endpoint", "method", "status"],
)
LATENCY = Histogram(
    "attention_http_request_duration_seconds",
    "Time from the start of the request to its response, by route template, method and status.",
    ["endpoint", "method", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
BODY_BYTES = Histogram(
    "attention_http_request_body_bytes",
    "Size of request bodies (Content-Length), by route template.",
    ["endpoint"],
    buckets=tuple(float(4**k) for k in range(3, 14)),  # 64 B … 64 MiB
)
WORK_ELEMENTS = Histogram(
    "attention_work_elements",
    "Size of each accepted computation (elements of the largest array it works through, held whole or a "
    "block of rows at a time), by route template; refused work is not counted.",
    ["endpoint"],
    buckets=tuple(float(4**k) for k in range(1, 14)),  # 4 … 64 Mi elements
)


def route_template() -> str:
    """The matched route (``/v1/attention``), or one shared value for paths that match nothing."""
    return request.url_rule.rule if request.url_rule is not None else UNMATCHED


def record_work(elements: int) -> None:
    """Count the work size of a computation that is about to run."""
    WORK_ELEMENTS.labels(route_template()).observe(elements)


def exposition(accept: str | None) -> Response:
    """The metrics of every worker in the format the scraper asked for (text by default)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry = REGISTRY
    encoder, content_type = choose_encoder(accept or "")
    return Response(encoder(registry), content_type=content_type)


def install_metrics(app: Flask) -> None:
    """Count and time every response, and size its request body."""

    @app.after_request
    def _observe(response: Response) -> Response:
        endpoint = route_template()
        status = str(response.status_code)
        seconds = request_seconds()
        if seconds is not None:
            LATENCY.labels(endpoint, request.method, status).observe(seconds)
        REQUESTS.labels(endpoint, request.method, status).inc()
        BODY_BYTES.labels(endpoint).observe(request.content_length or 0)
        return response
