"""Start gunicorn with the project's gunicorn.conf.py as a subprocess on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

import httpx

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_SECONDS = 60.0


def free_port() -> int:
    """A port nobody is listening on right now (the kernel picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class GunicornServer:
    """One gunicorn master with its workers; its stdout and stderr are collected line by line."""

    def __init__(self, env: Mapping[str, str] | None = None, *, workers: int = 2) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        environment = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        environment.update({"HOST": "127.0.0.1", "PORT": str(self.port), "WEB_CONCURRENCY": str(workers)})
        environment.update(env or {})
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--config", "gunicorn.conf.py", "service:create_app()"],
            cwd=ROOT,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._collect, args=(stream, lines), daemon=True)
            for stream, lines in ((self.process.stdout, self.stdout), (self.process.stderr, self.stderr))
        ]
        for reader in self._readers:
            reader.start()
        self.wait_until_ready(workers=workers)

    @staticmethod
    def _collect(stream: IO[str], lines: list[str]) -> None:
        with stream:  # closed once gunicorn has exited and the pipe is drained
            for line in stream:
                lines.append(line.rstrip("\n"))

    def url(self, path: str) -> str:
        return self.base_url + path

    def worker_pids(self) -> set[int]:
        """The master's live child processes."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return {int(pid) for pid in children.read_text().split()} if children.exists() else set()

    def wait_for(
        self, condition: Callable[[], bool], what: str, timeout: float = START_TIMEOUT_SECONDS
    ) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None:
                raise AssertionError(f"gunicorn exited while waiting for {what}:\n" + self.log())
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}:\n" + self.log())
            time.sleep(0.05)

    def wait_until_ready(self, *, workers: int) -> None:
        def ready() -> bool:
            try:
                return httpx.get(self.url("/readyz"), timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        self.wait_for(ready, "/readyz")
        self.wait_for(lambda: len(self.worker_pids()) == workers, f"{workers} workers")

    def stderr_contains(self, text: str) -> bool:
        return any(text in line for line in list(self.stderr))

    def log(self) -> str:
        return "\n".join(["--- stderr", *self.stderr[-40:], "--- stdout", *self.stdout[-20:]])

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM the master (a graceful stop) and return its exit status."""
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
