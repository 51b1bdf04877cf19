"""``python -m bench.workers``: gunicorn's worker models under slow clients, the soak and tiny requests.

Candidates: ``sync`` exposed and ``sync`` behind deploy/nginx.conf (Debian's nginx on this host),
``gthread`` (4 threads per worker), gunicorn's ``gevent`` worker, the default (that worker with admission at
the connection level: service/server/worker.py), and a uvicorn worker running the Flask app through a2wsgi.
Every candidate runs the settings' worker count (``WEB_CONCURRENCY`` overrides it). All servers run at
once, and the tiny-request throughput is measured in rounds that take turns, so the ratios compare runs
taken side by side on this (possibly shared) machine. A candidate whose packages are not installed is
skipped and reported. Prints a Markdown table.

Keep-alive fairness (issue #18): the soak's mix from 2 and from 64 kept-alive connections, in turns, with each
worker's share of the 64-connection requests counted from the access log's ``pid``. The targets: 64
connections serve ≥ 0.9× the 2-connection throughput and ≥ 0.9× sync's, and the workers' counts are within
25 % of each other (``spread``: (most − fewest) / most). A measurement to report, not a pass/fail. The soak's
client is one Python process sharing the cores, and 64 connections served at once cost it more than the
server, so the same fairness is measured again with the load tool (wrk when installed): tiny requests from 2
and from 64 kept-alive connections, in turns, each worker's share from the access log.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench import load
from bench.cases import Case, all_cases
from bench.run import markdown
from deploy import proxy, slow_clients, soak
from deploy.launch import SERVICE_APP, Server, start

ASGI_MODULE = """
from a2wsgi import WSGIMiddleware

from service import create_app

app = WSGIMiddleware(create_app())
"""


FEW_CONNECTIONS, MANY_CONNECTIONS = 2, 64


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
    soak_rates: dict[int, list[float]] = field(default_factory=dict)  # connections -> req/s per round
    per_worker: Counter[int] = field(default_factory=Counter)  # the 64-connection rounds' requests by pid
    load_rates: dict[int, list[float]] = field(default_factory=dict)  # the load tool's tiny req/s per round
    load_per_worker: Counter[int] = field(default_factory=Counter)  # and its 64-connection requests by pid
    results: dict[str, str] = field(default_factory=dict)


CANDIDATES = [
    Candidate("sync", {"GUNICORN_WORKER_CLASS": "sync"}),
    Candidate("sync behind nginx", {"GUNICORN_WORKER_CLASS": "sync"}, behind_nginx=True),
    Candidate("gthread (4 threads)", {"GUNICORN_WORKER_CLASS": "gthread", "GUNICORN_THREADS": "4"}),
    # gunicorn's own gevent worker: the app's admission (memory budget, compute slots on a thread) without the
    # connection-level part (head deadlines, room for new connections, no 100 Continue for a refused body).
    Candidate("gevent (gunicorn's worker)", {"GUNICORN_WORKER_CLASS": "gevent"}, needs=("gevent",)),
    Candidate(
        "gevent + admission (the default)",
        {"GUNICORN_WORKER_CLASS": "service.server.worker.AdmittingGeventWorker"},
        needs=("gevent",),
    ),
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
            # the access log is kept: its pid field counts each worker's share of the kept-alive requests
            candidate.server = start(candidate.app, {**base, **candidate.env})
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
        for _ in range(args.rounds):  # the soak in turns too, from 2 and from 64 keep-alive connections
            for candidate in candidates:
                soak_round(candidate, args.seconds / args.rounds, FEW_CONNECTIONS)
                soaks[candidate.name].append(
                    soak_round(candidate, args.seconds / args.rounds, MANY_CONNECTIONS)
                )
        for _ in range(args.rounds):  # fairness again, with the load tool (wrk when installed), in turns
            for candidate in candidates:
                for connections in (FEW_CONNECTIONS, MANY_CONNECTIONS):
                    load_round(candidate, tiny, connections)
        for candidate in candidates:
            summarize_soak(candidate, soaks[candidate.name], args.seconds)
            summarize_fairness(candidate, candidates[0])
            summarize_load_fairness(candidate, candidates[0])
            print(candidate.name, candidate.results, flush=True)
    header = ["worker model", "tiny req/s", "÷ sync", "idle + readers", "slowloris + readers", "soak"]
    header += ["soak req/s, 2 → 64 connections", "64 ÷ 2", "64 ÷ sync", "requests per worker (64)"]
    header += [f"{LOAD_TOOL}: tiny, 2 → 64", f"{LOAD_TOOL} 64 ÷ 2", f"{LOAD_TOOL} 64 ÷ sync"]
    header += [f"{LOAD_TOOL}: per worker (64)"]
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


def soak_round(candidate: Candidate, seconds: float, connections: int) -> soak.Tally:
    """One soak of ``seconds`` from ``connections`` kept-alive clients; its rate (and, at 64, each worker's
    share of it, from the access log) is added to the candidate's."""
    assert candidate.server is not None
    url = f"http://127.0.0.1:{candidate.port}"
    mark = len(candidate.server.stdout)
    tally, _ = asyncio.run(soak.soak(candidate.server, seconds, connections, base_url=url))
    candidate.soak_rates.setdefault(connections, []).append(sum(tally.statuses.values()) / seconds)
    if connections == MANY_CONNECTIONS:
        for line in candidate.server.stdout[mark:]:
            if line.startswith("{") and '"path":"/v1/' in line:
                candidate.per_worker[json.loads(line)["pid"]] += 1
    return tally


