"""The service as operators run it: gunicorn with gunicorn_settings.py, on a free loopback port.

Each server takes a second or two to start, so tests share one where they can. Slow requests are served
by the tests' wrapper app (``tests/deploy/slow_app.py``), which adds an ``X-Test-Delay`` header.
"""

from __future__ import annotations

import email.utils
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from deploy.launch import Server, start
from service.protocols.declarations.attention import EXAMPLE as ATTENTION_EXAMPLE_REQUEST
from tests.deploy import slow_app

pytestmark = pytest.mark.gunicorn

SEED = ATTENTION_EXAMPLE_REQUEST  # the course's worked example
SEED_WEIGHTS = [0.3302384506733431, 0.6697615493266569]  # softmax([0, 1/√2])


@pytest.fixture(scope="module")
def metrics_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("metrics")
    (directory / "counter_999999.db").write_bytes(b"left over by an earlier run")
    return directory


@pytest.fixture(scope="module")
def server(metrics_dir: Path) -> Iterator[Server]:
    running = start(slow_app.APP, {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}, workers=2)
    yield running
    assert running.terminate() == 0, running.log()


def _requests_total(server: Server, endpoint: str, status: str) -> float:
    text = httpx.get(server.url("/metrics")).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name == "attention_http_requests_total"
                and labels.get("endpoint") == endpoint
                and labels.get("status") == status
            ):
                return sample.value
    return 0.0


def _access_lines(server: Server) -> list[dict[str, object]]:
    return [json.loads(line) for line in list(server.stdout) if line.startswith("{")]


def _served(server: Server, ids: list[str]) -> dict[object, object]:
    """Request id → the pid whose access-log line names it, for the ``ids`` logged so far."""
    return {line["request_id"]: line["pid"] for line in _access_lines(server) if line["request_id"] in ids}


@pytest.mark.parametrize("path", ["/livez", "/readyz", "/healthz"])
def test_probes(server: Server, path: str) -> None:
    response = httpx.get(server.url(path))
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_the_seed_example(server: Server) -> None:
    response = httpx.post(server.url("/v1/attention"), json=SEED)
    assert response.status_code == 200
    assert response.json()["weights"] == pytest.approx(SEED_WEIGHTS, rel=1e-12)


@pytest.mark.parametrize(
    ("request_head", "status"),
    [
        (b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),  # request line over 4 KiB
        (b"POST /v1/softmax HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
    ],
    ids=["request-line-too-long", "negative-content-length"],
)
def test_gunicorns_own_errors_are_problem_json(server: Server, request_head: bytes, status: int) -> None:
    asked = time.time()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request_head)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode())
    assert b"Content-Type: application/problem+json" in head
    # RFC 9110 section 6.6.1: an origin server with a clock sends Date in every 4xx, as the app's answers do
    fields = dict(line.split(": ", 1) for line in head.decode("latin-1").split("\r\n")[1:])
    sent = email.utils.parsedate_to_datetime(fields["Date"]).timestamp()
    assert asked - 1 <= sent <= time.time() + 1  # the date has whole seconds
    problem = json.loads(body)
    assert problem["status"] == status
    assert problem["title"]
    assert problem["detail"]


def test_stale_metric_files_were_cleaned_at_start(server: Server, metrics_dir: Path) -> None:
    assert not (metrics_dir / "counter_999999.db").exists()


@pytest.fixture(scope="module")
def sync_server() -> Iterator[Server]:
    """Two sync workers: each holds one request at a time, so four held requests must reach both.

    (A gevent worker, the default, may take all four itself; the metrics add up the same either way.)
    """
    running = start(slow_app.APP, {"GUNICORN_WORKER_CLASS": "sync"}, workers=2)
    yield running
    assert running.terminate() == 0, running.log()


