"""The memory limits in compose and Kubernetes are workers × (budget + a worker's base) + the master's base.

A worker may hold ``MEMORY_BUDGET_BYTES`` for one request on top of what it holds idle; the master holds the
app's imports once. The limit must cover that sum, and not exceed it by more than one rounding step (a
limit far above it only hides a leak until the node runs out).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
# Measured with deploy.launch on this machine: a fresh gevent worker 58 MiB RSS, the master 30 MiB (after
# /readyz and /metrics); each rounded up to leave room for allocator slack and the in-memory metrics files.
WORKER_BASE_BYTES = 64 * MIB
MASTER_BASE_BYTES = 64 * MIB
ROUNDING_BYTES = 128 * MIB


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


def test_kubernetes_limit_covers_every_workers_budget() -> None:
    deployment = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    environment = {item["name"]: item.get("value") for item in container.get("env", [])}
    workers = int(environment["WEB_CONCURRENCY"])
    assert workers <= float(container["resources"]["limits"]["cpu"])
    limit = quantity_bytes(container["resources"]["limits"]["memory"])
    needed = required_bytes(workers)
    assert needed <= limit < needed + ROUNDING_BYTES, (workers, limit / MIB, needed / MIB)