LOAD_TOOL = "wrk" if shutil.which("wrk") else "threads"


def load_round(candidate: Candidate, case: Case, connections: int) -> None:
    """Tiny requests from ``connections`` kept-alive connections of the load tool for 3 s.

    The soak's client is one Python process on the same cores: 64 connections served at once cost it far
    more than 2 (or sync's one at a time), so its rates measure the client as much as the server. wrk (C)
    does not, which is what the fairness targets need.
    """
    assert candidate.server is not None
    mark = len(candidate.server.stdout)
    rate = load.throughput(candidate.port, case.path, case.raw, connections=connections, seconds=3)
    candidate.load_rates.setdefault(connections, []).append(rate.per_second)
    if connections == MANY_CONNECTIONS:
        for line in candidate.server.stdout[mark:]:
            if line.startswith("{") and '"path":"/v1/' in line:
                candidate.load_per_worker[json.loads(line)["pid"]] += 1


def summarize_load_fairness(candidate: Candidate, reference: Candidate) -> None:
    many, few = candidate.load_rates[MANY_CONNECTIONS], candidate.load_rates[FEW_CONNECTIONS]
    candidate.results[f"{LOAD_TOOL}: tiny, 2 → 64"] = f"{np.median(few):.0f} → {np.median(many):.0f}"
    candidate.results[f"{LOAD_TOOL} 64 ÷ 2"] = f"{np.median(np.divide(many, few)):.2f}"
    ratio = np.median(np.divide(many, reference.load_rates[MANY_CONNECTIONS]))
    candidate.results[f"{LOAD_TOOL} 64 ÷ sync"] = f"{ratio:.2f}"
    counts = sorted(candidate.load_per_worker.values(), reverse=True)
    spread = (counts[0] - counts[-1]) / counts[0] if counts else float("nan")
    candidate.results[f"{LOAD_TOOL}: per worker (64)"] = (
        f"{' / '.join(map(str, counts))} (spread {spread:.0%})"
    )


def summarize_fairness(candidate: Candidate, reference: Candidate) -> None:
    """The 64-connection rate against the 2-connection one and against the reference's (sync), per round."""
    many, few = candidate.soak_rates[MANY_CONNECTIONS], candidate.soak_rates[FEW_CONNECTIONS]
    candidate.results["soak req/s, 2 → 64 connections"] = f"{np.median(few):.0f} → {np.median(many):.0f}"
    candidate.results["64 ÷ 2"] = f"{np.median(np.divide(many, few)):.2f}"
    candidate.results["64 ÷ sync"] = (
        f"{np.median(np.divide(many, reference.soak_rates[MANY_CONNECTIONS])):.2f}"
    )
    counts = sorted(candidate.per_worker.values(), reverse=True)
    spread = (counts[0] - counts[-1]) / counts[0] if counts else float("nan")
    candidate.results["requests per worker (64)"] = f"{' / '.join(map(str, counts))} (spread {spread:.0%})"


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