def test_metrics_count_requests_across_both_workers(sync_server: Server) -> None:
    server = sync_server
    before = _requests_total(server, "/v1/softmax", "200")
    ids = [f"metrics-{n}" for n in range(4)]

    def call(request_id: str) -> int:
        headers = {"X-Request-ID": request_id, "X-Test-Delay": "0.4"}
        return httpx.post(server.url("/v1/softmax"), json={"logits": [1.0, 2.0]}, headers=headers).status_code

    # four held requests at once on two single-threaded workers: both workers must take some
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(call, ids)) == [200] * 4
    server.wait_for(lambda: len(_served(server, ids)) == 4, "the four access-log lines")
    served_by = set(_served(server, ids).values())
    assert len(served_by) == 2
    assert served_by <= server.worker_pids()
    assert _requests_total(server, "/v1/softmax", "200") - before == 4


def test_request_id_is_echoed_and_logged(server: Server) -> None:
    response = httpx.post(
        server.url("/v1/softmax"), json={"logits": "x"}, headers={"X-Request-ID": "gunicorn-echo-1"}
    )
    assert response.status_code == 422
    assert response.headers["X-Request-ID"] == "gunicorn-echo-1"
    assert response.json()["request_id"] == "gunicorn-echo-1"
    server.wait_for(
        lambda: any(line["request_id"] == "gunicorn-echo-1" for line in _access_lines(server)), "the log line"
    )
    (line,) = [line for line in _access_lines(server) if line["request_id"] == "gunicorn-echo-1"]
    assert (line["method"], line["path"], line["status"]) == ("POST", "/v1/softmax", 422)
    assert line["bytes"] == len(response.content)
    # gunicorn's own access log is off: the request appears once, as JSON
    assert not any("gunicorn-echo-1" in err for err in server.stderr)


def test_cors_preflight(server: Server) -> None:
    response = httpx.options(
        server.url("/v1/attention"),
        headers={
            "Origin": "https://widget.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "Content-Type, X-Request-ID",
        },
    )
    assert response.status_code == 200
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert response.headers["Access-Control-Max-Age"] == "600"
    assert "x-request-id" in response.headers["Access-Control-Allow-Headers"].lower()


def test_api_keys_accept_and_reject() -> None:
    server = start(env={"API_KEYS": "alpha-key,beta-key"}, workers=1)
    try:
        url = server.url("/v1/attention")
        accepted = httpx.post(url, json=SEED, headers={"Authorization": "Bearer beta-key"})
        assert accepted.status_code == 200
        assert accepted.json()["weights"] == pytest.approx(SEED_WEIGHTS, rel=1e-12)
        refused = httpx.post(url, json=SEED, headers={"Authorization": "Bearer gamma-key"})
        assert refused.status_code == 401
        assert refused.headers["Content-Type"] == "application/problem+json"
        assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        assert httpx.post(url, json=SEED).status_code == 401
        assert httpx.get(server.url("/readyz")).status_code == 200
        assert httpx.get(server.url("/metrics")).status_code == 200
    finally:
        assert server.terminate() == 0, server.log()


def test_sigterm_lets_the_request_in_flight_finish_and_exits_0() -> None:
    server = start(slow_app.APP, workers=1)
    answer: dict[str, httpx.Response] = {}

    def slow_call() -> None:
        answer["response"] = httpx.post(
            server.url("/v1/attention"), json=SEED, headers={"X-Test-Delay": "1.5"}, timeout=30
        )

    caller = threading.Thread(target=slow_call)
    caller.start()
    server.wait_for(lambda: server.stderr_contains("test delay: holding"), "the request to be in flight")
    assert server.terminate() == 0, server.log()
    caller.join(timeout=30)
    response = answer["response"]
    assert response.status_code == 200
    assert response.json()["weights"] == pytest.approx(SEED_WEIGHTS, rel=1e-12)
    assert server.stderr_contains("Shutting down: Master")


