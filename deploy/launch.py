"""Start the server on 127.0.0.1 as operators do (``python -m service serve``): how every tool here does it.

The soak, the attack suite, the benchmarks and the gunicorn tests all start their servers through
:func:`start` (or :func:`serving`), so they run the set-up operators run and agree on what "ready" means:

- **The port**: this process binds a socket to ``127.0.0.1:0`` and hands the bound descriptor to gunicorn
  (``--bind fd://N``), so the port is known before gunicorn starts and nobody can take it in between (a
  bind-and-release port picker races with every other server starting on a shared machine).
- **Ready**: ``GET /readyz`` answers 200 and the master has as many workers as the settings asked for.
- **Workers and memory**: the master's children, their resident and peak resident memory (``/proc``).
- **Metrics**: ``PROMETHEUS_MULTIPROC_DIR`` is a fresh temporary directory (removed at the end) unless the
  caller names one; a directory left in the caller's environment is never shared by accident.
- **Attack tests**: an optional address-space limit (``setrlimit(RLIMIT_AS)``) for the master, which every
  worker inherits, so each process of the server is held to it.
- **Stop**: SIGTERM, a bounded wait, then SIGKILL.

This module lives in ``deploy/`` (operator and CI tooling, not copied into the image), not in ``service/``:
the product's part is the command it runs (service/server/cli.py); the free port, the readiness rule, the
memory readings and the address-space limit are the tools'.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

ROOT = Path(__file__).resolve().parent.parent
SETTINGS_MODULE = "service.server.gunicorn_settings"
SERVICE_APP = "service:create_app()"
START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0
MIB = 1024 * 1024
SERVING = re.compile(r"Worker serving \(pid: (\d+)\)")


@dataclass(frozen=True)
class Memory:
    """One process's resident memory now and its peak (since it started or since the last reset), bytes."""

    rss: int
    peak: int


def worker_pids(master: int) -> set[int]:
    """The master's live child processes (its workers), from ``/proc``."""
    children = Path(f"/proc/{master}/task/{master}/children")
    try:
        return {int(pid) for pid in children.read_text().split()}
    except OSError:  # the master has exited
        return set()


def memory_of(pid: int) -> Memory | None:
    """``VmRSS`` and ``VmHWM`` of ``pid``; None once it has exited."""
    values: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    except OSError:
        return None
    if len(values) < 2:
        return None  # a zombie has no memory lines
    return Memory(rss=values["VmRSS"], peak=values["VmHWM"])


# The gunicorn settings a caller may want to report or size its load by.
REPORTED_SETTINGS = ("workers", "threads", "worker_class", "keepalive", "timeout")


@dataclass(frozen=True)
class TlsFiles:
    """A certificate and its private key (PEM files), for a server that serves TLS itself."""

    certificate: Path
    key: Path

    def server_arguments(self) -> str:
        """gunicorn's options for them, as an operator gives them (in ``GUNICORN_CMD_ARGS``)."""
        return f"--certfile {shlex.quote(str(self.certificate))} --keyfile {shlex.quote(str(self.key))}"

    def client_context(self) -> ssl.SSLContext:
        """What a client trusts the server with: this certificate (self-signed) as its authority."""
        return ssl.create_default_context(cafile=str(self.certificate))


# A certificate for loopback tests and the attack suite only (deploy/test-tls/README.md): self-signed, for
# localhost and 127.0.0.1, valid until 2126, its private key published beside it.
TEST_TLS = TlsFiles(*(ROOT / "deploy" / "test-tls" / name for name in ("certificate.pem", "key.pem")))


@dataclass(frozen=True)
class Config:
    """What the gunicorn settings module resolves to in a given environment."""

    workers: int
    threads: int
    worker_class: str
    keepalive: int
    timeout: int

    def describe(self) -> str:
        return (
            f"{self.workers} {self.worker_class} workers x {self.threads} threads, "
            f"keepalive {self.keepalive} s, timeout {self.timeout} s"
        )


