"""The overload scenarios of issue #18 for ``make attack``: each finding reproduced, with its pass condition.

Every scenario runs against its own server, started the default way (deploy/launch.py: gunicorn_settings.py
under the attack's address-space limit), on 127.0.0.1, and every loop in it is bounded in count and time:

- **heavy**: per endpoint, two concurrent worst-case requests (bench/worst_cases.py) while 6 bystanders
  send the worked example on kept-alive connections and ``/livez`` is probed. Pass: every bystander answer
  a 200 (or a 503 with ``Retry-After``) within 5 s, every ``/livez`` within 1 s, no 500, no reset, no
  worker killed.
- **resend**: two clients re-sending the multi-head body for a while (each sends it again 0.2 s after its
  answer) while ``/livez`` and the worked example are probed on fresh connections; the same bounds.
- **crowd-lies**: POST heads whose Content-Length is larger than what is sent, held open. Pass: ≥ 90 % of
  the ``/livez`` probes answered within 3 s, and ≥ 90 % of the lying connections closed by the server.
- **crowd-silent**: connections that send nothing, held open; the same probe condition.
- **uploads**: 40 uploads of 16 MiB − 1 byte, all but their last byte sent, then held. Pass: the process
  tree's resident memory (master + workers) ≤ 1 GiB while they are held, and the worked example answered.
- **expect**: ``Expect: 100-continue`` with ``Content-Length: 999999999``. Pass: a 413 without a
  ``100 Continue`` before it, and the connection closed after it (not drained). A small body with the same
  header must still be answered.

The next round of the attack found three more, each now a scenario against one worker (so that every probe
shares the attacked loop) with ``/livez`` probed throughout (pass: every probe within 1 s, no worker killed):

- **gzip-members**: a 4.8 MB body of 240,000 empty gzip members (each member used to copy the rest of the
  body, on the loop, until the worker was killed). Pass: a 400 naming ``Content-Encoding`` within 5 s.
- **tiny-chunks**: 2 MB of body in 1-byte chunks (12 MB on the wire; gunicorn parses each chunk in Python,
  and the loop was held 9.7 s). Pass: a 400 naming ``Transfer-Encoding`` within 10 s (refused after about
  230 KB of body: about 1 s of parsing).
- **unread-answers**: three clients that ask for a 10 MB answer and never read it. Pass: each request ends
  (its answer cut, or refused with a 503 while the others' answers hold the memory) within two
  ``ANSWER_TIMEOUT_SECONDS`` (10) + 10 s, and the same large request, read, is answered 200 afterwards.
- **slow-readers**: three clients that ask for the same answer and read 16 KiB of it a second (never
  stalled; without a minimum rate, 10 minutes each). Pass: the same bound, and the same 200 afterwards.

And one found since, when gunicorn serves TLS itself (``--certfile``/``--keyfile``):

- **crowd-tls**: crowd-silent against that server (the test certificate of deploy/test-tls), its probes
  over TLS: the crowd's handshakes never start. The same pass condition (the handshakes had no deadline and
  were not the worker's to close: 150 such connections against 2 × 50 ``worker_connections`` kept every
  probe out).

Each scenario returns a :class:`Verdict`: one summary line of what it measured, and its failures.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import math
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from bench.worst_cases import worst_case_requests
from deploy import slow_clients
from deploy.launch import MIB, Server, memory_of
from service.server.connection_metrics import CLOSED, PREFIX

GIB = 1024 * MIB
LIVEZ_BOUND_SECONDS = 1.0
BYSTANDER_BOUND_SECONDS = 5.0
CROWD_PROBE_BOUND_SECONDS = 3.0
CROWD_SHARE = 0.9  # of the probes answered in time, and of the lying connections closed by the server
TREE_RSS_LIMIT_BYTES = GIB
UPLOAD_BYTES = 16 * MIB - 1
BYSTANDERS = 6
# How long a client waits for one answer before giving up: far past every bound, so a slow answer is
# measured (today's main kept a bystander 29 s), yet every scenario ends.
PATIENCE_SECONDS = 60.0
SHORT_ENDPOINTS = ("/v1/multi-head-attention", "/v1/attention")
HEADERS = {"Content-Type": "application/json"}


@dataclass
class Verdict:
    """What one scenario measured (``summary``, one line) and which pass conditions it missed."""

    name: str
    summary: str = ""
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def fail(self, message: str) -> None:
        print(f"  FAIL {self.name}: {message}", flush=True)
        self.failures.append(message)


@dataclass(frozen=True)
class Reply:
    """One request's outcome: its status (None when there was no answer, ``error`` says why) and time."""

    started: float  # time.monotonic() when it was sent
    seconds: float
    status: int | None = None
    retry_after: str | None = None
    body: bytes = b""
    error: str | None = None

    def shed_or_ok(self) -> bool:
        """A 200, or a 503 that tells the client when to come back."""
        return self.status == 200 or (self.status == 503 and self.retry_after is not None)


