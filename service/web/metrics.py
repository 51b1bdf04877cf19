"""Prometheus metrics, correct under several gunicorn workers, with a fixed set of series.

With ``PROMETHEUS_MULTIPROC_DIR`` set (gunicorn_settings.py sets and empties it at start) every worker
writes its samples to files there and ``/metrics`` adds them up across workers; without it (tests,
``flask run``) the metrics live in this process's default registry.

Every label takes its value from a finite set, whatever the client sends (docs/operations.md lists them):
``endpoint`` is the matched route template or ``<unmatched>``, ``method`` one of the methods the service
routes or ``other``, ``status`` a registered HTTP status code or ``other``. A client cannot create series.

The files of workers that have exited (recycled by ``max_requests``, killed by the timeout) are merged
into one archive file per metric type when a new worker starts, so the directory holds the live workers'
files plus the archive however often workers restart, and the totals keep the dead workers' counts.
"""

from __future__ import annotations

import fcntl
import operator
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from http import HTTPStatus
from pathlib import Path
from typing import Any, Generic, TypeVar

from flask import Flask, Response, request
from flask.wrappers import Request
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    multiprocess,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.samples import Sample

from service.web.body import bytes_read
from service.web.connection import off_the_loop
from service.web.hooks import RequestGlobals, request_steps
from service.web.request_clock import seconds_since_start

disable_created_metrics()  # type: ignore[no-untyped-call]  # the *_created series double the output and multiprocess mode has none

UNMATCHED = "<unmatched>"  # 404s: one label value for every unknown path
# The methods the service routes (OPTIONS for CORS preflights, HEAD with every GET); anything else a client
# makes up (gunicorn accepts any 3 to 20 character token) is counted as "other".
ROUTED_METHODS = frozenset({"GET", "HEAD", "POST", "OPTIONS"})
OTHER = "other"
_STATUS_LABELS = {status.value: str(status.value) for status in HTTPStatus}

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
    "Bytes of request body the service read (not the length a client claimed), by route template.",
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

# The files whose samples can be folded across processes into one, and how: counters and histograms add up,
# a "max" gauge (the last success's time) keeps the largest. Live gauges are dropped instead (child_exit).
_FOLDED_TYPES: dict[str, Callable[[float, float], float]] = {
    "counter": operator.add,
    "histogram": operator.add,
    "summary": operator.add,
    "gauge_max": max,
}
_WORKER_FILE = re.compile(r"(?P<type>[a-z]+(?:_max)?)_(?P<pid>\d+)\.db")
_LOCK_FILE = ".lock"  # not *.db: the collector globs *.db


def route_template() -> str:
    """The matched route (``/v1/attention``), or one shared value for paths that match nothing."""
    return route_of(request)


def route_of(current_request: Request) -> str:
    """:func:`route_template` for a request already in hand."""
    rule = current_request.url_rule
    return rule.rule if rule is not None else UNMATCHED


def method_label(method: str) -> str:
    """The request method if the service routes it, else ``other``."""
    return method if method in ROUTED_METHODS else OTHER


def status_label(status: int) -> str:
    """The status code if it is a registered HTTP status, else ``other``."""
    return _STATUS_LABELS.get(status, OTHER)


def record_work(elements: int) -> None:
    """Count the work size of a computation that is about to run."""
    endpoint = route_template()
    child = _WORK_CHILDREN.get(endpoint)
    if child is None:
        child = _WORK_CHILDREN[endpoint] = WORK_ELEMENTS.labels(endpoint)
    child.observe(elements)


def _multiprocess_dir() -> Path | None:
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    return Path(directory) if directory else None


