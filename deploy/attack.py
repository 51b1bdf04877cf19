"""``make attack``: hostile clients against gunicorn on 127.0.0.1, bounded in count and in time.

Starts the service as deployed (gunicorn_settings.py, its default worker) with every process held to an
address-space limit (1 GiB by default, ``setrlimit(RLIMIT_AS)``), optionally with its metrics directory on
a 16 MiB tmpfs (``--metrics-tmpfs``, root only, as the Kubernetes manifest's in-memory ``/tmp``), and runs:

- **cardinality flood**: made-up methods, paths and request ids for ``--flood-seconds``; then ``/metrics``
  must be under 100 KB;
- **amplification**: small bodies that ask for large answers (broadcasting, ``empty_rows: "zero"``) and a
  body of many unknown fields: each must get a 413/422 or be answered, and no worker may die;
- **slow clients**: 64 idle, then 64 slowloris connections, each with 4 slow readers of a 6 MB answer, while
  ``/livez`` (1 s) and the worked example (2 s) are probed (deploy/slow_clients.py);
- **Content-Length lies**: shorter bodies than claimed (closed, and held open; one whose bytes parse: 400),
  a claim of 2^64;
- **malformed chunked bodies** (and ``gzip, chunked``: 501), **unknown content encodings** and a **zip bomb**
  (1 GiB of zeros, gzip: 413);
- **concurrent scrapes**: every route with every method (about 1 MB of ``/metrics``), then 8 scrapes at once:
  ``/livez`` within 1 s.

It fails on any worker death, any 500, any probe slower than its bound, any answer the app wrote (it
carries the request's ``X-Request-ID``) without its JSON log line, and any attack-specific rule above.

Then the overload scenarios of issue #18 (deploy/overload.py), each against a server of its own: ``heavy``,
``resend``, ``crowd-lies``, ``crowd-silent``, ``uploads``, ``expect``, ``gzip-members``, ``tiny-chunks``,
``unread-answers``, ``slow-readers`` and ``crowd-tls`` (``crowd-silent`` against the server serving TLS
itself, with the test certificate of deploy/test-tls). ``--only NAME ...`` runs some attacks alone
(``python -m deploy.attack --only heavy``), ``--skip NAME ...`` leaves some out; ``--short`` is CI's form
(shorter holds, fewer lying connections, two endpoints for ``heavy``); each count and hold has a flag.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import resource
import socket
import string
import subprocess
import tempfile
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from deploy import overload, slow_clients
from deploy.launch import MIB, TEST_TLS, Server, resolve_config, serving, start

GIB = overload.GIB
METRICS_LIMIT_BYTES = 100_000
TMPFS_BYTES = 16 * MIB


@dataclass
class Report:
    """Every answer by attack and status, the request ids the app answered, and what went wrong."""

    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    app_answered: set[str] = field(default_factory=set)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sent = 0

    def fail(self, message: str) -> None:
        print(f"  FAIL {message}", flush=True)
        self.failures.append(message)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def exchange(port: int, raw: bytes, *, timeout: float = 30.0, hold: float = 0.0) -> Answer | None:
    """Send ``raw`` on a fresh connection (``Connection: close`` added) and read the answer to its end.

    ``hold`` seconds of silence follow the request before anything is read (a client that lied about its
    body and waits). None when the server closed the connection without answering.
    """
    request_line, _, rest = raw.partition(b"\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request_line + b"\r\nConnection: close\r\n" + rest)
        if hold:
            time.sleep(hold)
        pieces = []
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(1 << 20):
                pieces.append(chunk)
    answer = b"".join(pieces)
    return parse_answer(answer) if answer else None


def parse_answer(answer: bytes) -> Answer:
    """An HTTP/1.1 answer read whole (to the connection's end): its status, headers (names in lower case)
    and body."""
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return Answer(int(status_line.split()[1]), headers, body)


class Attack:
    def __init__(self, server: Server, report: Report) -> None:
        self.server = server
        self.report = report
        self.counter = 0

    def request_id(self, kind: str) -> str:
        self.counter += 1
        return f"attack-{kind}-{self.counter}"

    def send(
        self,
        kind: str,
        head: str,
        body: bytes = b"",
        *,
        expect: set[int] | None = None,
        hold: float = 0.0,
        answer_expected: bool = True,
    ) -> Answer | None:
        """Send one request (``head``: no request id, no final blank line) and judge its answer."""
        request_id = self.request_id(kind)
        raw = f"{head}\r\nX-Request-ID: {request_id}\r\n\r\n".encode("latin-1") + body
        self.report.sent += 1
        try:
            answer = exchange(self.server.port, raw, hold=hold)
        except OSError as error:
            self.report.fail(f"{kind}: {type(error).__name__}: {error}")
            return None
        if answer is None:
            if answer_expected:
                self.report.fail(f"{kind}: the connection was closed without an answer")
            return None
        self.report.statuses[(kind, answer.status)] += 1
        if answer.headers.get("x-request-id") == request_id:
            self.report.app_answered.add(request_id)
        if answer.status >= 500 and (expect is None or answer.status not in expect):  # 501: expected
            self.report.fail(f"{kind}: {answer.status} {answer.body[:200]!r}")
        elif expect is not None and answer.status not in expect:
            self.report.fail(
                f"{kind}: {answer.status}, expected one of {sorted(expect)}: {answer.body[:200]!r}"
            )
        return answer


def post_head(path: str, length: int, *extra: str) -> str:
    lines = [f"POST {path} HTTP/1.1", "Host: attack", "Content-Type: application/json"]
    return "\r\n".join([*lines, f"Content-Length: {length}", *extra])


def cardinality_flood(attack: Attack, seconds: float) -> None:
    """Made-up methods, paths, query strings and ids, as fast as one client sends them."""
    rng = random.Random(9)
    deadline = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < deadline:
        method = "".join(rng.choices(string.ascii_uppercase, k=rng.randint(3, 20)))
        token = "".join(rng.choices(string.ascii_lowercase + string.digits, k=12))
        path = rng.choice([f"/{token}", f"/v1/{token}", "/livez", "/v1/attention", f"/static/{token}.js"])
        attack.send("flood", f"{method} {path}?{token}={token} HTTP/1.1\r\nHost: attack")
        # Made-up models and versions, POSTed as a model's infer would be (a 404 or 405, and no series).
        model_path = rng.choice(
            [f"/v1/{token}", f"/v2/models/{token}/infer", f"/v2/models/attention/versions/{token}/infer"]
        )
        attack.send("flood", post_head(model_path, 2), b"{}", expect={404, 405})
        sent += 2
    metrics = exchange(attack.server.port, b"GET /metrics HTTP/1.1\r\nHost: attack\r\n\r\n", timeout=60)
    size = len(metrics.body) if metrics else -1
    attack.report.notes.append(
        f"cardinality flood: {sent} requests in {seconds:.0f} s, /metrics {size:,} bytes"
    )
    if metrics is None or metrics.status != 200:
        attack.report.fail(f"/metrics after the flood: {metrics.status if metrics else 'no answer'}")
    elif size >= METRICS_LIMIT_BYTES:
        attack.report.fail(f"/metrics is {size:,} bytes after the flood (limit {METRICS_LIMIT_BYTES:,})")
    if metrics is not None and metrics.status == 200:
        for problem in unbounded_inference_series(metrics.body.decode(), served_models()):
            attack.report.fail(f"after the flood: {problem}")


def served_models() -> set[str]:
    """The models the service's routes serve (what the per-model metrics' ``model`` label may be)."""
    from service import create_app
    from service.web.inference import model_route

    app = create_app({"ACCESS_LOG": False})
    return {
        route[0]
        for rule in app.url_map.iter_rules()
        for method in rule.methods or ()
        if (route := model_route(rule.rule, method)) is not None
    }


def unbounded_inference_series(text: str, models: set[str]) -> list[str]:
    """The per-model series whose labels are not from their fixed sets (empty when the series are bounded:
    at most the models × 2 protocols × the outcomes)."""
    from prometheus_client.parser import text_string_to_metric_families

    from service.web.inference import OUTCOMES, PREFIX, PROTOCOLS

    problems = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith(PREFIX):
                continue
            labels = sample.labels
            if (
                labels.get("model") not in models
                or labels.get("protocol") not in PROTOCOLS
                or labels.get("outcome", "success") not in OUTCOMES
            ):
                problems.append(f"{sample.name} has labels {labels} outside the fixed sets")
    return problems


def _nested(shape: list[int], value: float) -> object:
    if not shape:
        return value
    return [_nested(shape[1:], value) for _ in range(shape[0])]


def amplification(attack: Attack) -> None:
    """Small bodies that ask for large answers, and a body of many unknown fields."""
    broadcast = {
        "query": _nested([16, 1, 16, 1], 0.5),
        "key": _nested([1, 256, 1, 1], 0.25),
        "value": _nested([1, 256], 1.0),
        "include": [],
    }
    # 4096 x 4096 scores: exactly the default MAX_WORK_ELEMENTS; about 37 KB in, 300 MB of weights out
    wide = 4096
    square = {
        "query": _nested([wide, 1], 1.0),
        "key": _nested([wide, 1], 1.0),
        "value": _nested([wide, 1], 1.0),
        "empty_rows": "zero",
    }
    unknown = b"{" + b",".join(b'"f%d":0' % n for n in range(400_000)) + b"}"
    # 2048 x 2048 weights: 4 Mi values, about 90 MB of JSON, within the default answer limit: streamed
    within = {key: _nested([2048, 1], 1.0) for key in ("query", "key", "value")}
    for name, body in (
        ("amplify-broadcast", json.dumps(broadcast).encode()),
        ("amplify-weights", json.dumps(square).encode()),
        ("amplify-within-limit", json.dumps(within).encode()),
    ):
        answer = attack.send(name, post_head("/v1/attention", len(body)), body, expect={200, 413})
        if answer is not None and answer.status == 413 and b"answer-too-large" not in answer.body:
            attack.report.fail(
                f"{name}: a 413 that does not name the answer-size limit: {answer.body[:200]!r}"
            )
    attack.send("unknown-fields", post_head("/v1/attention", len(unknown)), unknown, expect={413, 422})


def streamed_answer(report: Report, env: dict[str, str]) -> None:
    """A 50 KB body whose answer broadcasts to 8 million values (64 MB of JSON, written in pieces on the
    worker's loop) to a client that reads as fast as it can, while ``/livez`` is probed, on a server of one
    worker (so that every probe shares that worker's loop): each probe within 1 s (before the loop looked
    for other connections between pieces, 1.8 s)."""
    answered_elsewhere = set(report.app_answered)
    # Its own metrics directory: a server empties the one it is given as it starts, and the legacy attacks'
    # server, still running, would lose its samples (the scrapes after this read 22 KB instead of 0.9 MB).
    own = {name: value for name, value in env.items() if name != "PROMETHEUS_MULTIPROC_DIR"}
    with serving(env=own, workers=1) as server:
        _streamed_answer(Attack(server, report))
        time.sleep(1.0)  # the last log lines are flushed
        logged = {
            line.get("request_id")
            for line in (json.loads(text) for text in list(server.stdout) if text.startswith("{"))
        }
    missing = sorted(report.app_answered - answered_elsewhere - logged)
    if missing:
        report.fail(f"{len(missing)} answers without their log line, e.g. {missing[:5]}")
    report.app_answered = answered_elsewhere  # the main server's log has none of these


def _streamed_answer(attack: Attack) -> None:
    rows = 2837
    body = json.dumps(
        {
            "query": _nested([rows, 1, 1, 1], 0.123456789),
            "key": _nested([1, rows, 1, 1], 1.0),
            "value": [[1.0]],
        }
        | {"include": []}
    ).encode()
    answers: list[Answer | None] = []
    raw = f"{post_head('/v1/attention', len(body))}\r\n\r\n".encode() + body
    reader = threading.Thread(target=lambda: answers.append(exchange(attack.server.port, raw, timeout=60)))
    reader.start()
    worst, probes = probe_livez_during(attack, "probe-during-streamed-answer", [reader], every=0.02)
    answer = answers[0] if answers else None
    size = len(answer.body) if answer else -1
    attack.report.notes.append(
        f"streamed answer of {size:,} bytes: /livez at most {worst:.2f} s in {probes} probes"
    )
    if answer is None or answer.status != 200:
        attack.report.fail(f"streamed answer: {answer.status if answer else 'no answer'}")
    if worst > 1.0:
        attack.report.fail(f"/livez took {worst:.2f} s while a streamed answer was written (bound 1 s)")


def _sent_short_then_closed(attack: Attack, request_id: str, path: str, body: bytes) -> bytes:
    """``body`` under a head that claims 100 bytes more, then the sending side closed; what came back."""
    with socket.create_connection(("127.0.0.1", attack.server.port), timeout=10) as sock:
        head = post_head(path, len(body) + 100, f"X-Request-ID: {request_id}") + "\r\n\r\n"
        sock.sendall(head.encode() + body)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        with contextlib.suppress(OSError):
            while piece := sock.recv(65536):
                answer += piece
    attack.report.sent += 1
    return answer


def content_length_lies(attack: Attack) -> None:
    short = b'{"logits": [1.0'
    # claims more than it sends, then closes its side: the worker must live on (checked at the end)
    _sent_short_then_closed(attack, attack.request_id("short-closed"), "/v1/softmax", short)
    # the same with bytes that parse (the worked example): incomplete, so a 400 naming Content-Length, never
    # computed (it had been a 200)
    request_id = attack.request_id("short-parses")
    answer = _sent_short_then_closed(attack, request_id, "/v1/attention", slow_clients.SEED_BODY)
    if not answer.startswith(b"HTTP/1.1 400") or b'"Content-Length"' not in answer:
        attack.report.fail(f"short-parses: {answer[:200]!r}, expected a 400 naming Content-Length")
    else:
        attack.report.statuses[("short-parses", 400)] += 1
        attack.report.app_answered.add(request_id)
    # claims more than it sends and waits: the service cannot know the rest will never come, so it may
    # wait as long as the client does; meanwhile everyone else must be answered, and nothing may be a 500
    request_id = attack.request_id("short-held")
    with socket.create_connection(("127.0.0.1", attack.server.port), timeout=10) as sock:
        head = post_head("/v1/softmax", 100, f"X-Request-ID: {request_id}") + "\r\n\r\n"
        sock.sendall(head.encode() + short)
        attack.report.sent += 1
        for _ in range(5):
            attack.send("probe-during-lie", "GET /livez HTTP/1.1\r\nHost: attack", expect={200})
            time.sleep(1.0)
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            early = sock.recv(65536)
            if early.startswith(b"HTTP/1.1 5"):
                attack.report.fail(f"short-held: {early[:200]!r}")
    for claim in (2**64, 2**64 + 1, 10**30):
        attack.send(
            "content-length-huge",
            post_head("/v1/softmax", claim),
            b"{}",
            expect={400, 413},
            answer_expected=True,
        )


def malformed_chunked(attack: Attack) -> None:
    head = (
        "POST /v1/softmax HTTP/1.1\r\nHost: attack\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked"
    )
    for name, chunks in (
        ("chunked-size-not-hex", b"zz\r\n{}\r\n0\r\n\r\n"),
        ("chunked-missing-terminator", b"2\r\n{}XX0\r\n\r\n"),
        ("chunked-negative-size", b"-2\r\n{}\r\n0\r\n\r\n"),
    ):
        attack.send(name, head, chunks, expect={400})
    # gunicorn passes gzip (deflate, compress) before chunked on, the body still coded: a 501, not read plain
    coded = head.replace("chunked", "gzip, chunked")
    attack.send("chunked-gzip-coding", coded, b"2\r\n{}\r\n0\r\n\r\n", expect={501})


def unknown_encodings(attack: Attack) -> None:
    body = b'{"logits": [1.0, 2.0]}'
    for encoding in ("gzip", "br", "x-made-up", "gzip, deflate"):
        attack.send(
            f"encoding-{encoding}",
            post_head("/v1/softmax", len(body), f"Content-Encoding: {encoding}"),
            body,
            expect={400, 415},
        )
    # A zip bomb: 1 GiB of zeros in about 1 MB of gzip, inflated only up to MAX_BODY_BYTES, then a 413.
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(MIB)
    bomb = b"".join([*(compressor.compress(zeros) for _ in range(1024)), compressor.flush()])
    for path in ("/v1/softmax", "/v2/models/softmax/infer"):
        attack.send(
            "encoding-gzip-bomb", post_head(path, len(bomb), "Content-Encoding: gzip"), bomb, expect={413}
        )


SCRAPES = 16  # concurrent reads of each of SCRAPED
SCRAPED = ("/metrics", "/v2/models/stats")  # each reads every worker's samples
SCRAPE_PROBES = 5  # /livez probes while they run (at least; until the last is answered), each within 1 s
SCRAPES_SECONDS = 60.0  # the longest the reads are waited for


def probe_livez_during(
    attack: Attack, kind: str, threads: list[threading.Thread], *, every: float
) -> tuple[float, int]:
    """Probe ``/livez`` every ``every`` seconds until ``threads`` have ended (at least :data:`SCRAPE_PROBES`
    times, for at most :data:`SCRAPES_SECONDS`: a loop held by requests one after the other is held that
    long), then join them; the slowest probe's seconds and how many were sent."""
    worst, probes, until = 0.0, 0, time.monotonic() + SCRAPES_SECONDS
    while probes < SCRAPE_PROBES or (any(t.is_alive() for t in threads) and time.monotonic() < until):
        started = time.monotonic()
        attack.send(kind, "GET /livez HTTP/1.1\r\nHost: attack", expect={200})
        worst = max(worst, time.monotonic() - started)
        probes += 1
        time.sleep(every)
    for thread in threads:
        thread.join(max(0.0, until - time.monotonic()))
    return worst, probes


def concurrent_scrapes(attack: Attack) -> None:
    """Every route with every routed method (about 1 MB of /metrics: the largest the finite labels allow),
    then :data:`SCRAPES` reads at once of each of :data:`SCRAPED` (the metrics, and the /v2 statistics read
    from them) while ``/livez`` is probed: each probe within 1 s (built on the loop, 8 such scrapes had held
    it 2.3 s)."""
    from service import create_app

    app = create_app({"ACCESS_LOG": False})
    paths = sorted({re.sub(r"<[^>]*>", "x", rule.rule) for rule in app.url_map.iter_rules()})
    for path in paths:
        for method in ("GET", "HEAD", "OPTIONS"):
            attack.send("route-sweep", f"{method} {path} HTTP/1.1\r\nHost: attack")
        attack.send("route-sweep", post_head(path, 2), b"{}")
    for scraped in SCRAPED:
        raw = f"GET {scraped} HTTP/1.1\r\nHost: attack\r\n\r\n".encode()
        answers: list[Answer | None] = []

        def read(raw: bytes = raw, answers: list[Answer | None] = answers) -> None:
            answers.append(exchange(attack.server.port, raw))

        scrapes = [threading.Thread(target=read) for _ in range(SCRAPES)]
        for thread in scrapes:
            thread.start()
        worst, probes = probe_livez_during(attack, "probe-during-scrapes", scrapes, every=0.05)
        failed = [
            answer.status if answer else None for answer in answers if answer is None or answer.status != 200
        ]
        last = exchange(attack.server.port, raw, timeout=60)
        size = len(last.body) if last else -1
        attack.report.notes.append(
            f"{SCRAPES} reads of {scraped} ({size:,} bytes after a sweep of {len(paths)} routes × 4 "
            f"methods): /livez at most {worst:.2f} s in {probes} probes"
        )
        if failed or len(answers) != SCRAPES:
            attack.report.fail(
                f"{scraped} read {SCRAPES} times at once: {len(answers)} answers, failed {failed}"
            )
        if worst > 1.0:
            attack.report.fail(f"/livez took {worst:.2f} s during {SCRAPES} reads of {scraped} (bound 1 s)")


def slow(attack: Attack, seconds: float) -> None:
    for label, idle, slowloris in (("idle", 64, 0), ("slowloris", 0, 64)):
        probes = slow_clients.run(attack.server.port, seconds=seconds, idle=idle, slowloris=slowloris)
        attack.report.notes.append(
            f"{label} + 4 slow readers for {seconds:.0f} s: /livez at most {probes.worst('livez'):.2f} s, "
            f"the worked example at most {probes.worst('seed'):.2f} s "
            f"({len(probes.latencies['livez'])} probes each); {probes.readers_cut} slow readers cut short"
        )
        for failure in probes.failures:
            attack.report.fail(f"slow clients ({label}): {failure}")


@contextlib.contextmanager
def metrics_on_tmpfs(enabled: bool) -> Iterator[dict[str, str]]:
    """A 16 MiB tmpfs for PROMETHEUS_MULTIPROC_DIR (needs root), else the launcher's own directory."""
    if not enabled:
        yield {}
        return
    directory = Path(tempfile.mkdtemp(prefix="attention-metrics-tmpfs-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(directory)], check=True)
    try:
        yield {"PROMETHEUS_MULTIPROC_DIR": str(directory)}
    finally:
        subprocess.run(["umount", str(directory)], check=False)
        directory.rmdir()


LEGACY = ("flood", "amplification", "streamed", "lies", "chunked", "encodings", "scrapes", "slow")
OVERLOAD = (
    *("heavy", "resend", "crowd-lies", "crowd-silent", "uploads", "expect"),
    *("gzip-members", "tiny-chunks", "unread-answers"),  # the attack pass after admission control
    "slow-readers",  # answers read steadily below ANSWER_MIN_BYTES_PER_SECOND
    "crowd-tls",  # crowd-silent against TLS served by gunicorn itself
)
# The figures (the full form) and CI's short form of the overload scenarios.
FULL = {"resend_seconds": 100.0, "lies": 1500, "lies_seconds": 70.0, "silent": 2500, "silent_seconds": 70.0}
FULL |= {"uploads": 40, "uploads_seconds": 30.0}
SHORT = {"resend_seconds": 15.0, "lies": 300, "lies_seconds": 15.0, "silent": 2500, "silent_seconds": 10.0}
SHORT |= {"uploads": 40, "uploads_seconds": 10.0}


def raise_open_files(needed: int) -> str:
    """The soft RLIMIT_NOFILE up to the hard one (gunicorn, started from here, inherits it too)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if soft != resource.RLIM_INFINITY and soft < needed:
        return f"open files limited to {soft} (the crowds need about {needed}): fewer connections are opened"
    return ""


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.attack",
        description=(__doc__ or "") + "\n" + (overload.__doc__ or ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--short", action="store_true", help="the CI version: 10 s flood and slow clients, shorter overloads"
    )
    parser.add_argument("--flood-seconds", type=float, default=60.0)
    parser.add_argument("--slow-seconds", type=float, default=60.0)
    parser.add_argument("--address-space", type=int, default=GIB, help="bytes per process (0: no limit)")
    names = " ".join(LEGACY + OVERLOAD)
    parser.add_argument("--skip", nargs="*", default=[], choices=LEGACY + OVERLOAD, help=f"of: {names}")
    parser.add_argument("--only", nargs="*", choices=LEGACY + OVERLOAD, help="run only these attacks")
    for name, value in FULL.items():
        flag = "--" + name.replace("_", "-")
        kind = int if isinstance(value, int) else float
        parser.add_argument(flag, type=kind, help=f"full form {value}, short form {SHORT[name]}")
    parser.add_argument("--metrics-tmpfs", action="store_true", help="metrics on a 16 MiB tmpfs (root)")
    args = parser.parse_args(argv)
    if args.short:
        args.flood_seconds, args.slow_seconds = 10.0, 10.0
    for name, value in (SHORT if args.short else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    chosen = set(args.only) if args.only is not None else set(LEGACY + OVERLOAD)
    args.chosen = [name for name in LEGACY + OVERLOAD if name in chosen and name not in args.skip]
    return args


def legacy_attacks(args: argparse.Namespace, env: dict[str, str], report: Report) -> None:
    """The attacks of the earlier rounds, one after the other against one server."""
    server = start(env={**env, "GUNICORN_MAX_REQUESTS": "0"}, address_space_bytes=args.address_space or None)
    try:
        workers = server.worker_pids()
        attack = Attack(server, report)
        attacks: dict[str, Callable[[], None]] = {
            "flood": lambda: cardinality_flood(attack, args.flood_seconds),
            "amplification": lambda: amplification(attack),
            "streamed": lambda: streamed_answer(report, env),
            "lies": lambda: content_length_lies(attack),
            "chunked": lambda: malformed_chunked(attack),
            "encodings": lambda: unknown_encodings(attack),
            "scrapes": lambda: concurrent_scrapes(attack),
            "slow": lambda: slow(attack, args.slow_seconds),
        }
        for name, run in attacks.items():
            if name not in args.chosen:
                continue
            started = time.monotonic()
            print(f"- {name}", flush=True)
            run()
            print(f"  ({time.monotonic() - started:.1f} s)", flush=True)
        time.sleep(1.0)  # the last log lines are flushed
        if server.worker_pids() != workers or server.stderr_contains("Booting worker"):
            replaced = [line for line in server.stderr if "Booting worker" in line or "SIG" in line]
            if set(workers) != server.worker_pids():
                report.fail(
                    f"workers died: {sorted(workers)} -> {sorted(server.worker_pids())}: {replaced[-5:]}"
                )
        logged = {
            line.get("request_id")
            for line in (json.loads(text) for text in list(server.stdout) if text.startswith("{"))
        }
        missing = sorted(report.app_answered - logged)
        if missing:
            report.fail(f"{len(missing)} answers without their log line, e.g. {missing[:5]}")
    finally:
        exit_code = server.terminate()
        if exit_code != 0:
            report.fail(f"gunicorn exited {exit_code} on SIGTERM")
            print(server.log(20))


def overload_scenario(name: str, args: argparse.Namespace, env: dict[str, str]) -> list[overload.Verdict]:
    """One scenario of issue #18 against a server of its own (started the default way; the latest round's
    with one worker, so that every probe shares the attacked worker's loop)."""
    workers = 1 if name in ("gzip-members", "tiny-chunks", "unread-answers", "slow-readers") else None
    limit = args.address_space or None
    tls = TEST_TLS if name == "crowd-tls" else None
    server = start(
        env={**env, "GUNICORN_MAX_REQUESTS": "0"}, address_space_bytes=limit, workers=workers, tls=tls
    )
    print(f"- {name} (127.0.0.1:{server.port}, load average {os.getloadavg()[0]:.1f})", flush=True)
    try:
        if name == "heavy":
            verdicts = overload.heavy(server, overload.worst_cases(args.short))
        elif name == "resend":
            _, path, body = overload.worst_cases(short=True)[0]
            verdicts = [overload.resend(server, path, body, args.resend_seconds)]
        elif name == "crowd-lies":
            verdicts = [overload.crowd(server, name, count=args.lies, lie=True, seconds=args.lies_seconds)]
        elif name in ("crowd-silent", "crowd-tls"):
            silent, seconds = args.silent, args.silent_seconds
            verdicts = [overload.crowd(server, name, count=silent, lie=False, seconds=seconds)]
        elif name == "uploads":
            verdicts = [overload.held_uploads(server, count=args.uploads, seconds=args.uploads_seconds)]
        elif name == "expect":
            verdicts = [overload.expect_continue(server)]
        elif name == "gzip-members":
            verdicts = [overload.gzip_members(server)]
        elif name == "tiny-chunks":
            verdicts = [overload.tiny_chunks(server)]
        elif name == "slow-readers":
            verdicts = [overload.slow_readers(server)]
        else:
            verdicts = [overload.unread_answers(server)]
    finally:
        exit_code = server.terminate()
    if exit_code != 0:
        verdicts[-1].fail(f"gunicorn exited {exit_code} on SIGTERM")
    if any(verdict.failures for verdict in verdicts):
        print(server.log(12), flush=True)
    for verdict in verdicts:
        state = "FAIL" if verdict.failures else "pass"
        print(f"  {state} {verdict.name} ({verdict.seconds:.0f} s): {verdict.summary}", flush=True)
    return verdicts


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    began = time.monotonic()
    report = Report()
    limited = raise_open_files(max(args.lies, args.silent) + 500)
    if limited:
        report.notes.append(limited)
    verdicts: list[overload.Verdict] = []
    print(
        f"attack: {' '.join(args.chosen)}; {resolve_config(os.environ).describe()}, address space "
        f"{args.address_space / GIB:.2f} GiB per process, metrics on "
        f"{'a 16 MiB tmpfs' if args.metrics_tmpfs else 'disk'}, load average "
        f"{' '.join(f'{load:.1f}' for load in os.getloadavg())}",
        flush=True,
    )
    with metrics_on_tmpfs(args.metrics_tmpfs) as env:
        if any(name in LEGACY for name in args.chosen):
            legacy_attacks(args, env, report)
        for name in args.chosen:
            if name in OVERLOAD:
                verdicts += overload_scenario(name, args, env)
    if report.statuses:
        print("\nstatuses by attack:")
    for (kind, status), count in sorted(report.statuses.items()):
        print(f"  {kind:28} {status}  x{count}")
    for note in report.notes:
        print(f"  {note}")
    if report.sent:
        print(f"{report.sent} requests sent, {len(report.app_answered)} answered by the app")
    if verdicts:
        print("\noverload scenarios (issue #18):")
    for verdict in verdicts:
        state = "FAIL" if verdict.failures else "pass"
        print(f"  {state} {verdict.name} ({verdict.seconds:.0f} s): {verdict.summary}")
        report.failures += [f"{verdict.name}: {failure}" for failure in verdict.failures]
    print(f"{time.monotonic() - began:.0f} s in all")
    if report.failures:
        print(f"ATTACK FAILED ({len(report.failures)} failures)")
        for failure in report.failures[:40]:
            print(f"  - {failure}")
        return 1
    print("ATTACK OK")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
