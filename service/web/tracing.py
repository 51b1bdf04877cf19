"""OpenTelemetry traces: one server span per request, continuing the caller's W3C ``traceparent``, with
child spans for a model request's decode, queue, compute and encode steps.

Off unless configured, and configured only by the standard ``OTEL_*`` variables (docs/operations.md,
"Tracing"): ``OTEL_TRACES_EXPORTER`` names the exporters (``otlp``, ``console``, ``none``); unset, tracing is
on only when an OTLP endpoint is given (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``…_TRACES_ENDPOINT``);
``OTEL_SDK_DISABLED=true`` turns it off. The SDK itself reads the rest: ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` (the resource), ``OTEL_TRACES_SAMPLER`` and ``…_ARG`` (the sampler),
``OTEL_EXPORTER_OTLP_*`` (the exporter), ``OTEL_BSP_*`` (the batching), ``OTEL_PROPAGATORS``. A variable set
to an empty value counts as unset, as the OpenTelemetry specification says (:func:`forget_empty_variables`).

When off, nothing of OpenTelemetry is imported and no step is installed, so it costs nothing. When on, the
SDK's provider is made on the first request of each process, so a gunicorn worker gets its own after the fork
(its batching thread and exporter connection included) whether or not the app was loaded before it.

The child spans are written when the request is answered, from the moments service.web.inference stamped at
the web layer's seams, so the codecs carry no tracing code either.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from flask import Flask, Response, g
from flask.wrappers import Request

from service.identity import API_VERSION
from service.web.hooks import RequestGlobals, request_steps
from service.web.inference import Series, Timeline, on_steps

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

EXPORTERS = ("otlp", "console")
SERVICE_NAME = "attention-service"  # when neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES names one
PROVIDER_CONFIG = "TRACER_PROVIDER"  # a test's own provider (e.g. with an in-memory exporter)
_EXTENSION = "attention_tracing"
_SPAN = "trace_span"
_CLOCK = "trace_clock"


def forget_empty_variables(environ: MutableMapping[str, str]) -> None:
    """Remove the ``OTEL_*`` variables whose value is empty (or only spaces) from ``environ``.

    The OpenTelemetry specification reads an empty variable as unset, but the Python SDK takes some as values:
    an empty ``OTEL_TRACES_SAMPLER`` is a sampler it does not know (a warning), an empty
    ``OTEL_BSP_SCHEDULE_DELAY`` a number it cannot read (a ``ValueError``). docker-compose.yml passes the
    tracing variables through as ``${NAME:-}``, empty unless the operator sets them. Only spaces count as
    empty too: no variable of the SDK's means anything by them.
    """
    empty = [name for name, value in environ.items() if name.startswith("OTEL_") and not value.strip()]
    for name in empty:
        del environ[name]


def exporters_from(environ: Mapping[str, str]) -> list[str]:
    """The exporters the ``OTEL_*`` variables ask for: empty when tracing is off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = [name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "").split(",")]
    names = [name for name in names if name]
    if not names:
        endpoint = _first_set(environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
        names = ["otlp"] if endpoint else []
    if "none" in names:
        return []
    unknown = sorted(set(names) - set(EXPORTERS))
    if unknown:
        raise ValueError(
            f"OTEL_TRACES_EXPORTER names {', '.join(unknown)}; this service exports traces with "
            f"{', '.join(EXPORTERS)} or none."
        )
    protocol = _first_set(environ, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
    if "otlp" in names and protocol not in ("", "http/protobuf"):
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL is {protocol!r}; this service exports http/protobuf.")
    return list(dict.fromkeys(names))


def _first_set(environ: Mapping[str, str], *names: str) -> str:
    """The value of the first of ``names`` set to more than spaces, else "" (empty counts as unset)."""
    return next((value for name in names if (value := environ.get(name, "").strip())), "")


def one_line(span: Any) -> str:
    """The console exporter's format: one JSON line per span, like the access log's lines."""
    return str(span.to_json(indent=None)) + "\n"


def make_provider(exporters: list[str]) -> TracerProvider:
    """The SDK's provider with the resource, sampler and exporters the ``OTEL_*`` variables configure."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )

    resource = Resource.create({"service.version": API_VERSION})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    provider = TracerProvider(resource=resource)  # the sampler from OTEL_TRACES_SAMPLER
    for name in exporters:
        if name == "console":
            # Each span as it ends: the console is for looking at one request at a time.
            console = ConsoleSpanExporter(out=sys.stdout, formatter=one_line)
            provider.add_span_processor(SimpleSpanProcessor(console))
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


class Tracing:
    """The app's tracer, made once per process (a gunicorn worker makes its own after the fork)."""

    def __init__(self, exporters: list[str], provider: TracerProvider | None = None) -> None:
        self.exporters = exporters
        self._given = provider
        self._tracer: Tracer | None = None
        self._pid = 0

    def tracer(self) -> Tracer:
        pid = os.getpid()
        if self._tracer is None or self._pid != pid:
            provider = self._given if self._given is not None else make_provider(self.exporters)
            self._tracer = provider.get_tracer("service.web.tracing", API_VERSION)
            self._pid = pid
        return self._tracer


def install_tracing(app: Flask, environ: Mapping[str, str] | None = None) -> Tracing | None:
    """Trace every request when the ``OTEL_*`` variables (or a test's provider) ask for it; else nothing."""
    provider = app.config.get(PROVIDER_CONFIG)
    exporters = exporters_from(os.environ if environ is None else environ)  # reads empty as unset itself
    if provider is None and not exporters:
        return None
    if environ is None:
        # Only when tracing is on (off, the SDK is never imported), and before it reads any of them: it is
        # imported on the first request.
        forget_empty_variables(os.environ)
    check_propagators()
    tracing = Tracing(exporters, provider)
    app.extensions[_EXTENSION] = tracing
    steps = request_steps(app)
    steps.add_before(_start)
    steps.add_after(_status)
    app.teardown_request(_end)
    on_steps(_step_spans)
    return tracing


def check_propagators() -> None:
    """Load the propagators ``OTEL_PROPAGATORS`` names (OpenTelemetry's API loads them when
    ``opentelemetry.propagate`` is first imported), so that a name it does not know fails at start-up: on the
    first request, the import failed again on every request, probes included (each a 500)."""
    try:
        import opentelemetry.propagate  # noqa: F401
    except Exception as error:  # the API raises ValueError for an unknown name, or what a propagator raised
        raise ValueError(
            f"OTEL_PROPAGATORS is {os.environ.get('OTEL_PROPAGATORS', '')!r}: {error} (the default is "
            "tracecontext,baggage)"
        ) from None


def _tracing() -> Tracing | None:
    from flask import current_app

    tracing: Tracing | None = current_app.extensions.get(_EXTENSION)
    return tracing


def _start(request: Request, g: RequestGlobals) -> None:
    from opentelemetry.propagate import extract
    from opentelemetry.trace import SpanKind

    tracing = _tracing()
    if tracing is None:
        return
    rule = request.url_rule
    route = rule.rule if rule is not None else None
    attributes: dict[str, Any] = {
        "http.request.method": request.method if request.method in _METHODS else "_OTHER",
        "url.path": request.path,
        "url.scheme": request.scheme,
    }
    if route is not None:
        attributes["http.route"] = route
    request_id = getattr(g, "request_id", None)
    if request_id is not None:
        attributes["attention.request_id"] = request_id
    # OpenTelemetry's HTTP conventions: "{method} {route}", or the method alone, "HTTP" for one it does not
    # know (the client's own token made a span name per made-up method).
    method = attributes["http.request.method"]
    name = "HTTP" if method == "_OTHER" else method
    if route is not None:
        name = f"{name} {route}"
    span = tracing.tracer().start_span(
        name, context=extract(request.headers), kind=SpanKind.SERVER, attributes=attributes
    )
    setattr(g, _SPAN, span)
    setattr(g, _CLOCK, (time.time_ns(), time.perf_counter()))
    if span.is_recording():
        g.trace_id = format(span.get_span_context().trace_id, "032x")


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT"})


def _status(request: Request, g: RequestGlobals, response: Response) -> Response:
    span: Span | None = getattr(g, _SPAN, None)
    if span is not None and span.is_recording():
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("http.response.status_code", response.status_code)
        if response.status_code >= 500:
            span.set_status(Status(StatusCode.ERROR))
    return response


def _end(error: BaseException | None) -> None:
    span: Span | None = g.pop(_SPAN, None)
    if span is not None:
        if error is not None and span.is_recording():
            span.record_exception(error)
        span.end()


def _step_spans(
    g: RequestGlobals, series: Series, timeline: Timeline | None, done: list[tuple[str, float, float]]
) -> None:
    """The server span's children: one span per completed step, at the moments the timeline stamped."""
    span: Span | None = getattr(g, _SPAN, None)
    if span is None or not span.is_recording():
        return
    from opentelemetry.trace import set_span_in_context

    tracing = _tracing()
    if tracing is None:
        return
    span.set_attribute("attention.model", series.model)
    span.set_attribute("attention.protocol", series.protocol)
    clock: tuple[int, float] = getattr(g, _CLOCK)
    epoch_ns, perf = clock

    def at(moment: float) -> int:
        return epoch_ns + round((moment - perf) * 1e9)

    parent = set_span_in_context(span)
    tracer = tracing.tracer()
    for step, start, end in done:
        attributes: dict[str, Any] = {"attention.model": series.model, "attention.protocol": series.protocol}
        work = timeline.work if timeline is not None else None
        if step == "compute" and work is not None:
            attributes |= {
                "attention.work.elements": work.elements,
                "attention.work.answer_values": work.answer_elements,
                "attention.work.compute_units": work.compute,
            }
        child = tracer.start_span(step, context=parent, start_time=at(start), attributes=attributes)
        child.end(end_time=at(end))
