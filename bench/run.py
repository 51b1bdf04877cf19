"""Run every case in-process and over HTTP against the service and a bare Flask app, and print the table.

Every number is a median of repeated runs taken in this one run, so the ratios compare like with
like on whatever machine this is. Nothing here asserts a timing: the targets are reported, met or not.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from bench import load
from bench.cases import Case, all_cases, floor_bytes
from bench.server import BARE_APP, MIB, SERVICE_APP, gunicorn
from service import create_app


@dataclass(frozen=True)
class Budget:
    """How much of each measurement to take: bounded in count and in time."""

    repeats: int
    tiny_repeats: int
    seconds: float
    load_seconds: float


FULL = Budget(repeats=60, tiny_repeats=2000, seconds=6.0, load_seconds=5.0)
SMOKE = Budget(repeats=3, tiny_repeats=20, seconds=0.5, load_seconds=1.0)

# The smallest valid body per endpoint, to load lazily imported code before memory is measured.
WARMUP_BODIES = {
    "/v1/attention": b'{"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}',
    "/v1/log-likelihood": b'{"logits": [[2.0, 0.5], [0.1, 1.5]], "targets": [0, 1]}',
}


@dataclass
class Row:
    case: Case
    floor: float = 0.0
    in_process: float = 0.0
    http: load.Latency | None = None
    bare_http: load.Latency | None = None
    rate: float = 0.0
    bare_rate: float = 0.0
    peak_rss: int = 0
    rss_growth: int = 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="a few repetitions of everything (CI)")
    parser.add_argument("--markdown", type=Path, help="also write the tables as Markdown to this file")
    args = parser.parse_args(argv)
    budget = SMOKE if args.smoke else FULL
    settings = gunicorn_settings()
    cases = all_cases()
    rows = [Row(case) for case in cases]

    setup = "\n".join([machine_line(), settings_line(settings)])
    print(setup, flush=True)
    measure_in_process(rows, budget)
    measure_http(rows, budget, settings, app=SERVICE_APP)
    measure_http(rows, budget, settings, app=BARE_APP)
    measure_memory(rows, settings)
    precision = measure_precision(cases)

    text = "\n\n".join([main_table(rows), precision_table(precision), targets_table(rows, precision)])
    print("\n" + text)
    if args.markdown:
        args.markdown.write_text(f"{setup}\n\n{text}\n")
    return 0


def gunicorn_settings() -> dict[str, str]:
    """The environment that configures gunicorn.conf.py: the defaults, or what this shell sets."""
    defaults = {
        "WEB_CONCURRENCY": str(os.cpu_count() or 1),
        "GUNICORN_THREADS": "1",
        "GUNICORN_KEEPALIVE": "5",
        "BLAS_THREADS": "1",
    }
    return {key: os.environ.get(key, value) for key, value in defaults.items()}


def settings_line(settings: dict[str, str]) -> str:
    tool = "wrk" if shutil.which("wrk") else "Python threads (wrk is not installed)"
    gunicorn = ", ".join(f"{key}={value}" for key, value in sorted(settings.items()))
    return f"gunicorn.conf.py with {gunicorn}; load generator: {tool}"


def machine_line() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown CPU",
    )
    return (
        f"machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"NumPy {np.__version__}, orjson {orjson.__version__}"
    )


def repeat(action: Callable[[], Any], *, count: int, seconds: float) -> float:
    """Median seconds of ``action`` over up to ``count`` runs or ``seconds`` (at least three runs)."""
    action()  # warm-up
    times: list[float] = []
    deadline = time.monotonic() + seconds
    while len(times) < count and (len(times) < 3 or time.monotonic() < deadline):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def count_for(case: Case, budget: Budget) -> int:
    return budget.tiny_repeats if len(case.raw) < 1000 else budget.repeats


def measure_in_process(rows: list[Row], budget: Budget) -> None:
    client = create_app().test_client()
    for row in rows:
        case = row.case

        def through_service(case: Case = case) -> None:
            response = client.post(case.path, data=case.raw, content_type="application/json")
            if response.status_code != 200:
                raise RuntimeError(f"{case.name}: {response.status_code} {response.data[:300]!r}")

        count = count_for(case, budget)
        row.floor = repeat(partial(floor_bytes, case), count=count, seconds=budget.seconds)
        row.in_process = repeat(through_service, count=count, seconds=budget.seconds)
        print(f"in-process  {case.name}: floor {ms(row.floor)}, service {ms(row.in_process)}", flush=True)


def measure_http(rows: list[Row], budget: Budget, settings: dict[str, str], *, app: str) -> None:
    bare = app == BARE_APP
    connections = 2 * int(settings["WEB_CONCURRENCY"]) * int(settings["GUNICORN_THREADS"])
    with gunicorn(app, settings) as server:
        for row in rows:
            case = row.case
            server.reset_peak_memory()
            latency = load.latency(
                server.port, case.path, case.raw, count=count_for(case, budget), seconds=budget.seconds
            )
            rate = load.throughput(
                server.port, case.path, case.raw, connections=connections, seconds=budget.load_seconds
            )
            if bare:
                row.bare_http, row.bare_rate = latency, rate.per_second
            else:
                row.http, row.rate = latency, rate.per_second
                row.peak_rss = max(server.peak_memory().values())
            print(
                f"{'bare' if bare else 'service':8s}    {case.name}: median {ms(latency.median)}, "
                f"p99 {ms(latency.p99)} ({latency.count} requests), "
                f"{rate.per_second:.0f} req/s ({rate.tool})",
                flush=True,
            )


def measure_memory(rows: list[Row], settings: dict[str, str]) -> None:
    """Peak RSS growth of one fresh worker while it serves one request (after a tiny warm-up request)."""
    for row in rows:
        case = row.case
        with gunicorn(SERVICE_APP, {**settings, "WEB_CONCURRENCY": "1"}) as server:
            load.latency(server.port, case.path, WARMUP_BODIES[case.path], count=1, seconds=0, warmup=0)
            before = server.reset_peak_memory()
            load.latency(server.port, case.path, case.raw, count=1, seconds=0, warmup=0)
            peak = server.peak_memory()
            row.rss_growth = max(peak[pid] - before[pid] for pid in server.workers)
        print(f"memory      {case.name}: peak RSS grew by {row.rss_growth / MIB:.1f} MiB", flush=True)


@dataclass(frozen=True)
class PrecisionRow:
    name: str
    float64_bytes: int
    float32_bytes: int
    relative_error: float


def measure_precision(cases: list[Case]) -> list[PrecisionRow]:
    """Response sizes in float64 and float32, and float32's error relative to float64 (max |Δ| / max |x|)."""
    client = create_app().test_client()
    rows = []
    for case in cases[1:]:
        answers = {}
        for precision in ("float64", "float32"):
            variant = case.with_precision(precision)
            response = client.post(variant.path, data=variant.raw, content_type="application/json")
            answers[precision] = response.data
        doubles, singles = orjson.loads(answers["float64"]), orjson.loads(answers["float32"])
        key = "output" if "output" in doubles else "token_logprobs"
        exact = np.asarray(doubles[key], dtype=np.float64)
        approx = np.asarray(singles[key], dtype=np.float64)
        error = float(np.nanmax(np.abs(approx - exact)) / np.nanmax(np.abs(exact)))
        rows.append(PrecisionRow(case.name, len(answers["float64"]), len(answers["float32"]), error))
    return rows


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def markdown(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines)


