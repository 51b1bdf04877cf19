"""Start an app under gunicorn on a free loopback port, with the repository's gunicorn.conf.py."""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
SERVICE_APP = "service:create_app()"
BARE_APP = "bench.bare:app"
MIB = 1024 * 1024


@dataclass(frozen=True)
class Server:
    """A running gunicorn: its port and its worker processes."""

    port: int
    workers: tuple[int, ...]

    def reset_peak_memory(self) -> dict[int, int]:
        """Make each worker's peak RSS its current RSS (Linux ``clear_refs``); returns the RSS in bytes."""
        for pid in self.workers:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        return {pid: _status_bytes(pid, "VmRSS") for pid in self.workers}

    def peak_memory(self) -> dict[int, int]:
        """Each worker's peak RSS in bytes since it started or since :meth:`reset_peak_memory`."""
        return {pid: _status_bytes(pid, "VmHWM") for pid in self.workers}


def _status_bytes(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no {key}")


@contextmanager
def gunicorn(app: str, settings: Mapping[str, str], *, timeout: float = 30.0) -> Iterator[Server]:
    """Serve ``app`` on 127.0.0.1 with gunicorn.conf.py and ``settings`` (its environment variables)."""
    workers = int(settings.get("WEB_CONCURRENCY", os.cpu_count() or 1))
    env = {**os.environ, **settings, "HOST": "127.0.0.1", "PORT": "0", "PYTHONPATH": str(ROOT)}
    # A worker recycled mid-run (gunicorn's max_requests) would take its memory readings with it.
    env["GUNICORN_MAX_REQUESTS"] = "0"
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--config", "gunicorn.conf.py", app],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,  # the access log: written by both apps alike, read by no one
            stderr=log,
        )
        try:
            server = _wait_until_ready(process, log, workers, deadline=time.monotonic() + timeout)
            yield server
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_ready(
    process: subprocess.Popen[bytes], log: IO[str], workers: int, *, deadline: float
) -> Server:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"gunicorn exited with {process.returncode}:\n{log.read()}")
        log.seek(0)
        text = log.read()
        listening = re.search(r"Listening at: http://127\.0\.0\.1:(\d+)", text)
        pids = tuple(int(pid) for pid in re.findall(r"Booting worker with pid: (\d+)", text))
        if listening and len(pids) >= workers and _healthy(int(listening.group(1))):
            return Server(port=int(listening.group(1)), workers=pids[:workers])
        time.sleep(0.1)
    raise RuntimeError("gunicorn did not start in time")


def _healthy(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()