def request(
    connection: http.client.HTTPConnection,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """One request on ``connection`` (opened on demand, reused when kept alive), read to its end."""
    started = time.monotonic()
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        data = response.read()
    except (OSError, http.client.HTTPException) as error:
        connection.close()
        return Reply(started, time.monotonic() - started, error=describe_error(error))
    if response.will_close:
        connection.close()
    return Reply(
        started,
        time.monotonic() - started,
        status=response.status,
        retry_after=response.getheader("Retry-After"),
        body=data,
    )


def describe_error(error: BaseException) -> str:
    """``reset``, ``closed`` (no answer), ``timeout`` or ``refused``, with the exception's own words."""
    if isinstance(error, http.client.RemoteDisconnected):
        kind = "closed"
    elif isinstance(error, ConnectionResetError | BrokenPipeError):
        kind = "reset"
    elif isinstance(error, TimeoutError):
        kind = "timeout"
    elif isinstance(error, ConnectionRefusedError):
        kind = "refused"
    else:
        kind = type(error).__name__
    return f"{kind}: {error}"


def fresh(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    timeout: float,
    tls: ssl.SSLContext | None = None,
) -> Reply:
    """One request on a connection of its own (over TLS, trusting ``tls``, when given), closed afterwards."""
    connection = (
        http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        if tls is None
        else http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=tls)
    )
    try:
        return request(connection, method, path, body, {**HEADERS, "Connection": "close"} if body else {})
    finally:
        connection.close()


def seed_answered(reply: Reply) -> bool:
    """The worked example's right answer (its two weights to 1e-12)."""
    if reply.status != 200:
        return False
    try:
        weights = json.loads(reply.body)["weights"]
    except (ValueError, KeyError, TypeError):
        return False
    return len(weights) == 2 and all(
        abs(a - b) <= 1e-12 * abs(b) for a, b in zip(weights, slow_clients.SEED_WEIGHTS, strict=True)
    )


