"""The server's gunicorn settings, each read from the environment (docs/operations.md lists them).

A gunicorn configuration module: ``attention-service serve`` (service/server/cli.py) loads it, and so does
``gunicorn --config python:service.server.gunicorn_settings 'service:create_app()'``. Importing it configures
the process that imports it, which is to become gunicorn's master: the BLAS thread count for the workers
(before NumPy is imported; ``import service`` does not import it), a metrics directory, and the writer of
gunicorn's own error answers.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import gunicorn.util

from service.server import environment as _env
from service.server.problems import write_problem
from service.server.tls import check_tls
from service.settings import SettingError
from service.web.statuses import status_phrase

# One BLAS thread per worker: the workers already use the cores, and BLAS's own threads would
# oversubscribe them. This must be set before NumPy is first imported in the master (the worker class
# imports it there), as forked workers keep the thread count OpenBLAS read when it was loaded. BLAS_THREADS,
# when given, sets all three (a whole number, at least 1: 0 or -1 let OpenBLAS use every core); when not,
# each library's own variable already set is kept, and the others are 1.
_blas_threads = _env.given("BLAS_THREADS")
if _blas_threads is not None:
    _blas_threads = str(_env.checked_whole("BLAS_THREADS", _blas_threads, least=1))
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    if _blas_threads is not None:
        os.environ[_name] = (
            _blas_threads  # OPENBLAS_NUM_THREADS=1 had kept OpenBLAS at 1 under BLAS_THREADS=2
        )
    else:
        os.environ.setdefault(_name, "1")

# An empty HOST or PORT is unset, as every variable here (compose passes unset ones empty); an IPv6 address
# is put in brackets for gunicorn.
_host = _env.bind_host("HOST", _env.given("HOST") or "127.0.0.1")
_port = _env.tcp_port("PORT", _env.given("PORT") or "8000")
bind = f"{_host}:{_port}"


def _available_cpus() -> int:
    """Cores this process may use: its CPU affinity, capped by a cgroup v2 quota (``docker run --cpus``).

    os.cpu_count() is the host's count: in a container on a 64-core host it would start 64 workers.
    """
    cpus = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota visible: the affinity stands
    return cpus


# At least 1, as --workers: 0 workers made a master that listened and never answered.
workers = _env.whole("WEB_CONCURRENCY", _available_cpus(), least=1)
if _env.given("WEB_CONCURRENCY") is None:
    # gunicorn's own config module reads it as it is imported, with int(): "" would be a traceback there
    os.environ.pop("WEB_CONCURRENCY", None)
# gevent workers: each connection is a greenlet, so idle, slowloris and slow-reading clients wait in the
# worker's event loop instead of holding the worker (with sync workers, 64 idle connections or 4 slow
# readers stalled /livez for the full timeout). Chosen by measurement against sync (alone and behind nginx),
# gthread and a uvicorn worker: docs/performance.md, "Worker models" (python -m bench.workers). The subclass
# adds admission at the connection level (head deadlines, room kept for new connections, no 100 Continue for
# a refused body: service/server/worker.py); the kernels run on a thread (service/web/admission.py).
# cli.py loads it before anything starts, to refuse one that cannot be loaded.
worker_class = _env.given("GUNICORN_WORKER_CLASS") or "service.server.worker.AdmittingGeventWorker"
# Connections each gevent worker holds at once (gunicorn's default); past it, new ones wait in the backlog.
# At least 1: with 0 the worker accepted nothing, and the server listened without ever answering.
worker_connections = _env.whole("GUNICORN_WORKER_CONNECTIONS", 1000, least=1)
# Threads only matter to the gthread worker ("sync" with more than one thread selects it).
threads = _env.whole("GUNICORN_THREADS", 1, least=1)
timeout = _env.whole("GUNICORN_TIMEOUT", 30, least=0)  # gunicorn: 0 turns the timeout off
# Seconds a gevent worker waits for the next request on a kept-alive connection (the first request's head
# has HEADER_TIMEOUT_SECONDS: service/server/worker.py). Longer than the idle timeout of the clients and
# proxies in front (httpx 5 s, nginx's upstream keepalive 60 s, common cloud load balancers 60 s), so the
# client always closes an idle
# connection first: at 5 s, a worker busy with other requests could close one just as the client sent a
# request on it, and the soak saw that request dropped. An idle connection costs a greenlet, of
# worker_connections per worker.
keepalive = _env.whole("GUNICORN_KEEPALIVE", 75, least=0)
# On SIGTERM, requests in flight get this long to finish before their worker is killed.
graceful_timeout = _env.whole("GUNICORN_GRACEFUL_TIMEOUT", 20, least=0)
# Recycle each worker after this many requests (0 = never), jittered so they do not all restart at once.
max_requests = _env.whole("GUNICORN_MAX_REQUESTS", 10000, least=0)
max_requests_jitter = _env.whole("GUNICORN_MAX_REQUESTS_JITTER", 1000, least=0)
# The heartbeat file lives in memory: a disk-backed /tmp can stall it under I/O load (and the
# container's root filesystem is read-only).
worker_tmp_dir = _env.given("GUNICORN_WORKER_TMP_DIR") or ("/dev/shm" if Path("/dev/shm").is_dir() else None)
if worker_tmp_dir is not None and not Path(worker_tmp_dir).is_dir():
    # gunicorn finds out in each worker: a traceback, "Worker failed to boot"
    raise SettingError(f"GUNICORN_WORKER_TMP_DIR must be a directory, got {worker_tmp_dir!r}")
# The app writes one JSON line per request itself (service/web/access_log.py, with the request id and
# route); gunicorn's own access log would only duplicate it.
accesslog = None
errorlog = "-"
loglevel = (_env.given("GUNICORN_LOG_LEVEL") or "info").lower()
if loglevel not in _env.LOG_LEVELS:  # gunicorn would log at info instead, saying nothing
    raise SettingError(f"GUNICORN_LOG_LEVEL must be one of {', '.join(_env.LOG_LEVELS)}, got {loglevel!r}")
# No request header sets the WSGI SCRIPT_NAME or PATH_INFO (gunicorn's default trusts them from any client of
# forwarded_allow_ips, 127.0.0.1 by default): the service is not mounted under a prefix, and a SCRIPT_NAME
# header that the path did not start with was a 500 for any local client. An operator who mounts it under a
# prefix sets SCRIPT_NAME in the environment, which gunicorn reads as before.
forwarder_headers = ""
# gunicorn 24+'s runtime control socket sits at one path per user, so two servers on a machine would
# fight over it; nothing here uses it.
control_socket_disable = True

# Prometheus multiprocess mode: every worker writes its samples under this directory and /metrics adds
# them up. It must be in the environment before a worker imports prometheus_client, i.e. now.
# Made last, once every setting above has passed (and removed at exit if a later check fails).
_given_metrics_dir = _env.given("PROMETHEUS_MULTIPROC_DIR")
if _given_metrics_dir is not None:
    try:
        Path(_given_metrics_dir).mkdir(parents=True, exist_ok=True)
    except OSError as _error:
        raise SettingError(
            f"PROMETHEUS_MULTIPROC_DIR must be a directory this process can make or use, got "
            f"{_given_metrics_dir!r}: {_error.strerror}"
        ) from None
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _given_metrics_dir
_created_metrics_dir = _given_metrics_dir is None
if _created_metrics_dir:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="attention-metrics-")
_metrics_dir = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
_master_pid = os.getpid()


@atexit.register
def _remove_made_metrics_dir() -> None:
    """Remove the metrics directory this config made when the process that made it exits, however it exits
    (gunicorn's ``on_exit`` runs only after a start; a setting refused before, or a port in use, left it)."""
    if _created_metrics_dir and os.getpid() == _master_pid:  # forked workers run this at their exit too
        shutil.rmtree(_metrics_dir, ignore_errors=True)


def on_starting(server: Any) -> None:
    """Check TLS in the master (``serve`` has already; this is for gunicorn's own command line), and start
    from an empty metrics directory: files left by an earlier run would be counted again."""
    try:
        check_tls(server.cfg)
    except SettingError as error:
        raise RuntimeError(str(error)) from None  # gunicorn prints it as one line and exits 1
    _metrics_dir.mkdir(parents=True, exist_ok=True)
    for stale in _metrics_dir.glob("*.db"):
        stale.unlink()


def child_exit(server: Any, worker: Any) -> None:
    """Drop a dead worker's live gauges (its counters and histograms stay in the totals)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def post_worker_init(worker: Any) -> None:
    """Say when a worker can serve: gunicorn's "Booting worker" comes before the app is imported and built,
    which can take seconds on a loaded machine, while the worker does not yet accept."""
    worker.log.info("Worker serving (pid: %s)", worker.pid)


def on_exit(server: Any) -> None:
    """Remove the metrics directory this config made for itself (a given one is left for the operator)."""
    if _created_metrics_dir:
        shutil.rmtree(_metrics_dir, ignore_errors=True)


def _write_problem(sock: Any, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's own errors (malformed HTTP, a worker timing out) as problem+json instead of HTML.

    Like the app's answers they carry a request id (also in the body and in an access-log line on stdout,
    so no request goes unlogged) and, when every origin is allowed, the CORS headers a browser needs to
    read them; with a list of origins the unparsed request's Origin is unknown, so none is sent.
    """
    # gunicorn passes "Bad Request" as the reason of its 501 and 500 too: the status's own phrase instead,
    # in RFC 9110's words whatever the Python (3.11 calls 414 "Request-URI Too Long").
    with contextlib.suppress(ValueError):
        reason = status_phrase(status_int)
    write_problem(functools.partial(gunicorn.util.write_nonblock, sock), status_int, reason, mesg)


# Workers answer errors they catch before the app runs through gunicorn.util.write_error (HTML);
# replacing it here, in the master, covers every worker forked from it.
gunicorn.util.write_error = _write_problem
