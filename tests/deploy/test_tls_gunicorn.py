"""TLS served by gunicorn itself (``--certfile``/``--keyfile`` in ``GUNICORN_CMD_ARGS``): its handshake has
a deadline as a request head has, a crowd that never completes one cannot keep a probe out, a plain HTTP
request to the TLS port is told so, clients that fail their handshake leave no tracebacks in the log, and a
stop neither loses a connection accepted before it nor waits on one longer than a head deadline.

The certificate is the test one in deploy/test-tls (self-signed, for 127.0.0.1). Loopback only; every crowd
and every wait is bounded in count and time.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import socket
import ssl
import time
from collections.abc import Iterator

import httpx
import pytest

from deploy.attack import parse_answer
from deploy.launch import TEST_TLS as TLS
from deploy.launch import Server, serving, start
from deploy.overload import closed_by_server
from deploy.slow_clients import SEED_BODY
from tests.sockets import read_slowly, silent_crowd

pytestmark = pytest.mark.gunicorn

WORKER_CONNECTIONS = 40  # a small worker, so that a crowd of 60 fills it
CROWD = 60


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """One worker of 40 connections, the default head deadline (10 s), logging at debug level (the worker's
    lines about handshakes it closed)."""
    env = {"GUNICORN_WORKER_CONNECTIONS": str(WORKER_CONNECTIONS), "GUNICORN_LOG_LEVEL": "debug"}
    running = start(env=env, workers=1, tls=TLS)
    yield running
    assert running.terminate() == 0, running.log()


def _context(server: Server) -> ssl.SSLContext:
    assert server.tls_context is not None
    return server.tls_context


def _secured(server: Server) -> ssl.SSLSocket:
    return _context(server).wrap_socket(
        socket.create_connection(("127.0.0.1", server.port), timeout=10), server_hostname="127.0.0.1"
    )


def _read_to_end(sock: socket.socket) -> bytes:
    answer = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_the_worked_example_over_https_with_its_100_continue(server: Server) -> None:
    with _secured(server) as sock:
        sock.sendall(
            b"POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(SEED_BODY)
        )
        assert sock.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(SEED_BODY)
        head, _, body = _read_to_end(sock).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    answer = json.loads(body)
    assert answer["weights"] == pytest.approx([0.3302, 0.6698], abs=1e-4)
    assert answer["output"] == pytest.approx([1.9814, 2.0093], abs=1e-4)


def test_an_upload_refused_from_its_head_over_https_is_not_asked_for(server: Server) -> None:
    """The 100 is still held until the app reads the body, now that the worker wraps the socket itself: a
    body too large is refused with no ``100 Continue`` before the 413."""
    with _secured(server) as sock:
        sock.sendall(
            b"POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Expect: 100-continue\r\nContent-Length: 999999999\r\n\r\n"
        )
        answer = _read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b"100 Continue" not in answer


def test_a_connection_that_never_starts_its_handshake_is_closed_at_the_head_deadline() -> None:
    """gevent's server did the handshake before the worker saw the connection, with no deadline: a client
    that connected and sent nothing was never closed."""
    with serving(env={"HEADER_TIMEOUT_SECONDS": "1"}, workers=1, tls=TLS) as quick:
        with socket.create_connection(("127.0.0.1", quick.port), timeout=10) as silent:
            began = time.monotonic()
            with contextlib.suppress(ConnectionResetError):
                assert silent.recv(1) == b""
            waited = time.monotonic() - began
        with socket.create_connection(("127.0.0.1", quick.port), timeout=10) as partial:
            partial.sendall(b"\x16\x03\x01\x02\x00\x01")  # a ClientHello's first bytes, and no more
            with contextlib.suppress(ConnectionResetError):
                assert partial.recv(1) == b""
        assert httpx.get(quick.url("/livez"), verify=quick.verify, timeout=5).status_code == 200
    assert waited < 5, f"closed after {waited:.1f} s, past the 1 s head deadline"  # a bound, not a speed


def test_a_crowd_that_never_completes_a_handshake_cannot_keep_a_probe_out(server: Server) -> None:
    """60 silent connections against a worker that holds 40, well within their 10 s head deadline: the
    sweep for room closes the longest waiting handshakes, as it closes idle heads, so probes get in. Before,
    the handshakes were not the worker's to count or close, and every probe timed out."""
    with silent_crowd(server.port, CROWD) as crowd:
        for _ in range(3):
            answer = httpx.get(server.url("/livez"), verify=server.verify, timeout=5)
            assert answer.status_code == 200
        closed = sum(closed_by_server(sock)[0] for sock in crowd)
    assert closed >= CROWD - WORKER_CONNECTIONS, f"only {closed} silent connections were closed for room"


