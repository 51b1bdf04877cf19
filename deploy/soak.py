"""Soak test: 64 keep-alive connections against gunicorn on 127.0.0.1 for SOAK_SECONDS (default 60).

Starts gunicorn with gunicorn_settings.py (settings from the environment, worker recycling off so a
leak cannot hide behind it), sends a fixed mix of all three endpoints at small and medium sizes plus
malformed and oversized bodies, and reports requests, p50/p99 latency, statuses and each worker's
memory. Fails on any 5xx, any unexpected status, any dropped connection, a worker that died, or a
worker whose resident memory keeps growing.

    make soak                 # 60 s
    SOAK_SECONDS=10 make soak # the short form CI runs
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

from deploy.launch import MIB, Server, start

MAX_BODY_BYTES = 1 * MIB  # lowered for the soak so oversized bodies stay cheap to send
MAX_WORK_ELEMENTS = 16_777_216  # the production default, set for the soak so "oversized-work" stays a 413


@dataclass(frozen=True)
class Kind:
    """One kind of request in the mix: its body, how often it is sent, the status it must get."""

    name: str
    path: str
    body: bytes
    weight: int
    expect: int


@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=dict)
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def request_mix(rng: random.Random) -> list[Kind]:
    """The requests, built once with a fixed seed so every run sends the same bytes."""

    def matrix(rows: int, cols: int) -> list[list[float]]:
        return [[round(rng.gauss(0, 1), 4) for _ in range(cols)] for _ in range(rows)]

    n, d, vocab, length = 64, 32, 256, 64
    seed = {"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}
    medium_attention = {"query": matrix(n, d), "key": matrix(n, d), "value": matrix(n, d), "causal": True}
    medium_softmax = {"logits": matrix(8, 512), "temperature": 0.7, "top_p": 0.9}
    targets = [rng.randrange(vocab) for _ in range(length)]
    medium_likelihood = {"logits": matrix(length, vocab), "targets": targets, "shift": True}
    small_likelihood = {"logits": [[2.0, 0.5, -1.0], [0.1, 1.5, 0.3], [0.0, 0.2, 2.2]], "targets": [0, 1, 2]}
    side = math.isqrt(MAX_WORK_ELEMENTS) + 1  # n = m = side: one score matrix over the limit
    too_much_work = {"query": [[1.0]] * side, "key": [[1.0]] * side, "value": [[1.0]] * side}
    oversized = b'{"logits": [' + b"0.125," * (MAX_BODY_BYTES // 6 + 1000) + b"0.5]}"
    return [
        Kind("attention-small", "/v1/attention", _json(seed), 20, 200),
        Kind("attention-medium", "/v1/attention", _json(medium_attention), 8, 200),
        Kind("softmax-small", "/v1/softmax", _json({"logits": [2.0, 1.0, 0.1], "temperature": 0.5}), 20, 200),
        Kind("softmax-medium", "/v1/softmax", _json(medium_softmax), 8, 200),
        Kind("likelihood-small", "/v1/log-likelihood", _json(small_likelihood), 15, 200),
        Kind("likelihood-medium", "/v1/log-likelihood", _json(medium_likelihood), 8, 200),
        Kind("malformed-json", "/v1/softmax", b'{"logits": [1.0, 2.0', 6, 400),
        Kind("invalid-field", "/v1/attention", _json({"query": "x", "key": [[1]], "value": [[1]]}), 5, 422),
        Kind("oversized-body", "/v1/softmax", oversized, 2, 413),
        Kind("oversized-work", "/v1/attention", _json(too_much_work), 3, 413),
    ]


def keeps_growing(samples: list[int]) -> bool:
    """True when each third of the samples peaks higher than the one before, by more than noise."""
    if len(samples) < 6:
        return False
    third = len(samples) // 3
    first, middle, last = max(samples[:third]), max(samples[third : 2 * third]), max(samples[2 * third :])
    return first < middle < last and last - first > max(8 * MIB, first // 10)


async def client_loop(
    client: httpx.AsyncClient, kinds: list[Kind], rng: random.Random, deadline: float, tally: Tally
) -> None:
    weights = [kind.weight for kind in kinds]
    while time.monotonic() < deadline:
        kind = rng.choices(kinds, weights)[0]
        started = time.perf_counter()
        try:
            response = await client.post(
                kind.path, content=kind.body, headers={"Content-Type": "application/json"}
            )
        except httpx.TransportError as error:
            tally.dropped.append(f"{kind.name}: {type(error).__name__}: {error}")
            continue
        tally.latencies.setdefault(kind.name, []).append(time.perf_counter() - started)
        tally.statuses[(kind.name, response.status_code)] += 1
        problem = response.headers.get("content-type", "").startswith("application/problem+json")
        if response.status_code != kind.expect or (response.status_code >= 400 and not problem):
            if len(tally.unexpected) < 20:
                tally.unexpected.append(f"{kind.name}: {response.status_code} {response.text[:200]}")
            else:
                tally.unexpected.append(kind.name)


async def watch_memory(server: Server, deadline: float, memory: dict[int, list[int]]) -> None:
    while time.monotonic() < deadline:
        for pid, reading in server.memory().items():
            memory.setdefault(pid, []).append(reading.rss)
        await asyncio.sleep(0.5)


async def soak(
    server: Server, seconds: float, connections: int, *, base_url: str | None = None
) -> tuple[Tally, dict[int, list[int]]]:
    """The mix from ``connections`` keep-alive clients to ``base_url`` (the server itself, or a proxy)."""
    kinds = request_mix(random.Random(20240601))
    tally = Tally()
    memory: dict[int, list[int]] = {}
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(base_url=base_url or server.base_url, limits=limits, timeout=60.0) as client:
        deadline = time.monotonic() + seconds
        loops = [client_loop(client, kinds, random.Random(n), deadline, tally) for n in range(connections)]
        await asyncio.gather(watch_memory(server, deadline, memory), *loops)
    return tally, memory


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def soak_settings() -> dict[str, str]:
    """The environment the soak runs gunicorn with: the mix's limits, recycling off (it would hide a leak)."""
    return {
        "MAX_BODY_BYTES": str(MAX_BODY_BYTES),
        "MAX_WORK_ELEMENTS": str(MAX_WORK_ELEMENTS),  # whatever the shell says: the mix expects this limit
        "WEB_CONCURRENCY": os.environ.get("WEB_CONCURRENCY", "2"),
        "GUNICORN_MAX_REQUESTS": "0",
    }


