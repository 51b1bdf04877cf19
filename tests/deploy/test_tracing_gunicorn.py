"""OTEL_TRACES_EXPORTER=console under gunicorn: every worker traces (its provider made after the fork), and
a request carrying a traceparent prints a server span of that trace with its decode, compute and encode
children."""

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
        env={"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "attention-under-test"}, workers=2
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


def test_every_worker_traces(server: Server) -> None:
    pids: set[int] = set()
    for attempt in range(40):  # fresh connections until both workers have answered one (bounded)
        trace_id = f"{attempt + 1:032x}"
        headers = {"traceparent": f"00-{trace_id}-{PARENT_ID}-01", "Connection": "close"}
        body = {"inputs": [{"name": "logits", "shape": [1, 2], "datatype": "FP64", "data": [0, 1]}]}
        answer = httpx.post(server.url("/v2/models/softmax/infer"), json=body, headers=headers, timeout=30)
        assert answer.status_code == 200
        server.wait_for(lambda trace_id=trace_id: len(_spans(server, trace_id)) >= 5, "five spans")
        logged = [line for line in _lines(server) if line.get("trace_id") == trace_id]
        pids |= {line["pid"] for line in logged}
        if len(pids) == 2:
            break
    assert pids == server.worker_pids()