def test_a_killed_worker_is_replaced_while_the_service_keeps_answering() -> None:
    server = start(workers=2)
    try:
        before = server.worker_pids()
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        statuses = []

        def replaced() -> bool:
            statuses.append(httpx.post(server.url("/v1/softmax"), json={"logits": [0.0, 1.0]}).status_code)
            pids = server.worker_pids()
            return len(pids) == 2 and victim not in pids

        server.wait_for(replaced, "a replacement worker", timeout=30)
        assert statuses
        assert set(statuses) == {200}
        for _ in range(10):
            assert httpx.get(server.url("/readyz")).status_code == 200
        assert len(server.worker_pids() - before) == 1
    finally:
        assert server.terminate() == 0, server.log()


@pytest.mark.parametrize("in_flight", [False, True], ids=["idle", "in-flight"])
def test_a_stop_closes_kept_alive_connections_instead_of_waiting_out_the_grace_period(
    in_flight: bool,
) -> None:
    """A connection kept alive between requests waits for a head that may never come; gunicorn waits for
    every connection before a stopping worker exits, so one idle client made every stop (and every
    recycling after GUNICORN_MAX_REQUESTS) last GUNICORN_GRACEFUL_TIMEOUT. So did one whose request was in
    flight as the stop began: its answer said keep-alive, and the connection then waited for the next."""
    server = start(slow_app.APP, env={"GUNICORN_GRACEFUL_TIMEOUT": "30"}, workers=1)
    try:
        _stop_while_kept_alive(server, in_flight=in_flight)
    finally:
        assert server.terminate() == 0, server.log()


def _stop_while_kept_alive(server: Server, *, in_flight: bool) -> None:
    body = json.dumps(SEED).encode()
    delay = b"X-Test-Delay: 1.5\r\n" if in_flight else b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as sock:
        sock.sendall(
            b"POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + delay
            + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        if in_flight:
            server.wait_for(lambda: server.stderr_contains("test delay: holding"), "the request in flight")
            server.process.send_signal(signal.SIGTERM)
        answer = b""
        while b"empty_rows" not in answer:  # the whole answer: the connection is then kept alive
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200"), answer
        if not in_flight:
            server.process.send_signal(signal.SIGTERM)
        # The server closes it (the recv returns b"") long before the 30 s of grace: this socket's 15 s
        # timeout raises if it does not.
        assert sock.recv(65536) == b""


@pytest.fixture(scope="module")
def recycling_server() -> Iterator[Server]:
    """One worker, recycled after every 20 requests."""
    running = start(env={"GUNICORN_MAX_REQUESTS": "20", "GUNICORN_MAX_REQUESTS_JITTER": "0"}, workers=1)
    yield running
    assert running.terminate() == 0, running.log()


def test_a_worker_recycled_in_the_middle_of_a_pipeline_loses_none_of_the_answers_it_sent(
    recycling_server: Server,
) -> None:
    """A client that sends its requests at once (pipelining) and reads later: the worker that stops after
    its 20th request ends the connection with most of them unread. Closed so, the kernel reset it, and the
    answers still queued to send were lost (up to 3 of 50 in a hostile review, a reset every time here, where
    the client's small receive buffer keeps them queued); the worker now lingers as it closes."""
    server = recycling_server
    body = json.dumps(SEED).encode()
    requests = [
        b"POST /v1/attention HTTP/1.1\r\nHost: x\r\nX-Request-ID: pipelined-%d\r\n" % number
        + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        + body
        for number in range(400)
    ]
    received = b""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the answers wait in the server's queue
        sock.settimeout(15)
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(b"".join(requests))
        time.sleep(1.0)  # the worker has answered what it will, and stopped
        while chunk := sock.recv(65536):  # a reset raises here
            received += chunk
    time.sleep(0.5)  # the access log's lines are read
    answers = received.split(b"HTTP/1.1 ")[1:]
    assert answers, received[:300]
    assert all(answer.startswith(b"200 ") for answer in answers), received[:300]
    assert b"Connection: close" in answers[-1]
    logged = {line["request_id"] for line in _access_lines(server)} & {f"pipelined-{n}" for n in range(400)}
    assert {
        f"pipelined-{n}" for n in range(len(answers))
    } == logged  # each answer sent was received, in order