def main_table(rows: list[Row]) -> str:
    header = [
        "case",
        "floor",
        "in-process (×floor)",
        "HTTP median (×floor)",
        "HTTP p99",
        "req/s",
        "bare median",
        "bare req/s",
        "req/s ÷ bare",
        "peak RSS/worker",
        "RSS growth",
        "response",
    ]
    body = []
    for row in rows:
        assert row.http is not None
        assert row.bare_http is not None
        body.append(
            [
                row.case.name,
                ms(row.floor),
                f"{ms(row.in_process)} ({row.in_process / row.floor:.2f})",
                f"{ms(row.http.median)} ({row.http.median / row.floor:.2f})",
                ms(row.http.p99),
                f"{row.rate:.0f}",
                ms(row.bare_http.median),
                f"{row.bare_rate:.0f}",
                f"{row.rate / row.bare_rate:.2f}",
                f"{row.peak_rss / MIB:.0f} MiB",
                f"{row.rss_growth / MIB:.1f} MiB",
                kib(row.http.response_bytes),
            ]
        )
    return markdown(header, body)


def precision_table(rows: list[PrecisionRow]) -> str:
    header = [
        "case",
        "float64 response",
        "float32 response",
        "smaller by",
        "float32 relative error (max abs. difference ÷ max abs. value)",
    ]
    body = [
        [
            row.name,
            f"{row.float64_bytes:,} B",
            f"{row.float32_bytes:,} B",
            f"{1 - row.float32_bytes / row.float64_bytes:.0%}",
            f"{row.relative_error:.1e}",
        ]
        for row in rows
    ]
    return markdown(header, body)


def targets_table(rows: list[Row], precision: list[PrecisionRow]) -> str:
    by_name = {row.case.name: row for row in rows}
    tiny, mid, big = (
        by_name["tiny (seed example)"],
        by_name["attention 512 weights"],
        by_name["attention 2048 output"],
    )
    assert mid.http is not None
    smallest_saving = min(1 - row.float32_bytes / row.float64_bytes for row in precision[:3])
    checks = [
        (
            "tiny: throughput ≥ 0.8× bare Flask",
            f"{tiny.rate / tiny.bare_rate:.2f}×",
            tiny.rate >= 0.8 * tiny.bare_rate,
        ),
        (
            "512 with weights: HTTP median ≤ 1.3× floor",
            f"{mid.http.median / mid.floor:.2f}×",
            mid.http.median <= 1.3 * mid.floor,
        ),
        (
            "2048 output-only: peak RSS growth < 48 MiB",
            f"{big.rss_growth / MIB:.1f} MiB",
            big.rss_growth < 48 * MIB,
        ),
        ("float32 responses ≥ 40% smaller (attention)", f"{smallest_saving:.0%}", smallest_saving >= 0.4),
    ]
    return markdown(
        ["target", "measured", "met"], [[name, value, "yes" if ok else "NO"] for name, value, ok in checks]
    )


def kib(size: int) -> str:
    return f"{size / 1024:.0f} KiB" if size >= 10 * 1024 else f"{size} B"
