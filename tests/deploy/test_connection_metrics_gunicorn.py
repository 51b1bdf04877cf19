"""The worker's connection metrics (service/server/connection_metrics.py), read from /metrics as an operator
reads them: connections open and accepted, and those the server closed, counted once each under the reason
it closed them for. Each count is checked against what the clients saw happen to their own connections.

Loopback only; every crowd and every wait is bounded in count and time.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable, Iterator

import httpx
import pytest

from deploy.launch import TEST_TLS, Server, serving, start
from deploy.overload import ConnectionSeries, closed_by_server, connection_series, new_closes, read_for
from service.server.connection_metrics import CLOSE_REASONS
from tests.sockets import silent_crowd

pytestmark = pytest.mark.gunicorn

SETTLE_SECONDS = 10.0  # the longest any test here waits for the server to act on a connection
LIVEZ = b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture(scope="module")
def quick() -> Iterator[Server]:
    """One worker with short deadlines: 1 s for a head, 2 s for a kept-alive connection's next request."""
    running = start(env={"HEADER_TIMEOUT_SECONDS": "1", "GUNICORN_KEEPALIVE": "2"}, workers=1)
    yield running
    assert running.terminate() == 0, running.log()


def until(server: Server, holds: Callable[[ConnectionSeries], bool]) -> tuple[ConnectionSeries, int]:
    """The connection series once ``holds`` is true of them (within :data:`SETTLE_SECONDS`, or the test fails
    with the server's log), and how many reads of /metrics that took: each is a connection accepted."""
    reads: list[ConnectionSeries] = []

    def read_holds() -> bool:
        reads.append(connection_series(server))
        return holds(reads[-1])

    server.wait_for(read_holds, "the connection metrics", timeout=SETTLE_SECONDS)
    return reads[-1], len(reads)


def only_scrapes_open(series: ConnectionSeries) -> bool:
    """No connection open but the read's own (those closed by their clients before have been seen closed)."""
    return series.totals["open"] == 1


def closed_within_settle(sock: socket.socket) -> bool:
    """Whether the server closes ``sock`` within :data:`SETTLE_SECONDS`."""
    return read_for(sock, SETTLE_SECONDS)[1]


def test_every_series_is_there_from_the_start_at_zero() -> None:
    """An alert on a rate needs its series before the first event: a fresh server shows all of them, each
    reason at 0, the capacity of its workers, and the read's own connection open."""
    with serving(env={"GUNICORN_WORKER_CONNECTIONS": "40"}, workers=2) as fresh:
        series, _ = until(fresh, only_scrapes_open)
    assert series.closes == dict.fromkeys(CLOSE_REASONS, 0.0)
    assert series.totals["capacity"] == 80  # 2 workers of 40
    assert series.totals["accepted"] >= 1  # (the readiness probes' and reads' connections before it too)


def test_connections_are_counted_open_until_their_clients_close_them(quick: Server) -> None:
    before, _ = until(quick, only_scrapes_open)
    held = [socket.create_connection(("127.0.0.1", quick.port), timeout=10) for _ in range(5)]
    try:
        for sock in held:  # answered, so surely accepted: a request each, kept alive
            sock.sendall(LIVEZ)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        during, reads = until(quick, lambda series: series.totals["open"] == 6)  # the five and the read's
    finally:
        for sock in held:
            sock.close()
    after, _ = until(quick, only_scrapes_open)
    assert during.totals["accepted"] == before.totals["accepted"] + 5 + reads
    assert new_closes(before.closes, after) == {}  # the clients closed them, not the server


def test_a_head_that_never_ends_and_an_idle_kept_alive_connection_are_told_apart(quick: Server) -> None:
    """Three connections, each closed at a deadline: a first head sent in part (``head_timeout``, 1 s); a
    kept-alive connection that sends nothing more (``idle_timeout``, 2 s); one that starts its next head and
    does not finish it (``head_timeout``: once a head starts, it has the head deadline)."""
    before, _ = until(quick, only_scrapes_open)
    with (
        socket.create_connection(("127.0.0.1", quick.port), timeout=10) as partial,
        socket.create_connection(("127.0.0.1", quick.port), timeout=10) as idle,
        socket.create_connection(("127.0.0.1", quick.port), timeout=10) as restarted,
    ):
        partial.sendall(b"GET /livez HTTP/1.1\r\nHo")
        for sock in (idle, restarted):
            sock.sendall(LIVEZ)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        restarted.sendall(b"GET /livez HTTP/1.1\r\n")
        assert [closed_within_settle(sock) for sock in (partial, idle, restarted)] == [True, True, True]
    after, _ = until(quick, only_scrapes_open)
    assert new_closes(before.closes, after) == {"head_timeout": 2, "idle_timeout": 1}


