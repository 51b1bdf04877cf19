"""The worker's connection metrics (service/server/connection_metrics.py), read from /metrics as an operator
reads them: connections open and accepted, and those the server closed, counted once each under the reason
it closed them for. Each count is checked against what the clients saw happen to their own connections.

Loopback only; every crowd and every wait is bounded in count and time.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from deploy.launch import TEST_TLS, Server, serving, start
from deploy.overload import closed_by_server
from service.server.connection_metrics import CLOSE_REASONS
from tests.sockets import silent_crowd

pytestmark = pytest.mark.gunicorn

SETTLE_SECONDS = 10.0  # the longest any test here waits for the server to act on a connection


@pytest.fixture(scope="module")
def quick() -> Iterator[Server]:
    """One worker with short deadlines: 1 s for a head, 2 s for a kept-alive connection's next request."""
    running = start(env={"HEADER_TIMEOUT_SECONDS": "1", "GUNICORN_KEEPALIVE": "2"}, workers=1)
    yield running
    assert running.terminate() == 0, running.log()


def connection_samples(server: Server) -> dict[str, float]:
    """The connection series on /metrics: ``accepted``, ``open``, ``capacity`` and each close reason."""
    text = httpx.get(server.url("/metrics"), timeout=10, verify=server.verify).text
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "attention_connections_closed_by_server_total":
                found[sample.labels["reason"]] = sample.value
            elif sample.name.startswith("attention_connections_"):
                found[sample.name.removeprefix("attention_connections_").removesuffix("_total")] = (
                    sample.value
                )
    return found


def until(server: Server, holds: Callable[[dict[str, float]], bool]) -> dict[str, float]:
    """The samples once ``holds`` is true of them, polled for at most :data:`SETTLE_SECONDS` (the last
    samples read, when it never held: the assertions that follow then show them)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    samples = connection_samples(server)
    while not holds(samples) and time.monotonic() < deadline:
        time.sleep(0.1)
        samples = connection_samples(server)
    return samples


def closes(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The close reasons whose counts changed between two readings, and by how much."""
    return {
        reason: after[reason] - before[reason] for reason in CLOSE_REASONS if after[reason] != before[reason]
    }


def ended_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (an orderly close or a reset), waiting for it at most
    :data:`SETTLE_SECONDS`."""
    sock.settimeout(SETTLE_SECONDS)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def test_every_series_is_there_from_the_start_at_zero() -> None:
    """An alert on a rate needs its series before the first event: a fresh server shows all of them, each
    reason at 0, the capacity of its workers, and the scrape's own connection, open and accepted."""
    with serving(env={"GUNICORN_WORKER_CONNECTIONS": "40"}, workers=2) as fresh:
        samples = until(fresh, lambda found: found.get("open") == 1)
    assert {reason: samples.get(reason) for reason in CLOSE_REASONS} == dict.fromkeys(CLOSE_REASONS, 0.0)
    assert samples["capacity"] == 80  # 2 workers of 40
    assert samples["open"] == 1  # this scrape's
    assert samples["accepted"] >= 1  # this scrape's, and the readiness probes' before it


def test_connections_are_counted_open_until_their_clients_close_them(quick: Server) -> None:
    before = until(quick, lambda found: found["open"] == 1)
    held = [socket.create_connection(("127.0.0.1", quick.port), timeout=10) for _ in range(5)]
    try:
        for sock in held:  # answered, so surely accepted: a request each, kept alive
            sock.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        during = until(quick, lambda found: found["open"] == 6)
    finally:
        for sock in held:
            sock.close()
    after = until(quick, lambda found: found["open"] == 1)
    assert during["open"] == 6  # the five and this scrape's
    assert during["accepted"] == before["accepted"] + 6  # the five, and one per scrape since
    assert after["open"] == 1
    assert closes(before, after) == {}  # the clients closed them, not the server


def test_a_head_that_never_ends_and_an_idle_kept_alive_connection_are_told_apart(quick: Server) -> None:
    """Three connections, each closed at a deadline: a first head sent in part (``head_timeout``, 1 s); a
    kept-alive connection that sends nothing more (``idle_timeout``, 2 s); one that starts its next head and
    does not finish it (``head_timeout``: once a head starts, it has the head deadline)."""
    before = until(quick, lambda found: found["open"] == 1)
    with (
        socket.create_connection(("127.0.0.1", quick.port), timeout=10) as partial,
        socket.create_connection(("127.0.0.1", quick.port), timeout=10) as idle,
        socket.create_connection(("127.0.0.1", quick.port), timeout=10) as restarted,
    ):
        partial.sendall(b"GET /livez HTTP/1.1\r\nHo")
        for sock in (idle, restarted):
            sock.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        restarted.sendall(b"GET /livez HTTP/1.1\r\n")
        assert [ended_by_server(sock) for sock in (partial, idle, restarted)] == [True, True, True]
    after = until(quick, lambda found: found["open"] == 1)
    assert closes(before, after) == {"head_timeout": 2, "idle_timeout": 1}


def test_a_crowd_closed_for_room_is_counted_as_its_clients_saw_it() -> None:
    """60 silent connections against a worker of 40 (crowded past 36): the sweep closes some of them to make
    room, and the count of ``crowded`` closes is the number the crowd saw closed, no more."""
    with serving(env={"GUNICORN_WORKER_CONNECTIONS": "40"}, workers=1) as small:
        before = until(small, lambda found: found["open"] == 1)
        with silent_crowd(small.port, 60) as crowd:
            assert httpx.get(small.url("/livez"), timeout=5).status_code == 200
            # Settled once the crowd's closes are all counted and the worker is no longer crowded.
            seen: list[int] = []

            def settled(found: dict[str, float]) -> bool:
                seen.append(sum(closed_by_server(sock)[0] for sock in crowd))
                return found["crowded"] - before["crowded"] == seen[-1] and found["open"] <= 36

            after = until(small, settled)
        # Past the crowd, closed by its own clients: open goes back to the scrape's alone.
        done = until(small, lambda found: found["open"] == 1)
    assert seen[-1] >= 60 - 36, f"only {seen[-1]} of the crowd were closed"
    assert closes(before, after) == {"crowded": seen[-1]}
    assert closes(after, done) == {}


def test_tls_connections_closed_for_their_handshake_are_counted_by_what_went_wrong() -> None:
    """An operator sees a misconfigured certificate or cipher list, or clients that speak plain HTTP to the
    TLS port, as counts, where the log has a debug line (a failed handshake is nearly always the client's
    doing, so it is not logged louder)."""
    with serving(env={"HEADER_TIMEOUT_SECONDS": "1"}, workers=1, tls=TEST_TLS) as secured:
        before = until(secured, lambda found: found["open"] == 1)
        with socket.create_connection(("127.0.0.1", secured.port), timeout=10) as plain:
            plain.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            with contextlib.suppress(ConnectionResetError):
                while chunk := plain.recv(65536):
                    answer += chunk
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:100]
        with socket.create_connection(("127.0.0.1", secured.port), timeout=10) as garbled:
            garbled.sendall(b"\x16\x03\x01\x00\x05hello")  # a TLS record that holds no ClientHello
            assert ended_by_server(garbled)
        with socket.create_connection(("127.0.0.1", secured.port), timeout=10) as silent:
            assert ended_by_server(silent)  # at the 1 s deadline
        after = until(secured, lambda found: found["open"] == 1)
    assert closes(before, after) == {"plain_http": 1, "tls_handshake_failed": 1, "tls_handshake_timeout": 1}
