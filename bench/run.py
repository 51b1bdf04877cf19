"""Run every case in-process and over HTTP against the service and a bare Flask app, and print the table.

Every number is a median of repeated runs taken in this one run, so the ratios compare like with
like on whatever machine this is. Nothing here asserts a timing: the targets are reported, met or not.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import platform
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import orjson

from bench import load, v2, worst_cases
from bench.bare import APP as BARE_APP
from bench.cases import Case, all_cases, floor_bytes
from deploy.launch import MIB, SERVICE_APP, Server, serving
from service import create_app
from service.protocols.declarations.model import declared_models

EXAMPLES = {name: dict(model.example) for name, model in declared_models().items()}


@cache
def devnull() -> TextIO:
    """/dev/null for the access log's lines, opened once when first needed (not on import: the tests import
    this module) and closed as the interpreter exits."""
    stream = open(os.devnull, "w")  # noqa: SIM115  (open for the whole run)
    atexit.register(stream.close)
    return stream


@dataclass(frozen=True)
class Budget:
    """How much of each measurement to take: bounded in count and in time."""

    repeats: int  # timed runs of each measurement of a large case (a tiny one gets 20 times more)
    rounds: int  # the runs are spread over this many rounds that take turns, so that drift hits all alike
    seconds: float  # a case's timed runs stop after the round that passes this
    load_rounds: int  # throughput: this many turns of the service and the bare app ...
    load_seconds: float  # ... of this many seconds each


FULL = Budget(repeats=60, rounds=6, seconds=30.0, load_rounds=3, load_seconds=3.0)
SMOKE = Budget(repeats=2, rounds=1, seconds=0.5, load_rounds=1, load_seconds=1.0)

# The smallest valid body per endpoint, to load lazily imported code before memory is measured.
WARMUP_BODIES = {
    "/v1/attention": orjson.dumps(EXAMPLES["attention"]),
    "/v1/log-likelihood": orjson.dumps(EXAMPLES["log-likelihood"]),
    "/v1/multi-head-attention": orjson.dumps(EXAMPLES["multi-head-attention"]),
}
MEASURES = ("floor", "in_process", "http", "bare_http")
V2_CASES = ("attention 512 weights", "attention 2048 output")  # the issue's /v2 targets


@dataclass
class Row:
    case: Case
    times: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in MEASURES})
    response_bytes: int = 0
    rate: float = 0.0
    bare_rate: float = 0.0
    rate_ratio: float = 0.0
    load_tool: str = ""
    peak_rss: int = 0
    rss_growth: int = 0

    def median(self, measure: str) -> float:
        return float(np.median(self.times[measure]))

    def p99(self, measure: str) -> float:
        return float(np.percentile(self.times[measure], 99))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="a few repetitions of everything (CI)")
    parser.add_argument("--markdown", type=Path, help="also write the tables as Markdown to this file")
    parser.add_argument(
        "--overhead", action="store_true", help="only the in-process µs per small request (bench/overhead.py)"
    )
    parser.add_argument(
        "--worst-cases",
        action="store_true",
        help="only each endpoint's most expensive accepted request, in CPU seconds (bench/worst_cases.py)",
    )
    args = parser.parse_args(argv)
    if args.overhead:
        from bench import overhead

        return overhead.main(smoke=args.smoke)
    if args.worst_cases:
        return worst_cases.main(smoke=args.smoke)
    budget = SMOKE if args.smoke else FULL
    settings = gunicorn_settings()
    cases = all_cases()
    rows = [Row(case) for case in cases]

    with (
        serving(SERVICE_APP, settings, keep_stdout=False) as service,
        serving(BARE_APP, settings, keep_stdout=False) as bare,
    ):
        setup = "\n".join([machine_line(), settings_line(service)])
        print(setup, flush=True)
        for row in rows:
            measure_times(row, budget, service_port=service.port, bare_port=bare.port)
            measure_throughput(row, budget, service, bare_port=bare.port)
            row.peak_rss = max(reading.peak for reading in service.memory().values())
        v2_rows = [v2.V2Row(case) for case in cases if case.name in V2_CASES]
        for v2_row in v2_rows:
            v2.measure(
                v2_row,
                port=service.port,
                base_url=service.base_url,
                repeats=budget.repeats,
                rounds=budget.rounds,
                seconds=budget.seconds,
            )
    for row in rows:
        measure_memory(row, settings)
    for v2_row in v2_rows:
        v2.measure_memory(v2_row, settings)
    precision = measure_precision(cases)
    # The smoke run times bodies cut to 1/64 along their limiting dimension: every line of code, seconds.
    worst = worst_cases.measure(repeats=1, shrink=64) if args.smoke else worst_cases.measure()

    text = "\n\n".join(
        [
            main_table(rows),
            precision_table(precision),
            targets_table(rows, precision),
            "Open Inference Protocol (/v2):\n\n" + v2.table(v2_rows),
            v2.targets(v2_rows),
            "Worst case per endpoint (the kernel's CPU seconds; target ≤ 2 s"
            + (", bodies cut to 1/64 in the smoke run" if args.smoke else "")
            + "):\n\n"
            + worst_cases.table(worst),
        ]
    )
    print("\n" + text)
    if args.markdown:
        args.markdown.write_text(f"{setup}\n\n{text}\n")
    return 0


SETTINGS = (
    "WEB_CONCURRENCY",
    "GUNICORN_THREADS",
    "GUNICORN_WORKER_CLASS",
    "GUNICORN_KEEPALIVE",
    "BLAS_THREADS",
)


def gunicorn_settings() -> dict[str, str]:
    """The gunicorn_settings.py settings this shell sets; everything else, the worker count included, is what
    gunicorn_settings.py chooses on this machine (the table's set-up line says what ran)."""
    settings = {key: os.environ[key] for key in SETTINGS if key in os.environ}
    settings["GUNICORN_MAX_REQUESTS"] = "0"  # a worker recycled mid-run would take its memory readings along
    return settings


def settings_line(server: Server) -> str:
    tool = "wrk" if shutil.which("wrk") else "Python threads (wrk is not installed)"
    blas = os.environ.get("BLAS_THREADS", "1")
    return f"gunicorn_settings.py: {server.config.describe()}, BLAS_THREADS={blas}; load generator: {tool}"


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


def measure_times(row: Row, budget: Budget, *, service_port: int, bare_port: int) -> None:
    """Floor, in-process and HTTP times of one case, taken in turns so that they share the conditions."""
    case = row.case
    test_client = create_app().test_client()
    service, bare = load.Client(service_port), load.Client(bare_port)

    def in_process() -> None:
        # The access log still formats and writes its line (a real cost), to /dev/null rather than the table.
        # Closed as a server closes every answer: that gives back what the request held of the memory budget.
        with (
            contextlib.redirect_stdout(devnull()),
            test_client.post(case.path, data=case.raw, content_type="application/json") as response,
        ):
            if response.status_code != 200:
                raise RuntimeError(f"{case.name}: {response.status_code} {response.data[:300]!r}")

    actions: dict[str, Callable[[], Any]] = {
        "floor": partial(floor_bytes, case),
        "in_process": in_process,
        "http": partial(service.post, case.path, case.raw),
        "bare_http": partial(bare.post, case.path, case.raw),
    }
    repeats = budget.repeats * (20 if len(case.raw) < 1000 else 1)
    per_round = max(1, repeats // budget.rounds)
    deadline = time.monotonic() + budget.seconds
    try:
        for action in actions.values():
            action()  # warm-up, and both workers of each server get a connection
        row.response_bytes = service.post(case.path, case.raw)
        for _ in range(budget.rounds):
            for name, action in actions.items():
                for _ in range(per_round):
                    start = time.perf_counter()
                    action()
                    row.times[name].append(time.perf_counter() - start)
            if time.monotonic() > deadline:
                break
    finally:
        service.close()
        bare.close()
    print(
        f"{case.name}: floor {ms(row.median('floor'))}, in-process {ms(row.median('in_process'))}, "
        f"HTTP {ms(row.median('http'))} (p99 {ms(row.p99('http'))}), bare HTTP {ms(row.median('bare_http'))}"
        f" ({len(row.times['http'])} runs each)",
        flush=True,
    )


def measure_throughput(row: Row, budget: Budget, service: Server, *, bare_port: int) -> None:
    """Requests per second under concurrency, the service and the bare app taking turns."""
    case = row.case
    service_port = service.port
    connections = 2 * service.config.workers * service.config.threads
    rates: dict[int, list[float]] = {service_port: [], bare_port: []}
    for _ in range(budget.load_rounds):
        for port, measured in rates.items():
            result = load.throughput(
                port, case.path, case.raw, connections=connections, seconds=budget.load_seconds
            )
            measured.append(result.per_second)
            row.load_tool = result.tool
    row.rate, row.bare_rate = (float(np.median(rates[port])) for port in (service_port, bare_port))
    row.rate_ratio = float(np.median(np.divide(rates[service_port], rates[bare_port])))
    print(
        f"{case.name}: {row.rate:.0f} req/s, bare {row.bare_rate:.0f} req/s "
        f"({connections} connections, {row.load_tool})",
        flush=True,
    )


def measure_memory(row: Row, settings: dict[str, str]) -> None:
    """Peak RSS growth of one fresh worker while it serves one request (after a tiny warm-up request)."""
    case = row.case
    with serving(SERVICE_APP, settings, workers=1, keep_stdout=False) as server:
        client = load.Client(server.port)
        try:
            client.post(case.path, WARMUP_BODIES[case.path])
            before = server.reset_peak_memory()
            client.post(case.path, case.raw)
        finally:
            client.close()
        after = server.memory()
        row.rss_growth = max(after[pid].peak - before[pid].rss for pid in before)
    print(f"{case.name}: peak RSS of a fresh worker grew by {row.rss_growth / MIB:.1f} MiB", flush=True)


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
            with (
                contextlib.redirect_stdout(devnull()),
                client.post(variant.path, data=variant.raw, content_type="application/json") as response,
            ):
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
        "bare HTTP median",
        "req/s",
        "bare req/s",
        "req/s ÷ bare",
        "peak RSS/worker",
        "RSS growth",
        "response",
    ]
    body = []
    for row in rows:
        floor = row.median("floor")
        body.append(
            [
                row.case.name,
                ms(floor),
                f"{ms(row.median('in_process'))} ({row.median('in_process') / floor:.2f})",
                f"{ms(row.median('http'))} ({row.median('http') / floor:.2f})",
                ms(row.p99("http")),
                ms(row.median("bare_http")),
                f"{row.rate:.0f}",
                f"{row.bare_rate:.0f}",
                f"{row.rate_ratio:.2f}",
                f"{row.peak_rss / MIB:.0f} MiB",
                f"{row.rss_growth / MIB:.1f} MiB",
                kib(row.response_bytes),
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
    mid_ratio = mid.median("http") / mid.median("floor")
    smallest_saving = min(1 - row.float32_bytes / row.float64_bytes for row in precision[:3])
    checks = [
        (
            "tiny: throughput ≥ 0.8× bare Flask",
            f"{tiny.rate_ratio:.2f}×",
            tiny.rate_ratio >= 0.8,
        ),
        (
            "512 with weights: HTTP median ≤ 1.3× floor",
            f"{mid_ratio:.2f}×",
            mid_ratio <= 1.3,
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
