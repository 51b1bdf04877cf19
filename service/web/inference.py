"""Per-model inference metrics: requests by outcome, values computed, and where each request's time goes.

A request to a model's route (``POST /v1/<model>``, ``POST /v2/models/<model>[/versions/<v>]/infer``) is
timed in steps at seams of the web layer, so the codecs need no code of their own for it:

- **decode**: from the view's start to :func:`~service.web.admission.run_admitted` (the typed request is
  built), less the time spent reading the body from the network (noted by
  :func:`~service.web.body.read_body`): parsing and
  loading only, so a slow client does not show as a slow decoder;
- **queue**: from there to the computation's start (admission's wait for a compute slot and memory);
- **compute**: the kernel;
- **encode**: from the kernel's end to the answer handed to the server (/v1 builds its answer's arrays on the
  compute thread right after the kernel, then writes JSON; /v2 writes its tensors). A large /v1 answer is
  written in pieces while it is sent, and that part is not counted.

Each step's histogram is observed when the step completes, whatever the request's outcome (a 504's kernel
had not completed, so it has no compute sample). The labels come from finite sets whatever the client sends:
``model`` is read from the matched route's template (a route the app registered, never the path a client
sent: an unknown model is a 404 with no route, and gets no series), ``protocol`` is ``v1`` or ``v2``, and
``outcome`` one of :data:`OUTCOMES`, from the answer's status.

The same samples feed ``/v2/models/<m>/stats`` (:func:`model_totals`), read through prometheus_client's own
multiprocess collector under gunicorn, so the two never disagree.
"""

from __future__ import annotations

import contextvars
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from flask import Flask, Response
from flask.globals import app_ctx
from flask.wrappers import Request
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.samples import Sample

from service.requests import Work
from service.web.body import BODY_READ_SECONDS
from service.web.hooks import RequestGlobals, request_steps
from service.web.metrics import collect_samples
from service.web.request_clock import seconds_since_start

PROTOCOLS = ("v1", "v2")
SUCCESS = "success"
# From the answer's status: 2xx success; 401/403 unauthorized; 408/504 timeout (a body too slow, a
# computation past its deadline); 429/503 overloaded (refused by admission); other 4xx invalid; else error.
OUTCOMES = (SUCCESS, "invalid", "unauthorized", "overloaded", "timeout", "error")
STEPS = ("decode", "queue", "compute", "encode")

_LABELS = ["model", "protocol"]
# 100 µs … 30 s: the worked example's steps take microseconds, the largest admitted computations seconds.
_SECONDS_BUCKETS = (
    0.0001,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)

REQUESTS = Counter(
    "attention_inference_requests",
    "Requests to a model's route, by model, protocol and outcome.",
    [*_LABELS, "outcome"],
)
REQUEST_SECONDS = Counter(
    "attention_inference_request_seconds",
    "Seconds from the start of each request to a model's route to its answer, by model, protocol, outcome.",
    [*_LABELS, "outcome"],
)
VALUES = Counter(
    "attention_inference_values",
    "Values (array elements) in the successful answers, by model and protocol.",
    _LABELS,
)
STEP_SECONDS = {
    step: Histogram(
        f"attention_inference_{step}_duration_seconds",
        description,
        _LABELS,
        buckets=_SECONDS_BUCKETS,
    )
    for step, description in {
        "decode": "Time decoding each request's body into its typed request (not reading it), by model and "
        "protocol.",
        "queue": "Time each computation waited for a compute slot and memory before starting, by model and "
        "protocol.",
        "compute": "Time each computation spent in its kernel, by model and protocol.",
        "encode": "Time from the kernel's end to the answer ready to send, by model and protocol.",
    }.items()
}
IN_FLIGHT = Gauge(
    "attention_inference_in_flight",
    "Requests to a model's route between their view's start and their answer, by model and protocol.",
    _LABELS,
    multiprocess_mode="livesum",
)
LAST_SUCCESS = Gauge(
    "attention_inference_last_success_timestamp_seconds",
    "Unix time of the last successful answer, by model and protocol.",
    _LABELS,
    multiprocess_mode="max",
)

_V1_RULE = re.compile(r"/v1/(?P<model>[a-z0-9][a-z0-9-]*)")
_V2_RULE = re.compile(r"/v2/models/(?P<model>[a-z0-9][a-z0-9-]*)(?:/versions/[A-Za-z0-9._-]+)?/infer")
_TIMELINE = "inference_timeline"
PREFIX = "attention_inference_"


