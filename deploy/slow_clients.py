"""Slow clients against a server on 127.0.0.1, while probes check that the service still answers in time.

The attackers, each bounded in count and time:

- **idle**: connections that are opened and never send a byte;
- **slowloris**: connections that send a request head one header line every few seconds, never finishing it;
- **slow readers**: clients that ask for a large answer (a 512 × 512 attention with its weights, about 6 MB)
  with a small receive buffer, and then read it 1 KiB a second. The server may cut them short once they
  fall behind ``ANSWER_MIN_BYTES_PER_SECOND`` (about 12 s in): that is its right, as closing the others is.

While they are held open, a probe asks ``GET /livez`` (bound 1 s) and a well-behaved client sends the
worked example ``POST /v1/attention`` (bound 2 s), each on a fresh connection, every ``interval`` seconds.
A probe slower than its bound, refused or wrong is a failure.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field

LIVEZ_BOUND_SECONDS = 1.0
SEED_BOUND_SECONDS = 2.0
SEED_BODY = json.dumps({"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}).encode()
SEED_WEIGHTS = (0.3302384506733431, 0.6697615493266569)


def large_answer_body(n: int = 512, d: int = 8) -> bytes:
    """An attention request whose answer (the n × n weights) is about 12 n² bytes: 6 MB for n = 512."""
    rows = [[((i * 7 + j * 3) % 11) / 10 for j in range(d)] for i in range(n)]
    return json.dumps({"query": rows, "key": rows, "value": rows}).encode()


@dataclass
class Probes:
    """Every probe's latency (or error) by kind."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: {"livez": [], "seed": []})
    failures: list[str] = field(default_factory=list)
    readers_cut: int = 0  # slow readers whose answers the server cut short (ANSWER_MIN_BYTES_PER_SECOND)

    def worst(self, kind: str) -> float:
        return max(self.latencies[kind], default=float("nan"))


def _request(port: int, head: bytes, body: bytes, timeout: float) -> tuple[int, bytes]:
    """One request on a fresh connection; returns the status and body (Content-Length framing only)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head + body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed before the head")
            answer += chunk
        raw_head, _, rest = answer.partition(b"\r\n\r\n")
        status = int(raw_head.split(b" ", 2)[1])
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in raw_head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed before the end of the body")
            rest += chunk
        return status, rest


def probe_livez(port: int) -> None:
    status, body = _request(
        port, b"GET /livez HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n", b"", LIVEZ_BOUND_SECONDS * 3
    )
    if status != 200 or json.loads(body) != {"status": "ok"}:
        raise ValueError(f"/livez answered {status} {body[:100]!r}")


def probe_seed(port: int) -> None:
    head = (
        b"POST /v1/attention HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nContent-Length: " + str(len(SEED_BODY)).encode() + b"\r\n\r\n"
    )
    status, body = _request(port, head, SEED_BODY, SEED_BOUND_SECONDS * 3)
    weights = json.loads(body).get("weights") if status == 200 else None
    if weights is None or any(
        abs(a - b) > 1e-12 * abs(b) for a, b in zip(weights, SEED_WEIGHTS, strict=True)
    ):
        raise ValueError(f"the seed example answered {status} {body[:100]!r}")


class Attackers:
    """The slow clients, held open on their own threads until :meth:`stop` (or ``seconds`` run out)."""

    def __init__(self, port: int, *, idle: int, slowloris: int, slow_readers: int, seconds: float) -> None:
        self.port = port
        self.deadline = time.monotonic() + seconds
        self.stopping = threading.Event()
        self.sockets: list[socket.socket] = []
        self.read_bytes = 0
        self.readers_cut = 0  # slow readers whose answer the server cut short (reset)
        self.errors: list[str] = []
        for _ in range(idle + slowloris):
            self.sockets.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        self.slowloris = self.sockets[idle:]
        for sock in self.slowloris:
            sock.sendall(b"GET /livez HTTP/1.1\r\nHost: slowloris\r\n")
        self.threads = [threading.Thread(target=self._drip, daemon=True)]
        body = large_answer_body()
        head = (
            b"POST /v1/attention HTTP/1.1\r\nHost: reader\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
        )
        for _ in range(slow_readers):
            self.threads.append(threading.Thread(target=self._read_slowly, args=(head + body,), daemon=True))
        for thread in self.threads:
            thread.start()

    def _running(self) -> bool:
        return not self.stopping.is_set() and time.monotonic() < self.deadline

    def _drip(self) -> None:
        """One more header line on every slowloris connection every 2 s (well under gunicorn's 100 fields)."""
        line = 0
        while self._running() and line < 90:
            for sock in self.slowloris:
                with contextlib.suppress(OSError):  # the server closed it: that is its right
                    sock.sendall(f"X-Slow-{line}: {line}\r\n".encode())
            line += 1
            self.stopping.wait(2.0)

    def _read_slowly(self, request: bytes) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
        sock.settimeout(5)
        try:
            sock.connect(("127.0.0.1", self.port))
            sock.sendall(request)
            while self._running():
                chunk = sock.recv(1024)
                if not chunk:
                    return
                self.read_bytes += len(chunk)
                self.stopping.wait(1.0)
        except ConnectionResetError:
            self.readers_cut += 1  # too slow for ANSWER_MIN_BYTES_PER_SECOND: the server's right
        except OSError as error:
            self.errors.append(f"slow reader: {type(error).__name__}: {error}")
        finally:
            sock.close()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=10)
        for sock in self.sockets:
            sock.close()