@contextmanager
def _directory_lock(directory: Path, *, exclusive: bool) -> Iterator[None]:
    """Scrapes share the lock; archiving takes it alone, so a scrape never sees a file counted twice."""
    with open(directory / _LOCK_FILE, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _process_is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: not ours to archive
    return True


def archive_dead_workers(directory: Path) -> int:
    """Fold the counter/histogram (and max gauge) files of exited processes into ``<type>_archive.db``;
    return the number of files merged.

    A process still alive, or a zombie not yet reaped, keeps its files; the next worker to start merges them.
    Live gauges of dead workers are gunicorn_settings.py's ``child_exit`` to drop (``mark_process_dead``).
    """
    merged = 0
    with _directory_lock(directory, exclusive=True):
        for metric_type, fold in _FOLDED_TYPES.items():
            dead = []
            for path in directory.glob(f"{metric_type}_*.db"):
                match = _WORKER_FILE.fullmatch(path.name)
                if match and match["type"] == metric_type and not _process_is_alive(int(match["pid"])):
                    dead.append(path)
            if not dead:
                continue
            archive = directory / f"{metric_type}_archive.db"
            totals: dict[str, float] = {}
            for path in [archive, *dead] if archive.exists() else dead:
                for key, value, _timestamp, _position in MmapedDict.read_all_values_from_file(str(path)):  # type: ignore[no-untyped-call]
                    totals[key] = fold(totals[key], value) if key in totals else value
            partial = directory / f"{metric_type}_archive.partial"  # not *.db until it is complete
            partial.unlink(missing_ok=True)
            archive_file = MmapedDict(str(partial))  # type: ignore[no-untyped-call]
            try:
                for key, value in totals.items():
                    archive_file.write_value(key, value, 0.0)  # type: ignore[no-untyped-call]
            finally:
                archive_file.close()  # type: ignore[no-untyped-call]
            os.replace(partial, archive)
            for path in dead:
                path.unlink()
            merged += len(dead)
    return merged


def exposition(accept: str | None) -> Response:
    """The metrics of every worker in the format the scraper asked for (text by default).

    Under gunicorn the text is built on a thread (every route × method × status the service has answered
    makes about 1 MB, 0.3 s of Python), and scrapes that arrive while one is built share the next one (a
    burst costs two builds at most, and none gets a text older than itself): 8 at once had
    held the worker's loop, and its ``/livez``, 2.3 s.
    """
    encoder, content_type = choose_encoder(accept or "")
    directory = _multiprocess_dir()
    if directory is None:
        return Response(encoder(REGISTRY), content_type=content_type)

    def build() -> bytes:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        with _directory_lock(directory, exclusive=False):
            return encoder(registry)

    return Response(_SHARED_SCRAPES.get(content_type, build), content_type=content_type)


T = TypeVar("T")


class SharedBuilds(Generic[T]):
    """One build at a time per key (a format, a family prefix), shared by the reads that arrived while it was
    under way.

    A read takes the result of the first build that *started* after it arrived, so it never gets samples
    older than itself; the build runs off the worker's loop (:func:`~service.web.connection.off_the_loop`).
    The lock is made on first use, in the worker (gevent's, once gevent has patched ``threading``).
    """

    def __init__(self) -> None:
        self._lock: threading.Lock | None = None
        self._started = 0  # builds started so far
        self._latest: dict[str, tuple[int, T]] = {}  # key → (number of the build, its result)

    def arrival(self) -> int:
        """The mark of a scrape arriving now: the builds started so far."""
        return self._started

    def get(self, key: str, build: Callable[[], T], *, arrived_after: int | None = None) -> T:
        """The result for ``key``: from a build started after ``arrived_after`` (:meth:`arrival`; by
        default, now), waited for or run (``build``)."""
        if arrived_after is None:
            arrived_after = self._started
        if self._lock is None:
            self._lock = threading.Lock()
        with self._lock:
            latest = self._latest.get(key)
            if latest is not None and latest[0] > arrived_after:
                return latest[1]
            self._started += 1
            number = self._started
            text = off_the_loop(build)
            self._latest[key] = (number, text)
            return text


_SHARED_SCRAPES: SharedBuilds[bytes] = SharedBuilds()
_SHARED_SAMPLES: SharedBuilds[tuple[Sample, ...]] = SharedBuilds()


def collect_samples(prefix: str) -> list[Sample]:
    """The samples whose names start with ``prefix``, as /metrics shows them now: under gunicorn, every
    worker's, added up by prometheus_client's multiprocess collector (the one /metrics uses).

    Under gunicorn that reads every sample of every worker, as a scrape does (all the HTTP series too: a few
    thousand label sets cost seconds), so it is built off the worker's loop and shared by the reads that
    arrive while one is built, as /metrics is (:class:`SharedBuilds`): after a sweep of every route, 16
    ``/v2/models/stats`` at once had held the loop for their builds in a row, ``/livez`` 2.6 s.
    """
    directory = _multiprocess_dir()
    if directory is None:
        return _starting_with(prefix, REGISTRY.collect())

    def build() -> tuple[Sample, ...]:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        with _directory_lock(directory, exclusive=False):
            return tuple(_starting_with(prefix, registry.collect()))

    return list(_SHARED_SAMPLES.get(prefix, build))


def _starting_with(prefix: str, families: Iterable[Metric]) -> list[Sample]:
    return [sample for family in families for sample in family.samples if sample.name.startswith(prefix)]


def install_metrics(app: Flask) -> None:
    """Count and time every response, and size its request body by the bytes read."""
    directory = _multiprocess_dir()
    if directory is not None and directory.is_dir():
        archive_dead_workers(directory)  # this process is a new worker: fold in the ones it replaces

    request_steps(app).add_after(_observe)


def _observe(request: Request, g: RequestGlobals, response: Response) -> Response:
    count_answer(
        route_of(request), request.method, response.status_code, seconds_since_start(g), bytes_read(request)
    )
    return response


def count_answer(endpoint: str, method: str, status: int, seconds: float | None, body_bytes: int) -> None:
    """Count one answer of the app's (after each request). ``endpoint`` is a route template or UNMATCHED."""
    latency, requests, body = _children((endpoint, method_label(method), status_label(status)))
    if seconds is not None:
        latency.observe(seconds)
    requests.inc()
    body.observe(body_bytes)


# The labelled children, looked up once per label set: ``labels()`` validates and hashes its arguments and
# takes a lock on every call. The label sets are finite (see above), so the cache is too.
_CHILDREN: dict[tuple[str, str, str], tuple[Any, Any, Any]] = {}
_WORK_CHILDREN: dict[str, Any] = {}  # by route template (a finite set too)


def _children(labels: tuple[str, str, str]) -> tuple[Any, Any, Any]:
    children = _CHILDREN.get(labels)
    if children is None:
        children = (LATENCY.labels(*labels), REQUESTS.labels(*labels), BODY_BYTES.labels(labels[0]))
        _CHILDREN[labels] = children
    return children