def test_a_crowd_closed_for_room_is_counted_as_its_clients_saw_it() -> None:
    """60 silent connections against a worker of 40 (crowded past 36): the sweep closes some of them to make
    room, and the count of ``crowded`` closes is the number the crowd saw closed, no more."""
    with serving(env={"GUNICORN_WORKER_CONNECTIONS": "40"}, workers=1) as small:
        before, _ = until(small, only_scrapes_open)
        with silent_crowd(small.port, 60) as crowd:
            assert httpx.get(small.url("/livez"), timeout=5).status_code == 200
            seen: list[int] = []  # how many of the crowd had seen their connection closed, at each read

            def settled(series: ConnectionSeries) -> bool:
                """The crowd's closes all counted, and the worker no longer crowded."""
                seen.append(sum(closed_by_server(sock)[0] for sock in crowd))
                return series.closes["crowded"] - before.closes["crowded"] == seen[-1] and (
                    series.totals["open"] <= 36
                )

            after, _ = until(small, settled)
        done, _ = until(small, only_scrapes_open)  # the rest closed by their own clients
    assert seen[-1] >= 60 - 36, f"only {seen[-1]} of the crowd were closed"
    assert new_closes(before.closes, after) == {"crowded": seen[-1]}
    assert new_closes(after.closes, done) == {}


def test_a_kept_alive_connection_closed_as_its_worker_is_recycled_counts_as_stopping() -> None:
    """A worker recycled after GUNICORN_MAX_REQUESTS closes its kept-alive connections as it stops; the
    next worker's /metrics still shows the count (the dead worker's samples are kept), and the dead worker's
    open connections are no longer counted."""
    env = {"GUNICORN_MAX_REQUESTS": "40", "GUNICORN_MAX_REQUESTS_JITTER": "0"}
    with serving(env=env, workers=1) as recycling:
        first_worker = recycling.worker_pids()
        before, _ = until(recycling, only_scrapes_open)
        with socket.create_connection(("127.0.0.1", recycling.port), timeout=10) as kept:
            kept.sendall(LIVEZ)
            assert kept.recv(65536).startswith(b"HTTP/1.1 200 ")
            for _ in range(40):  # requests on other connections, until the worker's count runs out
                answer = httpx.get(recycling.url("/livez"), headers={"Connection": "close"}, timeout=10)
                assert answer.status_code == 200
                if read_for(kept, 0.05)[1]:
                    break
            assert closed_within_settle(kept)
        recycling.wait_for(lambda: recycling.worker_pids().isdisjoint(first_worker), "the next worker")
        recycling.wait_for(recycling.ready, "the next worker to serve")
        after, _ = until(recycling, only_scrapes_open)
    assert new_closes(before.closes, after) == {"stopping": 1}
    assert after.totals["capacity"] == before.totals["capacity"]  # one live worker's, as before


def test_tls_connections_closed_for_their_handshake_are_counted_by_what_went_wrong() -> None:
    """An operator sees a certificate its clients refuse, clients that speak no TLS the server takes, or
    plain HTTP sent to the TLS port, as counts, where the log has a debug line (a failed handshake is nearly
    always the client's doing, so it is not logged louder). A client that connects and closes before its
    handshake (as a balancer's TCP check does) closed the connection itself: not counted."""
    with serving(env={"HEADER_TIMEOUT_SECONDS": "1"}, workers=1, tls=TEST_TLS) as secured:
        before, _ = until(secured, only_scrapes_open)
        answered = 'attention_http_requests_total{endpoint="<unmatched>",method="other",status="400"}'
        answered_before = secured.sample(answered)
        with socket.create_connection(("127.0.0.1", secured.port), timeout=10) as plain:
            plain.sendall(LIVEZ)
            answer, closed = read_for(plain, SETTLE_SECONDS)
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:100]
        assert closed
        assert secured.sample(answered) == answered_before + 1  # its answer, in the HTTP metrics
        with socket.create_connection(("127.0.0.1", secured.port), timeout=10) as garbled:
            garbled.sendall(b"\x16\x03\x01\x00\x05hello")  # a TLS record that holds no ClientHello
            assert closed_within_settle(garbled)
        refusing = ssl.create_default_context()  # trusts the system's CAs, not the test certificate's
        with (
            socket.create_connection(("127.0.0.1", secured.port), timeout=10) as sock,
            pytest.raises(ssl.SSLCertVerificationError),
        ):
            refusing.wrap_socket(sock, server_hostname="127.0.0.1")
        with socket.create_connection(("127.0.0.1", secured.port), timeout=10) as silent:
            assert closed_within_settle(silent)  # at the 1 s deadline
        socket.create_connection(("127.0.0.1", secured.port), timeout=10).close()  # a TCP check
        after, _ = until(secured, lambda series: only_scrapes_open(series) and series.totals["accepted"] > 0)
    assert new_closes(before.closes, after) == {
        "plain_http": 1,
        "tls_handshake_failed": 2,
        "tls_handshake_timeout": 1,
    }