class Prober:
    """Starts one probe every ``interval`` seconds, each on its own thread and connection, until stopped.

    A slow probe does not delay the next one, so the probes sample the whole run evenly; at most
    ``limit`` probes are started, and each gives up after ``timeout`` seconds.
    """

    def __init__(
        self,
        port: int,
        method: str,
        path: str,
        body: bytes | None,
        *,
        interval: float,
        timeout: float,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.port, self.method, self.path, self.body = port, method, path, body
        self.interval, self.timeout, self.tls = interval, timeout, tls
        self.replies: list[Reply] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._probes: list[threading.Thread] = []
        self._ticker = threading.Thread(target=self._tick, daemon=True)

    def __enter__(self) -> Prober:
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._ticker.join()
        for probe in self._probes:
            probe.join(timeout=self.timeout * 2 + 5)

    def _tick(self) -> None:
        limit = 10_000
        while not self._stopping.is_set() and len(self._probes) < limit:
            probe = threading.Thread(target=self._probe, daemon=True)
            self._probes.append(probe)
            probe.start()
            self._stopping.wait(self.interval)

    def _probe(self) -> None:
        reply = fresh(self.port, self.method, self.path, self.body, timeout=self.timeout, tls=self.tls)
        with self._lock:
            self.replies.append(reply)

    def within(self, bound: float, ok: Callable[[Reply], bool]) -> list[Reply]:
        return [reply for reply in self.replies if ok(reply) and reply.seconds <= bound]


def livez_ok(reply: Reply) -> bool:
    return reply.status == 200


def outcome(reply: Reply) -> str:
    """The status, or the kind of error (``reset``, ``closed``, ``timeout``, …)."""
    return str(reply.status) if reply.status is not None else (reply.error or "?").split(":")[0]


def tally(replies: Iterable[Reply]) -> str:
    """``200 ×12, 503 ×2, timeout ×3``: statuses and error kinds, counted."""
    counts = Counter(outcome(reply) for reply in replies)
    return ", ".join(f"{key} ×{count}" for key, count in sorted(counts.items())) or "none"


def worst(replies: Iterable[Reply]) -> float:
    return max((reply.seconds for reply in replies), default=math.nan)


class Workers:
    """The server's workers and its log when a scenario starts, to tell afterwards whether any was killed."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.pids = server.worker_pids()
        self.mark = len(server.stderr)

    def killed(self) -> list[str]:
        """Why workers are gone since: gunicorn's own lines, and the pids that are missing."""
        lines = [
            line
            for line in self.server.stderr[self.mark :]
            if "WORKER TIMEOUT" in line or "SIGKILL" in line or "out of memory" in line
        ]
        gone = self.pids - self.server.worker_pids()
        return [*(line.strip()[-120:] for line in lines), *(f"worker {pid} is gone" for pid in sorted(gone))]

    def judge(self, verdict: Verdict) -> str:
        killed = self.killed()
        if killed:
            verdict.fail(f"workers killed: {killed[:4]}")
        timeouts = sum("WORKER TIMEOUT" in line for line in self.server.stderr[self.mark :])
        gone = len(self.pids - self.server.worker_pids())
        return f"{gone} of {len(self.pids)} workers replaced, {timeouts} WORKER TIMEOUT"


def worst_cases(short: bool) -> list[tuple[str, str, bytes]]:
    """(endpoint, path, body) of the most expensive accepted request per endpoint (bench/worst_cases.py),
    then, in the full form, the bodies that cost most to parse (:func:`parse_heavy_bodies`).

    The short form keeps multi-head attention and attention.
    """
    found = worst_case_requests()
    cases = [
        (name, path, json.dumps(body, separators=(",", ":")).encode())
        for name, (path, body) in found.items()
        if path in SHORT_ENDPOINTS or not short  # only the bodies sent are written (2.3 s for all of them)
    ]
    # multi-head first: it is the finding
    cases.sort(key=lambda case: case[1] != SHORT_ENDPOINTS[0])
    return cases if short else cases + parse_heavy_bodies()


def parse_heavy_bodies(body_bytes: int = 16 * MIB - 64) -> list[tuple[str, str, bytes]]:
    """Bodies just under the body limit whose parsing makes the most Python objects per byte: one container
    per 3 or 4 bytes, or lists 50 deep, one per 2 bytes. Their parse once held the interpreter for seconds
    (the loop waiting: see service/web/garbage.py), and could take 3 times the memory budget; it is now
    held from the budget before it starts, so all three are refused unparsed (413: see
    service/web/parse_memory.py)."""
    rows = b"[0]"
    empties = b"[]"
    nested = b"[" * 50 + b"]" * 50
    return [
        ("parse: one-element rows", "/v1/softmax", logits_of(rows, body_bytes)),
        ("parse: empty rows", "/v1/softmax", logits_of(empties, body_bytes)),
        ("parse: nested lists", "/v1/softmax", logits_of(nested, body_bytes)),
    ]


def logits_of(row: bytes, body_bytes: int) -> bytes:
    """``{"logits": [row, row, ...]}`` of at most ``body_bytes`` bytes (and its few bytes of braces)."""
    return b'{"logits":[' + b",".join([row] * (body_bytes // (len(row) + 1))) + b"]}"


# --- heavy -------------------------------------------------------------------------------------------------


def heavy(server: Server, cases: list[tuple[str, str, bytes]]) -> list[Verdict]:
    """One round per endpoint: two of its worst requests at once, 6 kept-alive bystanders, ``/livez``."""
    verdicts = []
    for name, path, body in cases:
        server.wait_for(server.ready, "the server to be ready again")
        verdict = Verdict(f"heavy {name}")
        started = time.monotonic()
        heavy_round(server, verdict, path, body)
        verdict.seconds = time.monotonic() - started
        verdicts.append(verdict)
    return verdicts


def workers_of(server: Server, request_ids: list[str]) -> Counter[int]:
    """How many of these requests each worker answered, from the access log's ``pid`` (bounded wait)."""
    wanted = set(request_ids)
    found: Counter[int] = Counter()
    for _ in range(20):  # the log lines arrive just after the answers
        found.clear()
        for line in list(server.stdout):
            if line.startswith("{") and any(request_id in line for request_id in wanted):
                found[json.loads(line)["pid"]] += 1
        if sum(found.values()) == len(wanted):
            break
        time.sleep(0.05)
    return found


def heavy_round(server: Server, verdict: Verdict, path: str, body: bytes) -> None:
    workers = Workers(server)
    seed = slow_clients.SEED_BODY
    bystanders = [
        http.client.HTTPConnection("127.0.0.1", server.port, timeout=PATIENCE_SECONDS)
        for _ in range(BYSTANDERS)
    ]
    warm_ids = [f"bystander-{n}-{time.monotonic_ns()}" for n in range(BYSTANDERS)]
    for connection, request_id in zip(bystanders, warm_ids, strict=True):
        # each connection is accepted by a worker, and stays with it
        warm = request(connection, "POST", "/v1/attention", seed, {**HEADERS, "X-Request-ID": request_id})
        if warm.status != 200:
            verdict.fail(f"a bystander's first request: {warm.status or warm.error}")
    placed = workers_of(server, warm_ids)
    heavy_replies: list[Reply] = []
    seen: list[Reply] = []
    stopping = threading.Event()

    def send_heavy() -> None:
        heavy_replies.append(fresh(server.port, "POST", path, body, timeout=PATIENCE_SECONDS + 30))

    def stand_by(connection: http.client.HTTPConnection) -> None:
        deadline = time.monotonic() + 2 * PATIENCE_SECONDS
        while not stopping.is_set() and time.monotonic() < deadline:
            seen.append(request(connection, "POST", "/v1/attention", seed, HEADERS))
            stopping.wait(0.25)

    with Prober(server.port, "GET", "/livez", None, interval=0.5, timeout=10.0) as livez:
        senders = [threading.Thread(target=send_heavy, daemon=True) for _ in range(2)]
        standing = [threading.Thread(target=stand_by, args=(c,), daemon=True) for c in bystanders]
        for thread in senders + standing:
            thread.start()
        for thread in senders:
            thread.join(timeout=PATIENCE_SECONDS + 40)
        time.sleep(2.0)  # the bystanders and probes see the server after the heavy requests too
        stopping.set()
        for thread in standing:
            thread.join(timeout=PATIENCE_SECONDS + 5)
    for connection in bystanders:
        connection.close()

    for reply in heavy_replies:
        # answered, refused (413), shed (503 + Retry-After) or past its deadline (504): anything but a
        # 500 or a connection lost
        if reply.status is None or (reply.status >= 500 and not reply.shed_or_ok() and reply.status != 504):
            verdict.fail(f"a heavy request: {outcome(reply)} after {reply.seconds:.1f} s")
    late = [r for r in seen if not (r.shed_or_ok() and r.seconds <= BYSTANDER_BOUND_SECONDS)]
    wrong = [r for r in seen if r.status == 200 and not seed_answered(r)]
    if late or wrong:
        verdict.fail(
            f"{len(late)} of {len(seen)} bystander answers not a 200/503+Retry-After within "
            f"{BYSTANDER_BOUND_SECONDS:.0f} s ({tally(late)}; worst {worst(seen):.1f} s), {len(wrong)} wrong"
        )
    slow_livez = [r for r in livez.replies if not (livez_ok(r) and r.seconds <= LIVEZ_BOUND_SECONDS)]
    if slow_livez:
        verdict.fail(f"{len(slow_livez)} of {len(livez.replies)} /livez probes over 1 s or failed")
    killed = workers.judge(verdict)
    heavy_text = ", ".join(f"{outcome(r)} in {r.seconds:.1f} s" for r in heavy_replies)
    verdict.summary = (
        f"2 × {path} ({len(body) / 1000:.0f} KB): {heavy_text}; {BYSTANDERS} kept-alive bystanders "
        f"({' + '.join(map(str, sorted(placed.values(), reverse=True)))} on the workers): "
        f"{len(seen)} answers ({tally(seen)}), {len(seen) - len(late)} in time, worst {worst(seen):.1f} s; "
        f"/livez {len(livez.replies) - len(slow_livez)} of {len(livez.replies)} within 1 s "
        f"(worst {worst(livez.replies):.1f} s); {killed}"
    )


def resend(server: Server, path: str, body: bytes, seconds: float) -> Verdict:
    """Two clients re-sending a heavy body for ``seconds``; ``/livez`` and the worked example are probed."""
    verdict = Verdict("resend")
    workers = Workers(server)
    sends: list[Reply] = []
    deadline = time.monotonic() + seconds

    def resend_loop() -> None:
        for _ in range(10_000):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            sends.append(fresh(server.port, "POST", path, body, timeout=max(remaining, 0.5)))
            # at most 5 sends a second each when they are refused or shed at once: the attack is the
            # computation, not a flood (the cardinality flood is its own attack)
            time.sleep(0.2)

    seed = slow_clients.SEED_BODY
    started = time.monotonic()
    with (
        Prober(server.port, "GET", "/livez", None, interval=1.0, timeout=10.0) as livez,
        Prober(server.port, "POST", "/v1/attention", seed, interval=1.0, timeout=10.0) as seeds,
    ):
        clients = [threading.Thread(target=resend_loop, daemon=True) for _ in range(2)]
        for client in clients:
            client.start()
        for client in clients:
            client.join(timeout=seconds + 5)
    verdict.seconds = time.monotonic() - started
    cut = [r for r in sends if r.error and r.error.startswith("timeout")]  # our own deadline, not the server
    bad = [r for r in sends if r not in cut and (r.status is None or r.status in (500, 502))]
    if bad:
        verdict.fail(f"re-sent requests: {tally(bad)}")
    livez_in_time = livez.within(LIVEZ_BOUND_SECONDS, livez_ok)
    if len(livez_in_time) < len(livez.replies):
        verdict.fail(f"/livez: {len(livez_in_time)} of {len(livez.replies)} within 1 s")
    seed_in_time = seeds.within(BYSTANDER_BOUND_SECONDS, lambda r: seed_answered(r) or r.shed_or_ok())
    if len(seed_in_time) < len(seeds.replies):
        verdict.fail(f"worked example: {len(seed_in_time)} of {len(seeds.replies)} within 5 s")
    killed = workers.judge(verdict)
    verdict.summary = (
        f"2 clients re-sending {path} ({len(body) / 1000:.0f} KB) for {seconds:.0f} s: {len(sends)} sends "
        f"({tally(sends)}); /livez {len(livez_in_time)} of {len(livez.replies)} within 1 s; worked example "
        f"{len(seed_in_time)} of {len(seeds.replies)} within 5 s ({tally(seeds.replies)}); {killed}"
    )
    return verdict


# --- crowds of connections ---------------------------------------------------------------------------------

LYING_HEAD = (
    b"POST /v1/softmax HTTP/1.1\r\nHost: attack\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000\r\n\r\n"
    b'{"logits": [1.0, 2.0'
)


def open_crowd(port: int, count: int, first_bytes: bytes, seconds: float) -> tuple[list[socket.socket], int]:
    """Up to ``count`` connections, each sent ``first_bytes`` (if any), opened within ``seconds``.

    Returns the sockets and how many could not be opened (the server's backlog was full, or time ran out).
    """
    sockets: list[socket.socket] = []
    failed = 0
    deadline = time.monotonic() + seconds
    for _ in range(count):
        if time.monotonic() > deadline:
            failed += count - len(sockets) - failed
            break
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=3)
            if first_bytes:
                sock.sendall(first_bytes)
        except OSError:
            failed += 1
            continue
        sockets.append(sock)
    return sockets, failed


def closed_by_server(sock: socket.socket) -> tuple[bool, bytes]:
    """Whether the server has closed ``sock`` (end of stream or reset), and whatever it sent first."""
    sock.setblocking(False)
    received = b""
    for _ in range(1000):  # the server sends at most a short answer before it closes
        try:
            chunk = sock.recv(65536)
        except BlockingIOError:
            return False, received
        except OSError:  # reset
            return True, received
        if not chunk:
            return True, received
        received += chunk
    return False, received


def crowd(server: Server, name: str, *, count: int, lie: bool, seconds: float) -> Verdict:
    """``count`` connections (lying POST heads, or silent) held ``seconds`` while ``/livez`` is probed (over
    TLS when the server serves it: then the silent crowd never starts its handshakes)."""
    verdict = Verdict(name)
    workers = Workers(server)
    closes_before = connection_series(server).closes
    started = time.monotonic()
    with Prober(
        server.port,
        "GET",
        "/livez",
        None,
        interval=1.0,
        timeout=CROWD_PROBE_BOUND_SECONDS + 2,
        tls=server.tls_context,
    ) as livez:
        sockets, failed = open_crowd(server.port, count, LYING_HEAD if lie else b"", seconds=30.0)
        opened = time.monotonic() - started
        time.sleep(seconds)
        states = [closed_by_server(sock) for sock in sockets]
    for sock in sockets:
        sock.close()
    verdict.seconds = time.monotonic() - started
    closed = sum(state for state, _ in states)
    answers = Counter(data.split(b" ", 2)[1].decode("latin-1") for _, data in states if data[:5] == b"HTTP/")
    counted = {
        reason: int(count) for reason, count in new_closes(closes_before, connection_series(server)).items()
    }
    if any(status.startswith("5") and status != "503" for status in answers):
        verdict.fail(f"answers on the crowd's connections: {dict(answers)}")
    in_time = livez.within(CROWD_PROBE_BOUND_SECONDS, livez_ok)
    share = len(in_time) / max(len(livez.replies), 1)
    if share < CROWD_SHARE:
        verdict.fail(f"/livez: {len(in_time)} of {len(livez.replies)} within 3 s ({share:.0%})")
    closed_share = closed / max(len(sockets), 1)
    if lie and closed_share < CROWD_SHARE:
        verdict.fail(f"the server closed {closed} of {len(sockets)} lying connections ({closed_share:.0%})")
    killed = workers.judge(verdict)
    what = "lying POST heads (Content-Length 1000, 20 bytes sent)" if lie else "silent connections"
    verdict.summary = (
        f"{len(sockets)} {what} opened in {opened:.1f} s ({failed} not), held {seconds:.0f} s: "
        f"/livez {len(in_time)} of {len(livez.replies)} within 3 s ({share:.0%}, worst "
        f"{worst(livez.replies):.1f} s; {tally(livez.replies)}); the server closed {closed} "
        f"({closed_share:.0%}), answers on them {dict(answers) or 'none'}; its /metrics counted closes "
        f"by the end: {counted or 'none'}; {killed}"
    )
    return verdict


@dataclass(frozen=True)
class ConnectionSeries:
    """A server's connection metrics (service/server/connection_metrics.py) from one read of its /metrics."""

    totals: dict[str, float]  # "accepted", "open", "capacity"
    closes: dict[str, float]  # connections it closed, by reason (dead workers' included)


def connection_series(server: Server) -> ConnectionSeries:
    """What the server's operator sees of its connections (one /metrics read: one connection more)."""
    by_reason = CLOSED + "_total{"
    samples = server.samples(PREFIX)
    closes = {series: value for series, value in samples.items() if series.startswith(by_reason)}
    return ConnectionSeries(
        totals={
            series.removeprefix(PREFIX).removesuffix("_total"): value
            for series, value in samples.items()
            if series not in closes
        },
        closes={series.split('"')[1]: value for series, value in closes.items()},
    )


def new_closes(before: dict[str, float], after: ConnectionSeries) -> dict[str, float]:
    """The close reasons whose counts changed since ``before`` (a reading's ``closes``), and by how much."""
    return {
        reason: count - before.get(reason, 0.0)
        for reason, count in after.closes.items()
        if count != before.get(reason, 0.0)
    }


# --- held uploads ------------------------------------------------------------------------------------------


def tree_rss(server: Server) -> int:
    """Resident memory of the master and its workers, bytes."""
    master = memory_of(server.pid)
    return (master.rss if master else 0) + sum(reading.rss for reading in server.memory().values())


def held_uploads(server: Server, *, count: int, seconds: float) -> Verdict:
    """``count`` uploads of 16 MiB − 1 byte, all but the last byte sent, held ``seconds``."""
    verdict = Verdict("uploads")
    workers = Workers(server)
    head = (
        b"POST /v1/softmax HTTP/1.1\r\nHost: attack\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(UPLOAD_BYTES).encode() + b"\r\n\r\n"
    )
    filler = b'{"logits": [' + b"0.125," * (UPLOAD_BYTES // 6 + 1)
    payload = memoryview(filler)[: UPLOAD_BYTES - 1]  # the last byte never comes
    peak = {"tree": 0}
    stopping = threading.Event()
    sent_in_full: list[bool] = []
    early: list[str] = []
    sockets: list[socket.socket] = []
    lock = threading.Lock()

    def sample() -> None:
        while not stopping.is_set():
            peak["tree"] = max(peak["tree"], tree_rss(server))
            stopping.wait(0.2)

    def upload() -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        except OSError as error:
            early.append(describe_error(error).split(":")[0])
            return
        with lock:
            sockets.append(sock)
        try:
            sock.sendall(head)
            sock.sendall(payload)
        except OSError as error:  # the server refused it (and closed), or stopped reading for 30 s
            early.append(describe_error(error).split(":")[0])
            sent_in_full.append(False)
            return
        sent_in_full.append(True)

    baseline = tree_rss(server)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.monotonic()
    uploaders = [threading.Thread(target=upload, daemon=True) for _ in range(count)]
    for thread in uploaders:
        thread.start()
    for thread in uploaders:
        thread.join(timeout=60)
    sending = time.monotonic() - started
    with Prober(
        server.port, "POST", "/v1/attention", slow_clients.SEED_BODY, interval=1.0, timeout=10.0
    ) as seeds:
        time.sleep(seconds)
    stopping.set()
    sampler.join()
    with lock:
        states = [closed_by_server(sock) for sock in sockets]
        for sock in sockets:
            sock.close()
    verdict.seconds = time.monotonic() - started
    answers = Counter(data.split(b" ", 2)[1].decode("latin-1") for _, data in states if data[:5] == b"HTTP/")
    if any(status.startswith("5") and status != "503" for status in answers):
        verdict.fail(f"answers to the uploads: {dict(answers)}")
    if peak["tree"] > TREE_RSS_LIMIT_BYTES:
        verdict.fail(f"the process tree's RSS reached {peak['tree'] / MIB:.0f} MiB (limit 1024 MiB)")
    answered = seeds.within(BYSTANDER_BOUND_SECONDS, seed_answered)
    if not seeds.replies or len(answered) < len(seeds.replies):
        verdict.fail(f"the worked example: {len(answered)} of {len(seeds.replies)} answered within 5 s")
    killed = workers.judge(verdict)
    verdict.summary = (
        f"{count} uploads of 16 MiB − 1 byte: {sum(sent_in_full)} sent but the last byte in {sending:.1f} s "
        f"({len(early)} cut short: {dict(Counter(early)) or 'none'}), held {seconds:.0f} s: process tree RSS "
        f"at most {peak['tree'] / MIB:.0f} MiB (from {baseline / MIB:.0f} MiB before); worked example "
        f"{len(answered)} of {len(seeds.replies)} "
        f"answered ({tally(seeds.replies)}, worst {worst(seeds.replies):.2f} s); answers on the uploads "
        f"{dict(answers) or 'none'}; {killed}"
    )
    return verdict


# --- Expect: 100-continue ----------------------------------------------------------------------------------


def read_for(sock: socket.socket, seconds: float, *, until_closed: bool = True) -> tuple[bytes, bool]:
    """Whatever arrives within ``seconds``, and whether the server closed the connection meanwhile."""
    deadline = time.monotonic() + seconds
    received = b""
    while (remaining := deadline - time.monotonic()) > 0:
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return received, False
        except OSError:
            return received, True
        if not chunk:
            return received, True
        received += chunk
        if not until_closed and b"\r\n\r\n" in received:
            return received, False
    return received, False


def status_lines(data: bytes) -> list[str]:
    """The status lines in the order the server sent them (``HTTP/1.1 100 Continue``, …)."""
    return [line.decode("latin-1") for line in data.split(b"\r\n") if line.startswith(b"HTTP/1.")]


def expect_continue(server: Server) -> Verdict:
    verdict = Verdict("expect")
    started = time.monotonic()
    head = (
        b"POST /v1/softmax HTTP/1.1\r\nHost: attack\r\nContent-Type: application/json\r\n"
        b"Expect: 100-continue\r\nContent-Length: 999999999\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(head)
        received, closed = read_for(sock, 5.0)
        statuses = status_lines(received)
        next_answered = "-"
        if not closed:  # the symptom: the connection drains the claimed body
            with contextlib.suppress(OSError):
                sock.sendall(b"GET /livez HTTP/1.1\r\nHost: attack\r\n\r\n")
            after, _ = read_for(sock, 3.0, until_closed=False)
            next_answered = "answered" if status_lines(after) else "not answered in 3 s"
    if not statuses or statuses[0].split(" ")[1:2] != ["413"]:
        verdict.fail(f"the first status line is {statuses[:1] or 'missing'}, not a 413")
    if any(line.split(" ")[1:2] == ["100"] for line in statuses):
        verdict.fail("the server sent 100 Continue for a body it refuses")
    if not closed:
        verdict.fail(f"the connection stayed open after the 413 (the next request: {next_answered})")
    # the same header on a small body must still work: 100 Continue (or not), then the answer
    seed = slow_clients.SEED_BODY
    small_head = (
        b"POST /v1/attention HTTP/1.1\r\nHost: attack\r\nContent-Type: application/json\r\n"
        b"Expect: 100-continue\r\nConnection: close\r\n"
        b"Content-Length: " + str(len(seed)).encode() + b"\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(small_head)
        interim, _ = read_for(sock, 1.0, until_closed=False)  # a client waits about 1 s, then sends
        sock.sendall(seed)
        rest, _ = read_for(sock, 5.0)
    small = status_lines(interim + rest)
    if not small or small[-1].split(" ")[1:2] != ["200"]:
        verdict.fail(f"a small body with Expect: 100-continue got {small}")
    verdict.seconds = time.monotonic() - started
    verdict.summary = (
        f"Expect: 100-continue + Content-Length 999999999: {statuses or ['no answer']}, connection "
        f"{'closed' if closed else 'kept open'}, the next request on it {next_answered}; a small body with "
        f"the header: {small}"
    )
    return verdict


def _probed_attack(
    server: Server, name: str, send: Callable[[socket.socket], None], bound: float
) -> tuple[Verdict, bytes, float, list[Reply]]:
    """``send`` on a connection of its own while ``/livez`` is probed; the answer read until closed."""
    verdict = Verdict(name)
    workers = Workers(server)
    started = time.monotonic()
    with Prober(server.port, "GET", "/livez", None, interval=0.2, timeout=PATIENCE_SECONDS) as probes:
        with socket.create_connection(("127.0.0.1", server.port), timeout=PATIENCE_SECONDS) as sock:
            sender = threading.Thread(target=send, args=(sock,), daemon=True)
            sender.start()
            answer, _ = read_for(sock, bound + 5.0)
            answered = time.monotonic() - started
            sender.join(PATIENCE_SECONDS)
        time.sleep(1.0)  # a probe or two after it
    _judge_livez(verdict, probes.replies)
    killed = workers.judge(verdict)
    verdict.seconds = time.monotonic() - started
    verdict.summary = f"/livez {tally(probes.replies)}, worst {worst(probes.replies):.2f} s; {killed}"
    return verdict, answer, answered, probes.replies


def _judge_livez(verdict: Verdict, replies: list[Reply]) -> None:
    late = [reply for reply in replies if not (livez_ok(reply) and reply.seconds <= LIVEZ_BOUND_SECONDS)]
    if late:
        verdict.fail(f"{len(late)} of {len(replies)} /livez not answered within 1 s: {tally(late)}")


def _refused_naming(verdict: Verdict, answer: bytes, seconds: float, bound: float, header: str) -> None:
    statuses = status_lines(answer)
    body = answer.partition(b"\r\n\r\n")[2]
    named = False
    with contextlib.suppress(ValueError, AttributeError):
        named = header in json.loads(body).get("errors", {})
    if statuses[:1] != ["HTTP/1.1 400 BAD REQUEST"] or not named:
        verdict.fail(f"answered {statuses[:1] or 'nothing'} {body[:160]!r}, not a 400 naming {header}")
    elif seconds > bound:
        verdict.fail(f"the 400 came after {seconds:.1f} s, over {bound:g} s")
    verdict.summary = f"{statuses[:1] or ['no answer']} after {seconds:.2f} s; " + verdict.summary


def gzip_members(server: Server) -> Verdict:
    body = gzip.compress(b"") * 240_000
    head = (
        b"POST /v1/softmax HTTP/1.1\r\nHost: attack\r\nContent-Type: application/json\r\n"
        b"Content-Encoding: gzip\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
    )

    def send(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.sendall(head + body)

    verdict, answer, seconds, _ = _probed_attack(server, "gzip-members", send, 5.0)
    _refused_naming(verdict, answer, seconds, 5.0, "Content-Encoding")
    return verdict


def tiny_chunks(server: Server) -> Verdict:
    body = b'{"logits":[0,1]}' + b" " * (2 * MIB - 16)
    wire = b"".join(b"1\r\n%c\r\n" % byte for byte in body) + b"0\r\n\r\n"
    head = (
        b"POST /v1/softmax HTTP/1.1\r\nHost: attack\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )

    def send(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the server closes once it has refused the body
            sock.sendall(head + wire)

    verdict, answer, seconds, _ = _probed_attack(server, "tiny-chunks", send, 10.0)
    _refused_naming(verdict, answer, seconds, 10.0, "Transfer-Encoding")
    return verdict


UNREAD_LOGITS = 2_000_000  # a body of 8 MB, an answer of about 10 MB
ANSWER_TIMEOUT_SECONDS = 10.0  # the default
SLOW_READ_BYTES = 16 * 1024  # what a slow reader takes each second: a step at every wait, never stalled
# How long unread-answers and slow-readers wait for every request to end: one may start once another's has
# been cut, about two timeouts in.
HELD_ANSWERS_BOUND = 2 * ANSWER_TIMEOUT_SECONDS + 10.0


LoggedLines = Callable[[], dict[str, dict[str, object]]]


def _large_answers(server: Server, ids: list[str]) -> tuple[bytes, Callable[[str], bytes], LoggedLines]:
    """The softmax body of a 10 MB answer, the request to send it with one of ``ids``, and the access lines
    of those requests logged so far (by id). A request ends when its answer has been cut (a streamed
    answer's access line is written then), or refused with a small 503 (the memory budget is held by the
    others' answers); reading a socket to see whether it was closed would feed its answer."""
    body = b'{"logits":[' + b"0.1," * (UNREAD_LOGITS - 1) + b"0.1]}"
    head = (
        b"POST /v1/softmax HTTP/1.1\r\nHost: attack\r\nContent-Type: application/json\r\n"
        b"X-Request-ID: %s\r\nContent-Length: %d\r\n\r\n"
    )

    def request(request_id: str) -> bytes:
        return head % (request_id.encode(), len(body)) + body

    def ended() -> dict[str, dict[str, object]]:
        lines = (json.loads(line) for line in list(server.stdout) if line.startswith("{"))
        return {str(line["request_id"]): line for line in lines if line.get("request_id") in ids}

    return body, request, ended


def _cut_for_reading(line: str) -> bool:
    """Whether a line of the server's log says it cut an answer: its client took none of it for
    ANSWER_TIMEOUT_SECONDS, or fell behind ANSWER_MIN_BYTES_PER_SECOND (for one that reads nothing,
    whichever comes first)."""
    return "took none of its answer" in line or "took its answer slower than" in line


def unread_answers(server: Server, *, clients: int = 3) -> Verdict:
    verdict = Verdict("unread-answers")
    workers = Workers(server)
    ids = [f"unread-{number}-{time.monotonic_ns()}" for number in range(clients)]
    body, request, ended = _large_answers(server, ids)
    started = time.monotonic()
    with Prober(server.port, "GET", "/livez", None, interval=0.5, timeout=PATIENCE_SECONDS) as probes:
        sockets = []
        try:
            for request_id in ids:
                sock = socket.socket()
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # and never read
                sock.settimeout(PATIENCE_SECONDS)
                sock.connect(("127.0.0.1", server.port))
                sock.sendall(request(request_id))
            seconds, lines = _await_ended(ended, clients, started)  # before the clients close: then all end
            cut = sum(_cut_for_reading(line) for line in server.stderr)
        finally:
            for sock in sockets:
                sock.close()
        read = fresh(server.port, "POST", "/v1/softmax", body, timeout=PATIENCE_SECONDS)
    judged = _judge_held_answers(verdict, workers, probes, read, lines, clients=clients, kind="unread")
    verdict.summary = (
        f"{len(lines)} of {clients} unread requests ended within {seconds:.1f} s ({cut} answers cut, {judged}"
    )
    verdict.seconds = time.monotonic() - started
    return verdict


def _judge_held_answers(
    verdict: Verdict,
    workers: Workers,
    probes: Prober,
    read: Reply,
    lines: dict[str, dict[str, object]],
    *,
    clients: int,
    kind: str,
) -> str:
    """What unread-answers and slow-readers share: every request ended within :data:`HELD_ANSWERS_BOUND`,
    the same request read afterwards is a 200, every /livez in time, no worker killed. Returns the end of the
    verdict's summary, from the statuses on."""
    if len(lines) < clients:
        held = clients - len(lines)
        verdict.fail(f"{held} of {clients} {kind} answers still held after {HELD_ANSWERS_BOUND:g} s")
    if read.status != 200:
        verdict.fail(f"the same request, read, got {outcome(read)} afterwards")
    _judge_livez(verdict, probes.replies)
    killed = workers.judge(verdict)
    statuses = Counter(str(line["status"]) for line in lines.values())
    return (
        f"statuses {dict(statuses)}); the same request read afterwards: {outcome(read)}; /livez "
        f"{tally(probes.replies)}, worst {worst(probes.replies):.2f} s; {killed}"
    )


def _await_ended(
    ended: LoggedLines, clients: int, started: float
) -> tuple[float, dict[str, dict[str, object]]]:
    """Wait until every one of the ``clients`` requests has its access line, or :data:`HELD_ANSWERS_BOUND`
    seconds from ``started``: the seconds it took and the lines."""
    while len(ended()) < clients and time.monotonic() - started < HELD_ANSWERS_BOUND:
        time.sleep(0.2)
    return time.monotonic() - started, ended()


def slow_readers(server: Server, *, clients: int = 3) -> Verdict:
    """Three clients ask for the 10 MB answer and read 16 KiB of it a second: a step within every
    ANSWER_TIMEOUT_SECONDS, so never stalled, and without a minimum rate each held its answer's share of the
    memory budget for 10 minutes (a 192 MiB answer: four hours). Pass: each request ends within the same
    bound as unread-answers (cut once behind ANSWER_MIN_BYTES_PER_SECOND, 256 KiB a second after the
    timeout's grace: about 12 s in), and the same request read at once is answered 200 afterwards."""
    verdict = Verdict("slow-readers")
    workers = Workers(server)
    ids = [f"slow-reader-{number}-{time.monotonic_ns()}" for number in range(clients)]
    body, request, ended = _large_answers(server, ids)
    taken = [0] * clients
    stop = threading.Event()

    def read_slowly(number: int) -> None:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            sock.settimeout(PATIENCE_SECONDS)
            sock.connect(("127.0.0.1", server.port))
            sock.sendall(request(ids[number]))
            sock.settimeout(1.0)  # a 503 keeps its connection open: the reader looks at ``stop`` every second
            with contextlib.suppress(ConnectionError):  # reset once cut
                while not stop.wait(1 / 16):
                    try:
                        chunk = sock.recv(SLOW_READ_BYTES // 16)
                    except TimeoutError:
                        continue
                    if not chunk:
                        break
                    taken[number] += len(chunk)

    started = time.monotonic()
    with Prober(server.port, "GET", "/livez", None, interval=0.5, timeout=PATIENCE_SECONDS) as probes:
        readers = [threading.Thread(target=read_slowly, args=(number,)) for number in range(clients)]
        for reader in readers:
            reader.start()
        try:
            seconds, lines = _await_ended(ended, clients, started)
        finally:
            stop.set()
            for reader in readers:
                reader.join(timeout=PATIENCE_SECONDS)
        cut = sum(_cut_for_reading(line) for line in server.stderr)
        read = fresh(server.port, "POST", "/v1/softmax", body, timeout=PATIENCE_SECONDS)
    judged = _judge_held_answers(verdict, workers, probes, read, lines, clients=clients, kind="slowly read")
    verdict.summary = (
        f"{len(lines)} of {clients} slowly read requests ended within {seconds:.1f} s ({cut} answers cut, "
        f"having taken {', '.join(f'{count / 1024:.0f}' for count in taken)} KiB; {judged}"
    )
    verdict.seconds = time.monotonic() - started
    return verdict
