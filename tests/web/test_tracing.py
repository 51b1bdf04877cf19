"""Traces with the SDK's in-memory exporter: one server span per request continuing the caller's
traceparent, with decode, queue, compute and encode children, the request id, and the trace id logged."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from flask import Flask
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from service import create_app
from service.web.tracing import exporters_from, forget_empty_variables

ROOT = Path(__file__).resolve().parents[2]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def traced(exporter: InMemorySpanExporter) -> Iterator[Flask]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield create_app({"TESTING": True, "TRACER_PROVIDER": provider})
    provider.shutdown()


def _by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    named = {span.name: span for span in spans}
    assert len(named) == len(spans), [span.name for span in spans]
    return named


def _log_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith('{"time"')]


@pytest.mark.parametrize(
    ("environ", "exporters"),
    [
        ({}, []),
        ({"OTEL_TRACES_EXPORTER": "none"}, []),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ["otlp", "console"]),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, []),
        ({"OTEL_TRACES_EXPORTER": "console,none"}, []),
        # Empty, or only spaces, is unset (docker-compose.yml passes them through empty).
        ({"OTEL_TRACES_EXPORTER": "", "OTEL_EXPORTER_OTLP_ENDPOINT": " "}, []),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": " ", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": " "}, ["otlp"]),
    ],
)
def test_the_standard_variables_choose_the_exporters(environ: dict[str, str], exporters: list[str]) -> None:
    assert exporters_from(environ) == exporters


@pytest.mark.parametrize(
    "environ",
    [
        {"OTEL_TRACES_EXPORTER": "jaeger"},
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
        # otlp chosen by its endpoint alone: gRPC was let through, and spans went as http/protobuf to it
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
    ],
)
def test_an_exporter_this_service_lacks_fails_loudly(environ: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="OTEL_"):
        exporters_from(environ)


def test_off_when_not_configured(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    app = create_app({"TESTING": True})
    assert "attention_tracing" not in app.extensions
    response = app.test_client().post(
        "/v1/softmax", json={"logits": [[1.0, 2.0]]}, headers={"traceparent": TRACEPARENT}
    )
    assert response.status_code == 200
    (line,) = _log_lines(capsys.readouterr().out)
    assert "trace_id" not in line


def test_a_v1_request_continues_the_callers_trace(
    traced: Flask, exporter: InMemorySpanExporter, capsys: pytest.CaptureFixture[str]
) -> None:
    headers = {"traceparent": TRACEPARENT, "X-Request-ID": "trace-me-1"}
    response = traced.test_client().post("/v1/softmax", json={"logits": [[1.0, 2.0, 3.0]]}, headers=headers)
    assert response.status_code == 200
    spans = _by_name(exporter.get_finished_spans())
    assert set(spans) == {"POST /v1/softmax", "decode", "queue", "compute", "encode"}
    server = spans["POST /v1/softmax"]
    assert server.kind is SpanKind.SERVER
    assert format(server.context.trace_id, "032x") == TRACE_ID
    assert server.parent is not None
    assert format(server.parent.span_id, "016x") == PARENT_ID
    assert server.parent.is_remote
    attributes = dict(server.attributes or {})
    assert attributes["attention.request_id"] == "trace-me-1"
    assert attributes["http.route"] == "/v1/softmax"
    assert attributes["http.response.status_code"] == 200
    assert attributes["attention.model"] == "softmax"
    assert attributes["attention.protocol"] == "v1"
    steps = [spans[name] for name in ("decode", "queue", "compute", "encode")]
    for child in steps:
        assert child.parent is not None
        assert child.parent.span_id == server.context.span_id
        assert child.context.trace_id == server.context.trace_id
        assert server.start_time <= child.start_time <= child.end_time <= server.end_time
    # The steps follow one another.
    for earlier, later in itertools.pairwise(steps):
        assert earlier.end_time <= later.start_time + 1000  # within a microsecond of rounding
    compute = dict(spans["compute"].attributes or {})
    # one row of 3 logits: 3 probabilities, each computed as one element; answer: 3 + entropy + argmax
    assert compute["attention.model"] == "softmax"
    assert compute["attention.work.elements"] == 3
    assert compute["attention.work.answer_values"] == 5
    (line,) = _log_lines(capsys.readouterr().out)
    assert line["trace_id"] == TRACE_ID
    assert line["request_id"] == "trace-me-1"


def test_a_v2_infer_and_a_refusal(traced: Flask, exporter: InMemorySpanExporter) -> None:
    client = traced.test_client()
    body = {"inputs": [{"name": "logits", "shape": [1, 2], "datatype": "FP64", "data": [0, 1]}]}
    assert client.post("/v2/models/softmax/infer", json=body).status_code == 200
    spans = _by_name(exporter.get_finished_spans())
    assert set(spans) == {"POST /v2/models/softmax/infer", "decode", "queue", "compute", "encode"}
    server = spans["POST /v2/models/softmax/infer"]
    assert server.parent is None  # no traceparent: a new trace
    assert dict(server.attributes or {})["attention.protocol"] == "v2"
    exporter.clear()

    assert client.post("/v1/softmax", json={"logits": "x"}).status_code == 422
    (refused,) = exporter.get_finished_spans()  # decoding failed: no step completed
    assert refused.name == "POST /v1/softmax"
    assert dict(refused.attributes or {})["http.response.status_code"] == 422
    exporter.clear()

    assert client.get("/nowhere").status_code == 404
    (unmatched,) = exporter.get_finished_spans()
    assert unmatched.name == "GET"
    exporter.clear()

    # A method OpenTelemetry's conventions do not know is "HTTP" (it was the client's token: a span name per
    # made-up method)
    for method in ("XYZZY1", "GETX"):
        assert client.open("/nowhere", method=method).status_code in (404, 405)
    assert [span.name for span in exporter.get_finished_spans()] == ["HTTP", "HTTP"]


def test_an_unsampled_caller_records_nothing(
    traced: Flask, exporter: InMemorySpanExporter, capsys: pytest.CaptureFixture[str]
) -> None:
    unsampled = f"00-{TRACE_ID}-{PARENT_ID}-00"
    response = traced.test_client().post(
        "/v1/softmax", json={"logits": [[1.0, 2.0]]}, headers={"traceparent": unsampled}
    )
    assert response.status_code == 200
    assert exporter.get_finished_spans() == ()
    (line,) = _log_lines(capsys.readouterr().out)
    assert "trace_id" not in line


def test_an_empty_variable_counts_as_unset() -> None:
    """docker-compose.yml passes the tracing variables through, empty unless set. The OpenTelemetry
    specification reads an empty variable as unset; the Python SDK warns of an unknown sampler for an empty
    ``OTEL_TRACES_SAMPLER``. A fresh interpreter, as the SDK reads some of them when first imported."""
    script = (
        "from service import create_app\n"
        "app = create_app({'TESTING': True})\n"
        "answer = app.test_client().post('/v1/softmax', json={'logits': [[1.0, 2.0]]},"
        f" headers={{'traceparent': {TRACEPARENT!r}}})\n"
        "assert answer.status_code == 200, answer.status_code\n"
    )
    empty = ("OTEL_PROPAGATORS", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SERVICE_NAME")
    otel = dict.fromkeys(empty, "") | {"OTEL_BSP_SCHEDULE_DELAY": " ", "OTEL_TRACES_EXPORTER": "console"}
    done = _fresh_interpreter(script, otel)
    assert done.returncode == 0, done.stderr
    assert "sampler" not in done.stderr.lower(), done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    spans = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"name"')]
    server = next(span for span in spans if span["name"] == "POST /v1/softmax")
    assert server["context"]["trace_id"] == f"0x{TRACE_ID}"  # the caller's trace, continued
    assert server["parent_id"] == f"0x{PARENT_ID}"
    assert server["resource"]["attributes"]["service.name"] == "attention-service"


def test_the_variables_compose_passes_through_empty_leave_tracing_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    environment = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["api"]["environment"]
    passed = [name for name in environment if name.startswith("OTEL_")]
    assert len(passed) >= 5
    for name in passed:
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", " ")
    app = create_app({"TESTING": True})
    assert "attention_tracing" not in app.extensions
    assert os.environ["OTEL_TRACES_EXPORTER"] == ""  # off, the environment is left as it was


def test_forgetting_empty_variables_removes_only_empty_otel_ones() -> None:
    environ = {"OTEL_A": "", "OTEL_B": "  ", "OTEL_C": "x", "OTHER": "", "PATH": "/bin"}
    forget_empty_variables(environ)
    assert environ == {"OTEL_C": "x", "OTHER": "", "PATH": "/bin"}


def test_a_propagator_opentelemetry_lacks_fails_at_start_up() -> None:
    """An unknown OTEL_PROPAGATORS name failed on the first request's import of the API, then on every
    request: /livez and every answer a 500, from a server that had started. A fresh interpreter, as the API
    reads the variable when first imported."""
    script = "from service import create_app\ncreate_app({'TESTING': True})\n"
    done = _fresh_interpreter(
        script, {"OTEL_TRACES_EXPORTER": "console", "OTEL_PROPAGATORS": "tracecontext,bogus"}
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: OTEL_PROPAGATORS is 'tracecontext,bogus'"), done.stderr
    assert "bogus" in last


def _fresh_interpreter(script: str, otel: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``script`` in a new Python, with this environment but only ``otel`` of its OTEL_ variables."""
    environ = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", script],
        env=environ | otel,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
