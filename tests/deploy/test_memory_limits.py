"""The memory limits in compose and Kubernetes are workers × (budget + a worker's base) + the master's base.

A worker may hold ``MEMORY_BUDGET_BYTES`` for one request on top of what it holds idle; the master holds the
app's imports once. The limit must cover that sum, and not exceed it by more than one rounding step (a
limit far above it only hides a leak until the node runs out). The rule is read from docs/operations.md,
where it is stated once, and its two bases are checked against a running server.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from deploy.launch import memory_of, serving
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "docs" / "operations.md"
MIB = 1024 * 1024
ROUNDING_BYTES = 128 * MIB
# "workers × (`MEMORY_BUDGET_BYTES` + 64 MiB) + 64 MiB", however it is spaced or emphasised.
RULE = re.compile(r"workers\s*×\s*\(`?MEMORY_BUDGET_BYTES`?\s*\+\s*(\d+)\s*MiB\)\s*\+\s*(\d+)\s*MiB")


def documented_bases() -> tuple[int, int]:
    """The worker's and the master's base in bytes, from the one statement of the rule in the docs."""
    statements = {
        (int(worker), int(master))
        for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
        for worker, master in RULE.findall(page.read_text(encoding="utf-8"))
    }
    assert len(statements) == 1, f"the docs state the memory rule {len(statements)} ways: {statements}"
    assert RULE.search(OPERATIONS.read_text(encoding="utf-8")), "the rule belongs in docs/operations.md"
    ((worker, master),) = statements
    return worker * MIB, master * MIB


WORKER_BASE_BYTES, MASTER_BASE_BYTES = documented_bases()
# "Tracing ... adds about 8 MiB to each worker": room each limit must leave per worker over the rule.
TRACING = re.compile(r"Tracing \(\[Tracing\]\(#tracing\)\) adds about (\d+) MiB to each worker")


def tracing_bytes() -> int:
    (per_worker,) = TRACING.findall(OPERATIONS.read_text(encoding="utf-8"))
    return int(per_worker) * MIB


def required_bytes(workers: int) -> int:
    return workers * (Settings().memory_budget_bytes + WORKER_BASE_BYTES) + MASTER_BASE_BYTES


def quantity_bytes(text: str) -> int:
    """``1g``, ``512m`` (compose) or ``1Gi``, ``512Mi`` (Kubernetes) in bytes."""
    number, unit = re.fullmatch(r"(\d+)\s*([a-zA-Z]*)", str(text)).groups()  # type: ignore[union-attr]
    scale = {"": 1, "k": 1024, "m": MIB, "g": 1024 * MIB, "ki": 1024, "mi": MIB, "gi": 1024 * MIB}
    return int(number) * scale[unit.lower()]


def compose_default(value: str) -> int:
    """``${WEB_CONCURRENCY:-2}`` -> 2."""
    match = re.fullmatch(r"\$\{[A-Z_]+:-(\d+)\}", value)
    assert match, value
    return int(match.group(1))


def compose_services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return services


@pytest.mark.parametrize("service", ["api", "api-replica"])
def test_compose_limits_cover_every_workers_budget(service: str) -> None:
    spec = compose_services()[service]
    workers = compose_default(spec["environment"]["WEB_CONCURRENCY"])
    cpus = float(spec["deploy"]["resources"]["limits"]["cpus"])
    assert workers <= cpus, f"{service}: {workers} NumPy-bound workers on {cpus} CPUs"
    limit = quantity_bytes(spec["deploy"]["resources"]["limits"]["memory"])
    needed = required_bytes(workers)
    assert needed <= limit < needed + ROUNDING_BYTES, (service, workers, limit / MIB, needed / MIB)
    # the docs say the limits leave room for tracing: api-replica's 512m was the rule exactly
    assert limit - needed >= workers * tracing_bytes(), (service, workers, limit / MIB, needed / MIB)


def test_kubernetes_limit_covers_every_workers_budget() -> None:
    deployment = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    environment = {item["name"]: item.get("value") for item in container.get("env", [])}
    workers = int(environment["WEB_CONCURRENCY"])
    assert workers <= float(container["resources"]["limits"]["cpu"])
    limit = quantity_bytes(container["resources"]["limits"]["memory"])
    needed = required_bytes(workers)
    assert needed <= limit < needed + ROUNDING_BYTES, (workers, limit / MIB, needed / MIB)
    assert limit - needed >= workers * tracing_bytes(), (workers, limit / MIB, needed / MIB)


@pytest.mark.gunicorn
def test_the_documented_bases_cover_a_running_servers_master_and_workers() -> None:
    seed = {"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}
    softmax = {"inputs": [{"name": "logits", "shape": [3], "datatype": "FP64", "data": [1, 2, 3]}]}
    with serving(workers=2, keep_stdout=False) as server:
        for _ in range(3):  # the first requests import and cache what later ones use
            assert httpx.post(server.url("/v1/attention"), json=seed, timeout=30).status_code == 200
            assert (
                httpx.post(server.url("/v2/models/softmax/infer"), json=softmax, timeout=30).status_code
                == 200
            )
            assert httpx.get(server.url("/metrics"), timeout=30).status_code == 200
        master = memory_of(server.pid)
        workers = server.memory()
    assert master is not None
    assert len(workers) == 2
    assert master.peak <= MASTER_BASE_BYTES, f"the master peaked at {master.peak / MIB:.1f} MiB"
    for pid, reading in workers.items():
        assert reading.rss <= WORKER_BASE_BYTES, f"worker {pid}: {reading.rss / MIB:.1f} MiB after the seed"