def model_route(rule: str, method: str) -> tuple[str, str] | None:
    """``(model, protocol)`` for a route template that serves a model's inference, else None.

    Only templates the app registered reach this (``request.url_rule``), so the models are a finite set: the
    /v1 endpoints and the /v2 model table.
    """
    if method != "POST":
        return None
    if match := _V1_RULE.fullmatch(rule):
        return match["model"], "v1"
    if match := _V2_RULE.fullmatch(rule):
        return match["model"], "v2"
    return None


def outcome_of(status: int) -> str:
    """The outcome label of an answer's status (see :data:`OUTCOMES`)."""
    if status < 400:
        return SUCCESS
    if status in (401, 403):
        return "unauthorized"
    if status in (408, 504):
        return "timeout"
    if status in (429, 503):
        return "overloaded"
    # 501 and 505 refuse what the client sent (a transfer coding, an HTTP version): its fault, as a 4xx is,
    # and any client could otherwise raise the error count that alerts watch.
    return "invalid" if status < 500 or status in CLIENT_CHOICE_STATUSES else "error"


CLIENT_CHOICE_STATUSES = frozenset({501, 505})


class Series:
    """The labelled children of one model on one protocol, looked up once (``labels()`` takes a lock)."""

    def __init__(self, model: str, protocol: str) -> None:
        self.model = model
        self.protocol = protocol
        self.requests = {outcome: REQUESTS.labels(model, protocol, outcome) for outcome in OUTCOMES}
        self.seconds = {outcome: REQUEST_SECONDS.labels(model, protocol, outcome) for outcome in OUTCOMES}
        self.values = VALUES.labels(model, protocol)
        self.steps = {step: STEP_SECONDS[step].labels(model, protocol) for step in STEPS}
        self.in_flight = IN_FLIGHT.labels(model, protocol)
        self.last_success = LAST_SUCCESS.labels(model, protocol)

    def count(self, status: int, seconds: float | None) -> str:
        """Count one answer of ``status`` (and its ``seconds``, when timed) under its outcome, returned."""
        outcome = outcome_of(status)
        self.requests[outcome].inc()
        if seconds is not None:
            self.seconds[outcome].inc(seconds)
        return outcome


_SERIES: dict[tuple[str, str], Series] = {}
_ROUTES: dict[tuple[str, str], Series | None] = {}  # by (rule, method): a finite set, as the rules are


def series_of(request: Request) -> Series | None:
    """The series of the model whose route ``request`` matched, or None for any other route."""
    rule = request.url_rule
    if rule is None:
        return None
    return _series_of_route(rule.rule, request.method)


def _series_of_route(template: str, method: str) -> Series | None:
    key = (template, method)
    try:
        return _ROUTES[key]
    except KeyError:
        pass
    route = model_route(*key)
    series = None
    if route is not None:
        series = _SERIES.get(route)
        if series is None:
            series = _SERIES[route] = Series(*route)
    _ROUTES[key] = series
    return series


@dataclass(slots=True)
class Timeline:
    """One request's moments (``time.perf_counter()``), stamped at the web layer's seams.

    The compute stamps are written by the compute thread and read by the request's greenlet only after the
    computation has been handed back (or abandoned, when they may be missing).
    """

    series: Series
    started: float  # the view's start
    decoded: float | None = None  # run_admitted reached: the typed request exists
    compute_started: float | None = None
    kernel_done: float | None = None
    work: Work | None = None  # the typed request's, once decoded
    in_flight: bool = True
    token: contextvars.Token[Timeline | None] | None = None  # to reset the context variable at teardown

    def steps(self, now: float, *, succeeded: bool, body_seconds: float) -> list[tuple[str, float, float]]:
        """``(step, start, end)`` for each step that completed, in order (decode less the body's reading)."""
        done: list[tuple[str, float, float]] = []
        if self.decoded is None:
            return done
        done.append(("decode", min(self.started + body_seconds, self.decoded), self.decoded))
        if self.compute_started is None:
            return done
        done.append(("queue", self.decoded, self.compute_started))
        if self.kernel_done is None:
            return done
        done.append(("compute", self.compute_started, self.kernel_done))
        if succeeded:
            done.append(("encode", self.kernel_done, now))
        return done


# The request's timeline, for run_admitted (a context variable costs less to read than ``flask.g``); set from
# the view's start to the request's teardown, in the request's own context (a greenlet under gevent).
_CURRENT: contextvars.ContextVar[Timeline | None] = contextvars.ContextVar("inference_timeline", default=None)


def current_timeline() -> Timeline | None:
    """The timeline of the model request being served, or None (another route, or outside a request)."""
    return _CURRENT.get()


# Called with the request's globals, its series, its timeline (or None) and its steps once it is answered:
# tracing adds its child spans here.
StepsListener = Callable[[RequestGlobals, Series, Timeline | None, list[tuple[str, float, float]]], None]
_LISTENERS: list[StepsListener] = []


