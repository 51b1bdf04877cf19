"""The overload scenarios' own judgement (deploy/overload.py): what counts as closed, answered, shed."""

from __future__ import annotations

import json
import select
import socket
import threading
from collections.abc import Iterator

import orjson
import pytest

from deploy import overload
from service.web.garbage import collection_paused


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected pair of TCP sockets on loopback: (the attacker's end, the server's end)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    with client, server:
        yield client, server


def _until_readable(client: socket.socket) -> None:
    """closed_by_server reads without waiting: the server's bytes must have crossed loopback first."""
    readable, _, _ = select.select([client], [], [], 5)
    assert readable


def test_an_open_connection_is_not_closed_by_the_server(pair: tuple[socket.socket, socket.socket]) -> None:
    client, _ = pair
    assert overload.closed_by_server(client) == (False, b"")


def test_an_answer_then_the_end_of_stream_is_closed_with_its_answer(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, server = pair
    server.sendall(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n")
    server.shutdown(socket.SHUT_WR)
    _until_readable(client)
    closed, received = overload.closed_by_server(client)
    assert closed
    assert received == b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n"


def test_an_answer_on_a_connection_left_open_is_not_closed(pair: tuple[socket.socket, socket.socket]) -> None:
    client, server = pair
    server.sendall(b"HTTP/1.1 413 Payload Too Large\r\n\r\n")
    _until_readable(client)
    closed, received = overload.closed_by_server(client)
    assert not closed
    assert received == b"HTTP/1.1 413 Payload Too Large\r\n\r\n"


def test_read_for_sees_an_interim_answer_and_the_close(pair: tuple[socket.socket, socket.socket]) -> None:
    client, server = pair
    server.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    server.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n")
    server.close()
    received, closed = overload.read_for(client, 2.0)
    assert closed
    assert overload.status_lines(received) == ["HTTP/1.1 100 Continue", "HTTP/1.1 413 Payload Too Large"]


def test_read_for_stops_at_its_deadline_on_a_silent_connection(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, _ = pair
    assert overload.read_for(client, 0.2) == (b"", False)


def test_a_503_is_shed_only_with_retry_after() -> None:
    assert overload.Reply(0.0, 0.1, status=503, retry_after="1").shed_or_ok()
    assert not overload.Reply(0.0, 0.1, status=503).shed_or_ok()
    assert overload.Reply(0.0, 0.1, status=200).shed_or_ok()
    assert not overload.Reply(0.0, 0.1, status=500, retry_after="1").shed_or_ok()
    assert not overload.Reply(0.0, 0.1, error="reset: [Errno 104]").shed_or_ok()


def test_the_worked_example_is_judged_by_its_weights() -> None:
    right = json.dumps({"weights": list(overload.slow_clients.SEED_WEIGHTS), "output": [2.0, 2.0]}).encode()
    wrong = json.dumps({"weights": [0.5, 0.5]}).encode()
    assert overload.seed_answered(overload.Reply(0.0, 0.1, status=200, body=right))
    assert not overload.seed_answered(overload.Reply(0.0, 0.1, status=200, body=wrong))
    assert not overload.seed_answered(overload.Reply(0.0, 0.1, status=200, body=b"<html>"))
    assert not overload.seed_answered(overload.Reply(0.0, 0.1, status=503, body=right))


def test_tally_counts_statuses_and_error_kinds() -> None:
    replies = [
        overload.Reply(0.0, 0.1, status=200),
        overload.Reply(0.0, 0.1, status=200),
        overload.Reply(0.0, 9.0, error="timeout: timed out"),
        overload.Reply(0.0, 0.1, status=503, retry_after="1"),
    ]
    assert overload.tally(replies) == "200 ×2, 503 ×1, timeout ×1"
    assert overload.worst(replies) == 9.0


def test_the_short_form_keeps_multi_head_first_then_attention() -> None:
    paths = [path for _, path, _ in overload.worst_cases(short=True)]
    assert paths == ["/v1/multi-head-attention", "/v1/attention"]


def test_a_crowd_opens_connections_and_sends_the_lying_head() -> None:
    received: list[bytes] = []
    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener:

        def accept() -> None:
            for _ in range(3):
                connection, _ = listener.accept()
                with connection:
                    received.append(connection.recv(4096))

        acceptor = threading.Thread(target=accept)
        acceptor.start()
        sockets, failed = overload.open_crowd(listener.getsockname()[1], 3, overload.LYING_HEAD, 5.0)
        acceptor.join(timeout=5)
        for sock in sockets:
            sock.close()
    assert (len(sockets), failed) == (3, 0)
    assert received == [overload.LYING_HEAD] * 3
    head, _, body = overload.LYING_HEAD.partition(b"\r\n\r\n")
    assert b"Content-Length: 1000" in head
    assert len(body) < 1000


def test_the_parse_heavy_bodies_are_rows_of_containers_just_under_the_body_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Small stand-ins for the endpoints' worst cases (writing them all takes 3 s), to see where these go.
    stand_ins = {
        name: (f"/v1/{name}", {"x": [[1.0]]}) for name in ("multi-head-attention", "attention", "sample")
    }
    monkeypatch.setattr(overload, "worst_case_requests", lambda: stand_ins)
    cases = overload.parse_heavy_bodies()
    assert [path for _, path, _ in cases] == ["/v1/softmax"] * 3
    with collection_paused():  # 18 million lists: 4 s to parse with the collector, as the service found
        rows = [orjson.loads(body)["logits"] for _, _, body in cases]
    assert rows[0][:2] == [[0], [0]]
    assert rows[1][:2] == [[], []]
    nested: list[object] = []
    for _ in range(49):
        nested = [nested]
    assert rows[2][:2] == [nested, nested]
    for (_, _, body), logits, per_row in zip(cases, rows, (4, 3, 101), strict=True):
        assert 16 * 1024 * 1024 - 128 < len(body) <= 16 * 1024 * 1024  # MAX_BODY_BYTES' default
        assert len(logits) == (16 * 1024 * 1024 - 64) // per_row
    assert [name for name, _, _ in overload.worst_cases(short=False)][-3:] == [name for name, _, _ in cases]
    assert not any(name.startswith("parse") for name, _, _ in overload.worst_cases(short=True))
