"""Run deploy/nginx.conf for real on this host (Debian's nginx), in front of servers on 127.0.0.1.

The file is the one compose's ``scale`` profile mounts; only what differs between a container network and
this host is rewritten: the address nginx listens on, the upstream servers (the replicas' loopback ports
instead of the ``api-replica`` name), and where it keeps its pid file and temporary files.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
NGINX = "/usr/sbin/nginx"


@dataclass(frozen=True)
class Proxy:
    port: int
    base_url: str
    log_dir: Path


def host_config(upstream_ports: Sequence[int], listen_port: int, prefix: Path) -> str:
    """deploy/nginx.conf with the host's listen address, upstreams and paths."""
    text = NGINX_CONF.read_text()
    servers = "\n".join(
        f"        server 127.0.0.1:{port} max_fails=3 fail_timeout=10s;" for port in upstream_ports
    )
    text, upstreams = re.subn(r"^\s*server api-replica:8000[^\n]*;$", servers, text, flags=re.MULTILINE)
    text, listens = re.subn(r"listen 8080;", f"listen 127.0.0.1:{listen_port};", text)
    if upstreams != 1 or listens != 1:
        raise RuntimeError("deploy/nginx.conf changed shape: cannot point it at this host's servers")
    text = text.replace("/tmp/", f"{prefix}/")
    text = text.replace("access_log /dev/stdout json;", f"access_log {prefix}/access.log json;")
    text = text.replace("error_log /dev/stderr warn;", f"error_log {prefix}/error.log warn;")
    return text.replace("worker_processes auto;", "worker_processes 1;\nuser root;")


def _free_port() -> int:
    # nginx cannot be handed a bound socket, so a port is picked and released; start() retries on a clash.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def nginx(upstream_ports: Sequence[int], *, attempts: int = 3) -> Iterator[Proxy]:
    """nginx with deploy/nginx.conf on a loopback port in front of ``upstream_ports``; stopped on exit."""
    if not Path(NGINX).exists():
        raise RuntimeError("nginx is not installed (apt-get install -y nginx)")
    prefix = Path(tempfile.mkdtemp(prefix="attention-nginx-"))
    process: subprocess.Popen[bytes] | None = None
    try:
        for _ in range(attempts):
            port = _free_port()
            conf = prefix / "nginx.conf"
            conf.write_text(host_config(upstream_ports, port, prefix))
            process = subprocess.Popen(
                [NGINX, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if _wait_ready(process, port):
                break
            process.kill()
            process.wait()
            process = None
        if process is None:
            raise RuntimeError("nginx did not start:\n" + (prefix / "error.log").read_text(errors="replace"))
        yield Proxy(port=port, base_url=f"http://127.0.0.1:{port}", log_dir=prefix)
    finally:
        if process is not None:
            process.send_signal(signal.SIGQUIT)  # nginx's graceful stop
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(prefix, ignore_errors=True)


def _wait_ready(process: subprocess.Popen[bytes], port: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    return False
