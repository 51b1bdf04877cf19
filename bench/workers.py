"""``python -m bench.workers``: gunicorn's worker models under slow clients, the soak and tiny requests.

Candidates: ``sync`` exposed and ``sync`` behind deploy/nginx.conf (Debian's nginx on this host),
``gthread`` (4 threads per worker), ``gevent``, and a uvicorn worker running the Flask app through a2wsgi.
Every candidate runs gunicorn.conf.py's worker count (``WEB_CONCURRENCY`` overrides it). All servers run at
once, and the tiny-request throughput is measured in rounds that take turns, so the ratios compare runs
taken side by side on this (possibly shared) machine. A candidate whose packages are not installed is
skipped and reported. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench import load
from bench.cases import all_cases
from bench.run import markdown
from deploy import proxy, slow_clients, soak
from deploy.launch import SERVICE_APP, Server, start

ASGI_MODULE = """
from a2wsgi import WSGIMiddleware

from service import create_app

app = WSGIMiddleware(create_app())
"""


@dataclass
class Candidate:
    name: str
    env: dict[str, str]
    needs: tuple[str, ...] = ()
    app: str = SERVICE_APP
    behind_nginx: bool = False
    server: Server | None = None
    port: int = 0  # where clients go: the server, or nginx in front of it
    rates: list[float] = field(default_factory=list)
    results: dict[str, str] = field(default_factory=dict)


CANDIDATES = [
    Candidate("sync", {"GUNICORN_WORKER_CLASS": "sync"}),
    Candidate("sync behind nginx", {"GUNICORN_WORKER_CLASS": "sync"}, behind_nginx=True),
    Candidate("gthread (4 threads)", {"GUNICORN_WORKER_CLASS": "gthread", "GUNICORN_THREADS": "4"}),
    Candidate("gevent", {"GUNICORN_WORKER_CLASS": "gevent"}, needs=("gevent",)),
    Candidate(
        "uvicorn + a2wsgi",
        {"GUNICORN_WORKER_CLASS": "uvicorn_worker.UvicornWorker"},
        needs=("uvicorn_worker", "a2wsgi"),
        app="attention_asgi:app",
    ),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.workers", description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0, help="each slow-client run and soak")
    parser.add_argument("--rounds", type=int, default=5, help="turns of the tiny-request throughput and soak")
    parser.add_argument("--only", nargs="*", help="run only the candidates with these names")
    args = parser.parse_args(argv)
    tiny = next(case for case in all_cases() if case.name.startswith("tiny"))
    asgi_dir = Path(tempfile.mkdtemp(prefix="attention-asgi-"))
    (asgi_dir / "attention_asgi.py").write_text(ASGI_MODULE)
    base = {"GUNICORN_MAX_REQUESTS": "0", "PYTHONPATH": str(asgi_dir)}
    base |= {key: value for key, value in soak.soak_settings().items() if key != "WEB_CONCURRENCY"}
    chosen = [c for c in CANDIDATES if not args.only or c.name in args.only]
    candidates = [c for c in chosen if all(importlib.util.find_spec(m) for m in c.needs)]
    for skipped in (c for c in chosen if c not in candidates):
        print(f"skipped {skipped.name}: {', '.join(skipped.needs)} not installed")
    if not Path(proxy.NGINX).exists():
        candidates = [c for c in candidates if not c.behind_nginx]
        print("skipped sync behind nginx: nginx is not installed")
    with contextlib.ExitStack() as stack:
        for candidate in candidates:
            candidate.server = start(candidate.app, {**base, **candidate.env}, keep_stdout=False)
            stack.callback(candidate.server.terminate)
            candidate.port = candidate.server.port
            if candidate.behind_nginx:
                front = stack.enter_context(proxy.nginx([candidate.server.port]))
                candidate.port = front.port
        print(f"workers: {candidates[0].server.config.describe() if candidates[0].server else '?'}")
        for _ in range(args.rounds):  # the candidates take turns, so drift hits all alike
            for candidate in candidates:
                rate = load.throughput(candidate.port, tiny.path, tiny.raw, connections=8, seconds=3)
                candidate.rates.append(rate.per_second)
        reference = candidates[0].rates
        for candidate in candidates:
            ratios = np.divide(candidate.rates, reference)
            candidate.results["tiny req/s"] = f"{np.median(candidate.rates):.0f}"
            candidate.results["÷ sync"] = f"{np.median(ratios):.2f}"
            print(candidate.name, candidate.results, flush=True)
        for candidate in candidates:
            measure_attacks(candidate, args.seconds)
            print(candidate.name, candidate.results, flush=True)
        soaks: dict[str, list[soak.Tally]] = {candidate.name: [] for candidate in candidates}
        for _ in range(args.rounds):  # the soak in turns too: 64 keep-alive connections each
            for candidate in candidates:
                soaks[candidate.name].append(soak_round(candidate, args.seconds / args.rounds))
        for candidate in candidates:
            summarize_soak(candidate, soaks[candidate.name], args.seconds)
            print(candidate.name, candidate.results, flush=True)
    header = ["worker model", "tiny req/s", "÷ sync", "idle + readers", "slowloris + readers", "soak"]
    print(
        "\n" + markdown(header, [[c.name, *(c.results.get(h, "") for h in header[1:])] for c in candidates])
    )
    return 0


def measure_attacks(candidate: Candidate, seconds: float) -> None:
    for label, idle, slowloris in (("idle + readers", 64, 0), ("slowloris + readers", 0, 64)):
        probes = slow_clients.run(candidate.port, seconds=seconds, idle=idle, slowloris=slowloris)
        verdict = "pass" if not probes.failures else f"FAIL ({len(probes.failures)})"
        candidate.results[label] = (
            f"{verdict}: livez ≤ {probes.worst('livez'):.2f} s, seed ≤ {probes.worst('seed'):.2f} s"
        )


def soak_round(candidate: Candidate, seconds: float) -> soak.Tally:
    assert candidate.server is not None
    url = f"http://127.0.0.1:{candidate.port}"
    tally, _ = asyncio.run(soak.soak(candidate.server, seconds, 64, base_url=url))
    return tally


def summarize_soak(candidate: Candidate, tallies: list[soak.Tally], seconds: float) -> None:
    assert candidate.server is not None
    total = sum(sum(tally.statuses.values()) for tally in tallies)
    errors = sum(count for t in tallies for (_, status), count in t.statuses.items() if status >= 500)
    dropped = sum(len(tally.dropped) for tally in tallies)
    unexpected = sum(len(tally.unexpected) for tally in tallies)
    died = candidate.server.config.workers - len(candidate.server.worker_pids())
    candidate.results["soak"] = (
        f"{total / seconds:.0f} req/s, {dropped} dropped, {errors} 5xx, {unexpected} unexpected, "
        f"{max(died, 0)} workers missing"
    )
    for tally in tallies:
        for line in (tally.unexpected + tally.dropped)[:3]:
            print(f"  {candidate.name}: {line}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
