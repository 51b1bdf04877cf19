"""Traffic to 127.0.0.1 only, bounded in count and time: sequential latency, and throughput under load."""

from __future__ import annotations

import http.client
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HEADERS = {"Content-Type": "application/json"}


class Client:
    """One keep-alive connection to 127.0.0.1 (http.client re-opens it when the server closes it)."""

    def __init__(self, port: int) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def post(self, path: str, body: bytes) -> int:
        """Send ``body`` and read the whole answer; returns its size, raises unless it is a 200."""
        self.connection.request("POST", path, body=body, headers=HEADERS)
        response = self.connection.getresponse()
        answer = response.read()
        if response.status != 200:
            raise RuntimeError(f"POST {path} answered {response.status}: {answer[:300]!r}")
        return len(answer)

    def close(self) -> None:
        self.connection.close()


@dataclass(frozen=True)
class Throughput:
    per_second: float
    tool: str


def throughput(port: int, path: str, body: bytes, *, connections: int, seconds: float) -> Throughput:
    """Requests per second with ``connections`` concurrent clients: wrk when installed, else threads."""
    if shutil.which("wrk"):
        return Throughput(_wrk(port, path, body, connections=connections, seconds=seconds), "wrk")
    return Throughput(_threads(port, path, body, connections=connections, seconds=seconds), "threads")


_WRK_SCRIPT = """
local file = io.open("{body}", "rb")
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/json"

-- The first answer that is not a success, to stderr: wrk itself only counts them.
local reported = false
response = function(status, headers, body)
  if status >= 300 and not reported then
    reported = true
    io.stderr:write(status .. " " .. string.sub(body, 1, 400) .. "\\n")
  end
end
"""


def _wrk(port: int, path: str, body: bytes, *, connections: int, seconds: float) -> float:
    with tempfile.TemporaryDirectory() as folder:
        body_file = Path(folder, "body.json")
        body_file.write_bytes(body)
        script = Path(folder, "post.lua")
        script.write_text(_WRK_SCRIPT.format(body=body_file))
        # One wrk thread: wrk shares the machine's cores with the server it measures.
        command = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "30s"]
        command += ["-s", str(script), f"http://127.0.0.1:{port}{path}"]
        report = subprocess.run(command, capture_output=True, text=True, check=True, timeout=seconds + 60)
    out = report.stdout
    failed = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    if failed or (errors and any(int(count) for count in re.findall(r"\d+", errors.group(1)))):
        first = f"the first of them: {report.stderr.strip()}\n" if report.stderr.strip() else ""
        raise RuntimeError(f"wrk saw failures on {path}:\n{out}{first}")
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not match:
        raise RuntimeError(f"cannot read wrk's report:\n{out}")
    return float(match.group(1))


def _threads(port: int, path: str, body: bytes, *, connections: int, seconds: float) -> float:
    deadline = time.monotonic() + seconds
    counts = [0] * connections
    failures: list[str] = []

    def client(slot: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            while time.monotonic() < deadline:
                connection.request("POST", path, body=body, headers=HEADERS)
                response = connection.getresponse()
                response.read()
                if response.status != 200:
                    failures.append(str(response.status))
                    return
                counts[slot] += 1
        finally:
            connection.close()

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(slot,)) for slot in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"POST {path} failed under load: {failures[:3]}")
    return sum(counts) / (time.monotonic() - start)
