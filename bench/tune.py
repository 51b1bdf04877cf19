"""``python -m bench.tune``: the gunicorn settings compared, on the requests that decide them.

For each setting: throughput of the seed example against the service and the bare Flask app (taking
turns), the seed example's latency from one client, and the latency and throughput of attention 512
with weights. Prints a Markdown table.
"""

from __future__ import annotations

import os
import time

import numpy as np

from bench import load
from bench.bare import APP as BARE_APP
from bench.cases import all_cases
from bench.run import markdown, ms, settings_line
from deploy.launch import SERVICE_APP, serving

CORES = os.cpu_count() or 1
# The worker class is named in each (the default, gevent, is chosen by `python -m bench.workers`).
CANDIDATES: list[dict[str, str]] = [
    {"GUNICORN_WORKER_CLASS": "gevent", "WEB_CONCURRENCY": str(CORES), "BLAS_THREADS": "1"},
    {"GUNICORN_WORKER_CLASS": "gevent", "WEB_CONCURRENCY": str(2 * CORES), "BLAS_THREADS": "1"},
    {"GUNICORN_WORKER_CLASS": "sync", "WEB_CONCURRENCY": str(CORES), "BLAS_THREADS": "1"},
    {
        "GUNICORN_WORKER_CLASS": "gthread",
        "WEB_CONCURRENCY": str(CORES),
        "GUNICORN_THREADS": "4",
        "BLAS_THREADS": "1",
    },
    {"GUNICORN_WORKER_CLASS": "gevent", "WEB_CONCURRENCY": "1", "BLAS_THREADS": str(CORES)},
]
CONNECTIONS = 8
SECONDS = 3.0
ROUNDS = 5


def main() -> int:
    cases = {case.name: case for case in all_cases()}
    tiny, mid = cases["tiny (seed example)"], cases["attention 512 weights"]
    body = []
    for candidate in CANDIDATES:
        settings = {"GUNICORN_MAX_REQUESTS": "0", **candidate}
        with (
            serving(SERVICE_APP, settings, keep_stdout=False) as service,
            serving(BARE_APP, settings, keep_stdout=False) as bare,
        ):
            print(settings_line(service), flush=True)
            ratios, rates, bare_rates = [], [], []
            for _ in range(ROUNDS):  # the service and the bare app take turns
                rate = load.throughput(
                    service.port, tiny.path, tiny.raw, connections=CONNECTIONS, seconds=SECONDS
                )
                bare_rate = load.throughput(
                    bare.port, tiny.path, tiny.raw, connections=CONNECTIONS, seconds=SECONDS
                )
                rates.append(rate.per_second)
                bare_rates.append(bare_rate.per_second)
                ratios.append(rate.per_second / bare_rate.per_second)
            tiny_times = sequential_times(service.port, tiny.path, tiny.raw, count=500)
            times = sequential_times(service.port, mid.path, mid.raw, count=30)
            mid_rate = load.throughput(
                service.port, mid.path, mid.raw, connections=CONNECTIONS, seconds=SECONDS
            )
        body.append(
            [
                f"{service.config.describe()}, {candidate['BLAS_THREADS']} BLAS",
                f"{np.median(rates):.0f}",
                f"{np.median(bare_rates):.0f}",
                f"{np.median(ratios):.2f}",
                ms(float(np.median(tiny_times))),
                ms(float(np.median(times))),
                f"{mid_rate.per_second:.1f}",
            ]
        )
        print(" | ".join(body[-1]), flush=True)
    header = ["setting", "tiny req/s", "bare req/s", "÷ bare", "tiny median", "512 median", "512 req/s"]
    print("\n" + markdown(header, body))
    return 0


def sequential_times(port: int, path: str, body: bytes, *, count: int) -> list[float]:
    """Seconds per request, one at a time from one client (a new connection each time if not kept alive)."""
    client = load.Client(port)
    times = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            client.post(path, body)
            times.append(time.perf_counter() - start)
    finally:
        client.close()
    return times


if __name__ == "__main__":
    raise SystemExit(main())