def on_steps(listener: StepsListener) -> None:
    """Have ``listener`` called with the completed steps of each model request (once per process)."""
    if listener not in _LISTENERS:
        _LISTENERS.append(listener)


def install_inference_metrics(app: Flask) -> None:
    """Time model requests from their view's start (so install this after every step that may refuse)."""
    steps = request_steps(app)
    steps.add_before(_start)
    steps.add_after(_observe)
    app.teardown_request(_leave)


def _start(request: Request, g: RequestGlobals) -> None:
    series = series_of(request)
    if series is None:
        return
    timeline = Timeline(series, time.perf_counter())
    timeline.token = _CURRENT.set(timeline)
    setattr(g, _TIMELINE, timeline)
    series.in_flight.inc()


def _observe(request: Request, g: RequestGlobals, response: Response) -> Response:
    timeline: Timeline | None = getattr(g, _TIMELINE, None)
    # A request refused before its view started has no timeline, but counts in its model's series.
    series = timeline.series if timeline is not None else series_of(request)
    if series is None:
        return response
    outcome = series.count(response.status_code, seconds_since_start(g))
    done: list[tuple[str, float, float]] = []
    if timeline is not None:
        done = timeline.steps(
            time.perf_counter(),
            succeeded=outcome == SUCCESS,
            body_seconds=request.environ.get(BODY_READ_SECONDS, 0.0),
        )
        for step, start, end in done:
            series.steps[step].observe(max(0.0, end - start))
        _leave_flight(timeline)
    if outcome == SUCCESS:
        if timeline is not None and timeline.work is not None:
            series.values.inc(timeline.work.answer_elements)
        series.last_success.set(time.time())
    for listener in _LISTENERS:
        listener(g, series, timeline, done)
    return response


def _leave_flight(timeline: Timeline) -> None:
    if timeline.in_flight:
        timeline.in_flight = False
        timeline.series.in_flight.dec()


def _leave(error: BaseException | None) -> None:
    """Whatever happened to the after steps, a request leaves the in-flight gauge when its context ends."""
    timeline: Timeline | None = getattr(app_ctx.g, _TIMELINE, None)
    if timeline is not None:
        _leave_flight(timeline)
        if timeline.token is not None:
            _CURRENT.reset(timeline.token)
            timeline.token = None


@dataclass(frozen=True)
class DurationTotal:
    """How many, and their seconds added up."""

    count: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class ModelTotals:
    """One model's totals over both protocols and every worker, read from the metrics' samples."""

    success: DurationTotal
    failure: DurationTotal
    steps: dict[str, DurationTotal]  # decode, queue, compute, encode
    last_success: float  # Unix time, 0 if never


def model_totals(models: Iterable[str]) -> dict[str, ModelTotals]:
    """The totals of each of ``models`` as /metrics shows them now (all workers' under gunicorn)."""
    wanted = set(models)
    counts: defaultdict[tuple[str, str], float] = defaultdict(float)
    last: defaultdict[str, float] = defaultdict(float)
    step_of = {f"attention_inference_{step}_duration_seconds": step for step in STEPS}
    for sample in collect_samples(PREFIX):
        model = sample.labels.get("model")
        if model not in wanted:
            continue
        _add(sample, model, counts, last, step_of)
    totals = {}
    for model in wanted:
        steps = {
            step: DurationTotal(int(counts[model, f"{step}_count"]), counts[model, f"{step}_sum"])
            for step in STEPS
        }
        totals[model] = ModelTotals(
            success=DurationTotal(int(counts[model, "success"]), counts[model, "success_seconds"]),
            failure=DurationTotal(int(counts[model, "failure"]), counts[model, "failure_seconds"]),
            steps=steps,
            last_success=last[model],
        )
    return totals


def _add(
    sample: Sample,
    model: str,
    counts: defaultdict[tuple[str, str], float],
    last: defaultdict[str, float],
    step_of: dict[str, str],
) -> None:
    name = sample.name
    kind = "success" if sample.labels.get("outcome") == SUCCESS else "failure"
    if name == "attention_inference_requests_total":
        counts[model, kind] += sample.value
    elif name == "attention_inference_request_seconds_total":
        counts[model, f"{kind}_seconds"] += sample.value
    elif name == "attention_inference_last_success_timestamp_seconds":
        last[model] = max(last[model], sample.value)
    else:
        base, _, suffix = name.rpartition("_")
        step = step_of.get(base)
        if step is not None and suffix in ("count", "sum"):
            counts[model, f"{step}_{suffix}"] += sample.value