def main() -> int:
    seconds = float(os.environ.get("SOAK_SECONDS", "60"))
    connections = int(os.environ.get("SOAK_CONNECTIONS", "64"))
    # the JSON access log (one line per request) is not needed here: reading it would load the client's core
    server = start(env=soak_settings(), keep_stdout=False)
    try:
        workers_before = server.worker_pids()
        print(
            f"soak: {connections} connections for {seconds:.0f} s against 127.0.0.1:{server.port} "
            f"({len(workers_before)} workers)"
        )
        tally, memory = asyncio.run(soak(server, seconds, connections))
        workers_after = server.worker_pids()
    finally:
        exit_code = server.terminate(timeout=60)

    failures: list[str] = []
    all_latencies = [value for values in tally.latencies.values() for value in values]
    total = sum(tally.statuses.values())
    p50, p99 = percentile(all_latencies, 0.5) * 1000, percentile(all_latencies, 0.99) * 1000
    print(f"requests: {total} ({total / seconds:.0f}/s)   p50 {p50:.1f} ms   p99 {p99:.1f} ms")
    for name, values in sorted(tally.latencies.items()):
        statuses = {status: count for (kind, status), count in tally.statuses.items() if kind == name}
        print(
            f"  {name:18} {len(values):7}  p50 {percentile(values, 0.5) * 1000:7.1f} ms  "
            f"p99 {percentile(values, 0.99) * 1000:7.1f} ms  statuses {statuses}"
        )
    server_errors = sum(count for (_, status), count in tally.statuses.items() if status >= 500)
    print(
        f"errors: {server_errors} server errors, {len(tally.unexpected)} unexpected answers, "
        f"{len(tally.dropped)} dropped connections"
    )
    if server_errors:
        failures.append(f"{server_errors} responses were 5xx")
    if tally.unexpected:
        failures.append("unexpected answers: " + "; ".join(tally.unexpected[:5]))
    if tally.dropped:
        failures.append("dropped connections: " + "; ".join(tally.dropped[:5]))
    if workers_after != workers_before:
        failures.append(
            f"workers changed during the soak: {sorted(workers_before)} -> {sorted(workers_after)}"
        )
    for pid, samples in sorted(memory.items()):
        steady = samples[len(samples) // 5 :]  # the first fifth is warm-up: imports, caches, arenas
        print(
            f"worker {pid}: RSS {samples[0] / MIB:.1f} MiB at start, {steady[0] / MIB:.1f} after warm-up, "
            f"{samples[-1] / MIB:.1f} at the end ({len(samples)} samples)"
        )
        if keeps_growing(steady):
            failures.append(
                f"worker {pid}'s RSS keeps growing: {steady[0] / MIB:.1f} -> {steady[-1] / MIB:.1f} MiB"
            )
    if exit_code != 0:
        failures.append(f"gunicorn exited {exit_code} on SIGTERM")
    if failures:
        print("SOAK FAILED\n" + server.log())
        for failure in failures:
            print(f"  - {failure}")
        return 1
    print("SOAK OK")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