def run(
    port: int,
    *,
    seconds: float = 60.0,
    idle: int = 64,
    slowloris: int = 0,
    slow_readers: int = 4,
    interval: float = 0.5,
) -> Probes:
    """Hold the attackers open and probe every ``interval`` seconds for ``seconds``; returns every probe."""
    probes = Probes()
    attackers = Attackers(
        port, idle=idle, slowloris=slowloris, slow_readers=slow_readers, seconds=seconds + 15
    )
    try:
        time.sleep(1.0)  # the slow readers' requests are in, the idle connections queued or accepted
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for kind, probe, bound in (
                ("livez", probe_livez, LIVEZ_BOUND_SECONDS),
                ("seed", probe_seed, SEED_BOUND_SECONDS),
            ):
                started = time.perf_counter()
                try:
                    probe(port)
                except (OSError, ValueError) as error:
                    probes.failures.append(f"{kind}: {type(error).__name__}: {error}")
                    probes.latencies[kind].append(time.perf_counter() - started)
                    continue
                took = time.perf_counter() - started
                probes.latencies[kind].append(took)
                if took > bound:
                    probes.failures.append(f"{kind}: {took:.2f} s (bound {bound:.0f} s)")
            time.sleep(interval)
    finally:
        attackers.stop()
    probes.failures.extend(attackers.errors)
    probes.readers_cut = attackers.readers_cut
    return probes


def main(argv: list[str] | None = None) -> int:
    """``python3 -m deploy.slow_clients --port P``: the standard library only, so any Python can run it."""
    import argparse

    parser = argparse.ArgumentParser(prog="python3 -m deploy.slow_clients", description=__doc__)
    parser.add_argument("--port", type=int, required=True, help="the server on 127.0.0.1")
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    failed = False
    for label, idle, slowloris in (("idle", 64, 0), ("slowloris", 0, 64)):
        probes = run(args.port, seconds=args.seconds, idle=idle, slowloris=slowloris)
        print(
            f"{label} x64 + 4 slow readers for {args.seconds:.0f} s: "
            f"/livez at most {probes.worst('livez'):.2f} s "
            f"(bound {LIVEZ_BOUND_SECONDS:.0f} s), the worked example at most {probes.worst('seed'):.2f} s "
            f"(bound {SEED_BOUND_SECONDS:.0f} s), {len(probes.latencies['livez'])} probes each, "
            f"{len(probes.failures)} failures {probes.failures[:3]}",
            flush=True,
        )
        failed = failed or bool(probes.failures)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