def test_plain_http_to_the_tls_port_is_a_400_that_says_so(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        raw = _read_to_end(sock)
    assert raw.startswith(b"HTTP/1.1 400 Bad Request\r\n"), raw[:200]
    answer = parse_answer(raw)
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["connection"] == "close"
    problem = json.loads(answer.body)
    assert problem["status"] == 400
    assert "https://" in problem["detail"]
    assert problem["error"] == problem["detail"]  # the Open Inference Protocol's member, as gunicorn's errors
    assert problem["request_id"] == answer.headers["x-request-id"]
    server.wait_for(
        lambda: any(f'"request_id":"{problem["request_id"]}"' in line for line in list(server.stdout)),
        "the access-log line of the 400",
        timeout=10,
    )


def test_failed_handshakes_are_logged_in_a_line_each_without_a_traceback(server: Server) -> None:
    """Clients that leave before or during their handshake, or send what is not TLS, are closed with one
    debug line each: gevent's server logged each of them with a traceback, so any client could fill the
    error log."""
    mark = len(server.stderr)
    hellos = (b"", b"\x16\x03\x01\x00\x05hello", b"\x16\x03\x01\x02\x00\x01", b"\x00\x01\x02 not tls")
    for hello in hellos:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(hello)
            # No more: the server sees the end of what it was sent, unless it has closed already (what is
            # not TLS may be refused at once: ENOTCONN here once in CI).
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            _read_to_end(sock)

    def lines(saying: str) -> list[str]:
        return [line for line in list(server.stderr)[mark:] if saying in line]

    def failed() -> list[str]:
        return lines("its TLS handshake failed") + lines("its client left during the TLS handshake")

    server.wait_for(lambda: len(failed()) >= len(hellos), "a debug line for each failed handshake", 10)
    assert len(failed()) == len(hellos), failed()
    # Leaving before sending anything, or within a record, is the client's doing; the others are failures.
    assert len(lines("its client left")) == 2, failed()
    assert not [line for line in list(server.stderr)[mark:] if "Traceback" in line], server.log()
    assert httpx.get(server.url("/livez"), verify=server.verify, timeout=5).status_code == 200


class _StepwiseClient:
    """A TLS client over memory buffers, so a test can send its ClientHello in parts."""

    def __init__(self, server: Server, sock: socket.socket) -> None:
        self.sock = sock
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = _context(server).wrap_bio(self.incoming, self.outgoing, server_hostname="127.0.0.1")

    def hello(self) -> bytes:
        with contextlib.suppress(ssl.SSLWantReadError):
            self.tls.do_handshake()
        return self.outgoing.read()

    def finish_handshake(self) -> None:
        for _ in range(10):  # a TLS 1.3 or 1.2 handshake takes one or two round trips
            try:
                self.tls.do_handshake()
            except ssl.SSLWantReadError:
                self.sock.sendall(self.outgoing.read())
                data = self.sock.recv(65536)
                assert data, "the server closed the connection during the handshake"
                self.incoming.write(data)
            else:
                self.sock.sendall(self.outgoing.read())
                return
        raise AssertionError("no handshake after 10 round trips")

    def exchange(self, request: bytes) -> bytes:
        """Send ``request`` and read its answer until the server closes the connection."""
        self.tls.write(request)
        self.sock.sendall(self.outgoing.read())
        answer = b""
        while data := self.sock.recv(65536):
            self.incoming.write(data)
            with contextlib.suppress(ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                while chunk := self.tls.read(65536):
                    answer += chunk
        return answer


def _wait_until_refused(port: int, seconds: float = 10.0) -> None:
    """Until no one listens on ``port`` (the master and its worker have closed the listening socket)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except ConnectionRefusedError:
            return
        time.sleep(0.05)
    raise AssertionError(f"port {port} still listened on after {seconds} s")


def _accepted_before_now(server: Server) -> None:
    """Every connection opened so far has been accepted: the listening socket's queue is first in, first out,
    so a probe opened now and answered was accepted after them (one worker)."""
    assert httpx.get(server.url("/livez"), verify=server.verify, timeout=10).status_code == 200


def test_a_handshake_that_ends_while_the_server_stops_still_gets_its_answer() -> None:
    """A connection accepted before a stop has its first request served, as one without TLS has: gunicorn
    read the name of the connection's listener once the handshake was done, the stop had closed it by then,
    and the request was lost (EBADF, with a traceback)."""
    stopping = start(workers=1, tls=TLS)
    try:
        with socket.create_connection(("127.0.0.1", stopping.port), timeout=10) as sock:
            client = _StepwiseClient(stopping, sock)
            hello = client.hello()
            sock.sendall(hello[:1])
            _accepted_before_now(stopping)  # the worker waits in this one's handshake
            stopping.process.send_signal(signal.SIGTERM)
            _wait_until_refused(stopping.port)  # the stop has closed the listening socket
            sock.sendall(hello[1:])
            client.finish_handshake()
            answer = client.exchange(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 "), answer or stopping.log()
        assert b"Connection: close" in answer.partition(b"\r\n\r\n")[0]
    finally:
        assert stopping.terminate() == 0, stopping.log()
    assert not [line for line in stopping.stderr if "Traceback" in line], stopping.log()


def test_while_the_server_stops_a_handshake_and_its_head_share_one_deadline() -> None:
    """A connection accepted before a stop whose handshake takes most of ``HEADER_TIMEOUT_SECONDS`` (4 s
    here) and which then sends no head is closed when that time is up, from its accept: the handshake's
    deadline and then a whole one for the head held the stop twice as long (6.5 s here; 20 s, the whole
    ``GUNICORN_GRACEFUL_TIMEOUT``, with the defaults), where a connection without TLS holds it for one."""
    stopping = start(env={"HEADER_TIMEOUT_SECONDS": "4"}, workers=1, tls=TLS)
    try:
        with socket.create_connection(("127.0.0.1", stopping.port), timeout=10) as sock:
            connected = time.monotonic()
            client = _StepwiseClient(stopping, sock)
            hello = client.hello()
            sock.sendall(hello[:1])
            _accepted_before_now(stopping)
            stopping.process.send_signal(signal.SIGTERM)
            _wait_until_refused(stopping.port)
            time.sleep(max(0.0, connected + 2.5 - time.monotonic()))
            sock.sendall(hello[1:])
            client.finish_handshake()  # at about 2.5 s; then no head
            _read_to_end(sock)
            closed = time.monotonic() - connected
    finally:
        assert stopping.terminate() == 0, stopping.log()
    # about 4 s (the deadline from the accept); 6.5 s before: a bound with room for a slow machine
    assert closed < 5.5, f"closed {closed:.1f} s after it connected"


LOGITS = 2_000_000  # a softmax answer of about 10 MB
LARGE_ANSWER = b'{"logits":[' + b"0.1," * (LOGITS - 1) + b"0.1]}"
LARGE_HEAD = (
    b"POST /v1/softmax HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n" % len(LARGE_ANSWER)
)


def _secured_with_window(server: Server, receive_buffer: int) -> ssl.SSLSocket:
    """A TLS connection whose receive buffer (so its TCP window) is set before it connects."""
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    raw.settimeout(30)
    raw.connect(("127.0.0.1", server.port))
    return _context(server).wrap_socket(raw, server_hostname="127.0.0.1")


def test_answers_over_https_keep_their_deadlines() -> None:
    """Under TLS a send is all or nothing, and gevent's waited without the timer the worker gave it: no answer
    was ever cut, so a client reading nothing, or reading 128 KiB a second against a minimum of 1 MiB, held
    its answer (and its share of the memory budget) for as long as it liked (not cut in 25 s here, with a
    timeout of 1 s). Answers now go to a TLS connection in 64 KiB pieces under the timer: the slow reader is
    cut within seconds, the one that reads nothing too, and one that reads at once gets all 10 MB."""
    env = {"ANSWER_TIMEOUT_SECONDS": "1", "ANSWER_MIN_BYTES_PER_SECOND": str(1024 * 1024)}
    with serving(env=env, workers=1, tls=TLS) as running:
        connection = http.client.HTTPSConnection(
            "127.0.0.1", running.port, context=_context(running), timeout=30
        )
        try:
            connection.request("POST", "/v1/softmax", LARGE_ANSWER, {"Content-Type": "application/json"})
            answer = connection.getresponse()
            assert answer.status == 200
            assert len(json.loads(answer.read())["probabilities"]) == LOGITS
        finally:
            connection.close()

        with _secured_with_window(running, 65536) as sock:
            sock.sendall(LARGE_HEAD + LARGE_ANSWER)
            taken, seconds = read_slowly(sock)
        assert 0 < taken < 8_000_000
        assert seconds < 15
        assert running.wait_for(lambda: running.stderr_contains("slower than"), "the warning") is not False

        with _secured_with_window(running, 4096) as sock:  # and reads nothing
            sock.sendall(LARGE_HEAD + LARGE_ANSWER)
            started = time.monotonic()
            cut = running.wait_for(
                lambda: sum("closed the connection from" in line for line in list(running.stderr)) >= 2,
                "the second cut",
            )
            assert cut is not False
            assert time.monotonic() - started < 15
        closed = running.samples("attention_connections_closed_by_server_total")
        assert sum(closed.values()) == 2, closed
