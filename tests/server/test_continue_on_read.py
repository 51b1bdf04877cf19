"""``ClientSocket`` holds gunicorn's ``100 Continue`` back until the app reads the body (a socket pair).

gunicorn sends the 100 with one plain ``send`` as soon as it has a head with ``Expect: 100-continue``;
answers go through ``sendall``. End to end, against gunicorn: tests/deploy/test_admission_gunicorn.py.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from service.server.worker import CONTINUE, ClientSocket

ANSWER = b"HTTP/1.1 404 NOT FOUND\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
EARLY_HINTS = b"HTTP/1.1 103 Early Hints\r\nLink: </static/style.css>; rel=preload\r\n\r\n"


@contextmanager
def pair() -> Iterator[tuple[socket.socket, ClientSocket]]:
    """The client's end, and the server's as the worker wraps it."""
    client, server = socket.socketpair()
    client.settimeout(5)
    server.settimeout(5)
    with client, server:
        yield client, ClientSocket(server, answer_timeout=None, on_stalled=lambda reason, why: None)


def received(client: socket.socket) -> bytes:
    """What the server end has sent so far (nothing waits: its end is shut for writing first)."""
    data = b""
    while chunk := client.recv(4096):
        data += chunk
    return data


def test_the_100_goes_out_at_the_bodys_first_read_and_only_once() -> None:
    with pair() as (client, server):
        assert server.send(CONTINUE) == len(CONTINUE)  # gunicorn sees it all sent
        client.sendall(b'{"a":')
        assert server.recv(64) == b'{"a":'  # the 100 went out first
        client.sendall(b"1}")
        assert server.recv(64) == b"1}"
        server.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        server.sock.shutdown(socket.SHUT_WR)
        assert received(client) == CONTINUE + b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


def test_a_final_answer_before_any_read_goes_without_the_100() -> None:
    with pair() as (client, server):
        server.send(CONTINUE)
        server.sendall(ANSWER)
        client.sendall(b"late body")  # curl sends it after a second anyway: read now, no 100 follows
        assert server.recv(64) == b"late body"
        server.sock.shutdown(socket.SHUT_WR)
        assert received(client) == ANSWER


def test_an_early_hint_leaves_the_100_held() -> None:
    with pair() as (client, server):
        server.send(CONTINUE)
        server.sendall(EARLY_HINTS)
        client.sendall(b"{}")
        assert server.recv(64) == b"{}"
        server.sock.shutdown(socket.SHUT_WR)
        assert received(client) == EARLY_HINTS + CONTINUE


def test_other_sends_go_through() -> None:
    with pair() as (client, server):
        assert server.send(b"HTTP/1.1 200 OK\r\n\r\n") == 19
        server.sock.shutdown(socket.SHUT_WR)
        assert received(client) == b"HTTP/1.1 200 OK\r\n\r\n"