def resolve_config(env: Mapping[str, str]) -> Config:
    """The settings module's values in ``env`` (its worker count follows CPU affinity and the cgroup quota).

    The module is run in a child process with the server's environment, because running it here would set
    this process's BLAS and metrics variables and patch gunicorn.
    """
    script = (
        "import json, runpy\n"
        f"config = runpy.run_module({SETTINGS_MODULE!r})\n"
        f"print(json.dumps({{name: config[name] for name in {REPORTED_SETTINGS!r}}}))"
    )
    answer = subprocess.run(
        [sys.executable, "-c", script], env=dict(env), cwd=ROOT, capture_output=True, text=True, check=True
    )
    return Config(**json.loads(answer.stdout))


class Server:
    """One running gunicorn master and its workers; stdout and stderr are kept line by line."""

    def __init__(
        self,
        process: subprocess.Popen[str],
        port: int,
        config: Config,
        metrics_dir: Path,
        *,
        own_metrics_dir: bool,
        tls: TlsFiles | None = None,
    ) -> None:
        self.process = process
        self.port = port
        self.base_url = f"{'http' if tls is None else 'https'}://127.0.0.1:{port}"
        # what a client trusts the server's certificate with, when it serves TLS
        self.tls_context = None if tls is None else tls.client_context()
        self.config = config  # what the settings chose in the server's environment
        self.metrics_dir = metrics_dir
        self._own_metrics_dir = own_metrics_dir
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._readers = [
            threading.Thread(target=_collect, args=(stream, lines), daemon=True)
            for stream, lines in ((process.stdout, self.stdout), (process.stderr, self.stderr))
            if stream is not None
        ]
        for reader in self._readers:
            reader.start()

    @property
    def verify(self) -> ssl.SSLContext | bool:
        """httpx's ``verify`` for this server."""
        return True if self.tls_context is None else self.tls_context

    @property
    def pid(self) -> int:
        return self.process.pid

    def url(self, path: str) -> str:
        return self.base_url + path

    def worker_pids(self) -> set[int]:
        return worker_pids(self.process.pid)

    def memory(self) -> dict[int, Memory]:
        """Each live worker's resident and peak resident memory."""
        readings = {pid: memory_of(pid) for pid in self.worker_pids()}
        return {pid: reading for pid, reading in readings.items() if reading is not None}

    def reset_peak_memory(self) -> dict[int, Memory]:
        """Make each worker's peak its current RSS (Linux ``clear_refs``); returns the readings after."""
        for pid in self.worker_pids():
            with contextlib.suppress(OSError):  # it exited meanwhile: memory() will not list it
                Path(f"/proc/{pid}/clear_refs").write_text("5")
        return self.memory()

    def serving_pids(self) -> set[int]:
        """The workers that have built the app and accept connections (gunicorn_settings.post_worker_init)."""
        return {int(found) for line in list(self.stderr) for found in SERVING.findall(line)}

    def ready(self) -> bool:
        """The one readiness rule: /readyz answers 200 and every configured worker is running and serving.

        A worker counts only once it has built the app: until then it does not accept, so a test that needs
        both workers would have its connections all taken by the other one."""
        try:
            answered = httpx.get(self.url("/readyz"), timeout=2, verify=self.verify).status_code == 200
        except httpx.TransportError:
            return False
        workers = self.worker_pids()
        return answered and len(workers) == self.config.workers and workers <= self.serving_pids()

    def wait_for(
        self, condition: Callable[[], bool], what: str, timeout: float = START_TIMEOUT_SECONDS
    ) -> None:
        """Poll ``condition`` until it holds; fails with the log if gunicorn exits or time runs out."""
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"gunicorn exited ({self.process.returncode}) while waiting for {what}:\n{self.log()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}:\n{self.log()}")
            time.sleep(0.05)

    def samples(self, prefix: str) -> dict[str, float]:
        """The samples on /metrics whose names start with ``prefix``, by the name and labels the exposition
        writes (``name{label="value"}``, labels in name order)."""
        found = {}
        for line in httpx.get(self.url("/metrics"), timeout=10, verify=self.verify).text.splitlines():
            if line.startswith(prefix):
                series, _, value = line.rpartition(" ")
                found[series] = float(value)
        return found

    def sample(self, series: str) -> float:
        """One sample's value on /metrics (:meth:`samples`' key), or 0 while the series does not exist."""
        return self.samples(series).get(series, 0.0)

    def stderr_contains(self, text: str) -> bool:
        return any(text in line for line in list(self.stderr))

    def log(self, lines: int = 40) -> str:
        return "\n".join(["--- stderr", *self.stderr[-lines:], "--- stdout", *self.stdout[-lines // 2 :]])

    def terminate(self, timeout: float = STOP_TIMEOUT_SECONDS) -> int:
        """SIGTERM the master (a graceful stop) and return its exit status; SIGKILL after ``timeout``."""
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise
        finally:
            for reader in self._readers:
                reader.join(timeout=5)
            if self._own_metrics_dir:
                shutil.rmtree(self.metrics_dir, ignore_errors=True)


_LIMIT_THEN_EXEC = """
import os, resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
os.execv(sys.argv[2], sys.argv[2:])
"""


def _collect(stream: IO[str], lines: list[str]) -> None:
    with stream:  # closed once gunicorn has exited and the pipe is drained
        for line in stream:
            lines.append(line.rstrip("\n"))


def start(
    app: str = SERVICE_APP,
    env: Mapping[str, str] | None = None,
    *,
    workers: int | None = None,
    address_space_bytes: int | None = None,
    keep_stdout: bool = True,
    timeout: float = START_TIMEOUT_SECONDS,
    tls: TlsFiles | None = None,
) -> Server:
    """Start ``python -m service serve`` serving ``app`` and wait until it is ready.

    ``env`` overrides this process's environment (the settings, e.g. ``{"API_KEYS": "k"}``); ``workers``
    sets ``WEB_CONCURRENCY``, else the settings module chooses. ``address_space_bytes`` limits every
    process of the server. ``keep_stdout=False`` discards the access log (a benchmark should not pay for
    reading it). ``tls``: the server serves HTTPS with them, set as an operator sets them.
    """
    environment = {key: value for key, value in os.environ.items() if key != "PROMETHEUS_MULTIPROC_DIR"}
    environment.update(env or {})
    if tls is not None:
        given = environment.get("GUNICORN_CMD_ARGS", "")
        environment["GUNICORN_CMD_ARGS"] = f"{given} {tls.server_arguments()}".strip()
    if environment.get("GUNICORN_LOG_LEVEL", "info").lower() not in ("debug", "info"):
        environment["GUNICORN_LOG_LEVEL"] = "info"  # readiness reads each worker's "Worker serving" line
    if workers is not None:
        environment["WEB_CONCURRENCY"] = str(workers)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environment.get("PYTHONPATH")]))
    own_metrics_dir = "PROMETHEUS_MULTIPROC_DIR" not in environment
    if own_metrics_dir:
        environment["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="attention-metrics-")
    metrics_dir = Path(environment["PROMETHEUS_MULTIPROC_DIR"])
    config = resolve_config(environment)

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))  # gunicorn calls listen() with its configured backlog
        port: int = listener.getsockname()[1]
        environment.update({"HOST": "127.0.0.1", "PORT": str(port)})  # what the app's config reads
        command = [sys.executable, "-m", "service", "serve", "--bind", f"fd://{listener.fileno()}"]
        command += ["--app", app]
        if address_space_bytes is not None:
            # A small Python sets the limit and then becomes gunicorn (exec), so the master and every
            # worker it forks are held to it from their first allocation. (preexec_fn is not safe here:
            # callers have threads running.)
            command = [sys.executable, "-c", _LIMIT_THEN_EXEC, str(address_space_bytes), *command]
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if keep_stdout else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            pass_fds=(listener.fileno(),),
        )
    finally:
        listener.close()  # gunicorn holds its own copy of the descriptor
    server = Server(process, port, config, metrics_dir, own_metrics_dir=own_metrics_dir, tls=tls)
    try:
        server.wait_for(server.ready, f"/readyz and {config.workers} workers serving", timeout)
    except BaseException:
        server.terminate()
        raise
    return server


@contextmanager
def serving(
    app: str = SERVICE_APP,
    env: Mapping[str, str] | None = None,
    *,
    workers: int | None = None,
    address_space_bytes: int | None = None,
    keep_stdout: bool = True,
    tls: TlsFiles | None = None,
) -> Iterator[Server]:
    """:func:`start` as a context manager that stops the server on the way out."""
    server = start(
        app, env, workers=workers, address_space_bytes=address_space_bytes, keep_stdout=keep_stdout, tls=tls
    )
    try:
        yield server
    finally:
        server.terminate()
