"""OTEL_TRACES_EXPORTER=console under gunicorn: every worker traces (its provider made after the fork), and
a request carrying a traceparent prints a server span of that trace with its decode, compute and encode
children.

Each worker here holds one connection at a time (``GUNICORN_WORKER_CONNECTIONS=1``): a worker with a
connection open stops accepting, so a second connection opened while the first is held goes to the other
worker. Sending fresh connections until both had answered was left to the kernel's choice of worker, which
gave all 40 to one worker in a CI run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from deploy.launch import Server, start

pytestmark = pytest.mark.gunicorn

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    running = start(
        env={
            "OTEL_TRACES_EXPORTER": "console",
            "OTEL_SERVICE_NAME": "attention-under-test",
            "GUNICORN_WORKER_CONNECTIONS": "1",
        },
        workers=2,
    )
    yield running
    assert running.terminate() == 0, running.log()


def _lines(server: Server) -> list[dict[str, Any]]:
    return [json.loads(line) for line in list(server.stdout) if line.startswith("{")]


def _spans(server: Server, trace_id: str) -> list[dict[str, Any]]:
    return [line for line in _lines(server) if line.get("context", {}).get("trace_id") == f"0x{trace_id}"]


def test_a_traced_request_prints_its_server_span_and_steps(server: Server) -> None:
    headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "X-Request-ID": "console-1"}
    v1 = httpx.post(server.url("/v1/softmax"), json={"logits": [[1.0, 2.0]]}, headers=headers, timeout=30)
    assert v1.status_code == 200
    server.wait_for(lambda: len(_spans(server, TRACE_ID)) >= 5, "five spans of the trace")
    spans = {span["name"]: span for span in _spans(server, TRACE_ID)}
    assert set(spans) == {"POST /v1/softmax", "decode", "queue", "compute", "encode"}
    root = spans["POST /v1/softmax"]
    assert root["kind"] == "SpanKind.SERVER"
    assert root["parent_id"] == f"0x{PARENT_ID}"
    assert root["attributes"]["attention.request_id"] == "console-1"
    assert root["resource"]["attributes"]["service.name"] == "attention-under-test"
    for step in ("decode", "queue", "compute", "encode"):
        assert spans[step]["parent_id"] == root["context"]["span_id"], step
    assert spans["compute"]["attributes"]["attention.model"] == "softmax"
    (logged,) = [line for line in _lines(server) if line.get("request_id") == "console-1"]
    assert logged["trace_id"] == TRACE_ID


def _traced_softmax(client: httpx.Client, server: Server, trace_id: str) -> int:
    """Sends a traced /v2 softmax on ``client``'s connection; the pid of the worker that logged it."""
    headers = {"traceparent": f"00-{trace_id}-{PARENT_ID}-01"}
    body = {"inputs": [{"name": "logits", "shape": [1, 2], "datatype": "FP64", "data": [0, 1]}]}
    answer = client.post(server.url("/v2/models/softmax/infer"), json=body, headers=headers)
    assert answer.status_code == 200
    server.wait_for(lambda: len(_spans(server, trace_id)) >= 5, "five spans")
    (logged,) = [line for line in _lines(server) if line.get("trace_id") == trace_id]
    return int(logged["pid"])


def test_every_worker_traces(server: Server) -> None:
    # The first connection stays open (kept alive) while the second is made: its worker is full, so the
    # other worker accepts the second.
    with httpx.Client(timeout=30) as held, httpx.Client(timeout=30) as other:
        first = _traced_softmax(held, server, f"{1:032x}")
        second = _traced_softmax(other, server, f"{2:032x}")
    assert {first, second} == server.worker_pids()
