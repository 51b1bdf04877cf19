"""Whether a client has left a request whose body waits for room (``ClientSocket.client_left``).

A client that sends a head, then closes while its body waits for room in the memory budget, kept its place
in the queue of bodies for the whole ``COMPUTE_QUEUE_SECONDS``; the worker's sweep now ends such waits. It
must not end the wait of a client that shut down its side only once its whole body was sent: that one still
waits for its answer. Real loopback TCP sockets, the server's side read as gunicorn reads a head (one recv,
which may take some of the body with it).
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from service.server.worker import ClientSocket

BODY = 100_000


@contextmanager
def connection(headers: list[tuple[str, str]]) -> Iterator[tuple[socket.socket, ClientSocket]]:
    """A connected pair: the client's socket, and the server's as the worker wraps it (its request being
    one with ``headers``, named as gunicorn names them)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
    served = ClientSocket(accepted, answer_timeout=None, on_stalled=lambda: None)
    served.request = SimpleNamespace(headers=headers)
    try:
        yield client, served
    finally:
        client.close()
        accepted.close()


def head(length: int) -> bytes:
    return b"POST /v1/softmax HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % length


def settled(served: ClientSocket, expected: bool) -> bool:
    """``served.client_left()`` once the loopback has delivered what was sent (at most 2 s for it to
    become ``expected``; what it says then)."""
    for _ in range(200):
        if served.client_left() == expected:
            break
        time.sleep(0.01)
    return served.client_left()


LENGTH = [("HOST", "x"), ("CONTENT-LENGTH", str(BODY))]


def test_a_client_still_connected_has_not_left() -> None:
    with connection(LENGTH) as (client, served):
        client.sendall(head(BODY) + b"{")
        assert served.recv(8192).startswith(b"POST")
        time.sleep(0.05)
        assert not served.client_left()


def test_a_client_that_closed_before_sending_its_body_has_left() -> None:
    with connection(LENGTH) as (client, served):
        client.sendall(head(BODY) + b'{"logits": [1, 2')  # part of its body, which the head's read took
        assert served.recv(8192).startswith(b"POST")
        client.close()
        assert settled(served, True)


def test_a_client_that_closed_with_part_of_its_body_unread_has_left() -> None:
    with connection(LENGTH) as (client, served):
        client.sendall(head(BODY))
        assert served.recv(8192).startswith(b"POST")
        client.sendall(b"0" * 30_000)  # in the kernel's buffer, unread
        client.shutdown(socket.SHUT_WR)
        assert settled(served, True)


def test_a_client_that_shut_down_its_side_once_its_whole_body_was_sent_waits_for_its_answer() -> None:
    small = 30_000  # all of it fits in the server's receive buffer, unread
    with connection([("CONTENT-LENGTH", str(small))]) as (client, served):
        client.sendall(head(small))
        assert served.recv(8192).startswith(b"POST")
        client.sendall(b"0" * small)
        client.shutdown(socket.SHUT_WR)
        time.sleep(0.1)
        assert not served.client_left()
        # while its answer can still be sent to it
        served.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        assert client.recv(64).startswith(b"HTTP/1.1 200 OK")


def test_a_client_that_reset_its_connection_has_left_whatever_its_body() -> None:
    chunked = [("TRANSFER-ENCODING", "chunked")]  # its end unknown: only a reset tells
    with connection(chunked) as (client, served):
        client.sendall(b"POST /v1/softmax HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        assert served.recv(8192).startswith(b"POST")
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # a reset
        assert settled(served, True)


def test_a_chunked_body_whose_client_only_shut_down_its_side_may_still_be_complete() -> None:
    with connection([("TRANSFER-ENCODING", "chunked")]) as (client, served):
        client.sendall(b"POST /v1/softmax HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        assert served.recv(8192).startswith(b"POST")
        client.sendall(b"5\r\n[1,2]\r\n0\r\n\r\n")
        client.shutdown(socket.SHUT_WR)
        time.sleep(0.1)
        assert not served.client_left()


@pytest.mark.parametrize("value", ["12abc", "-5", ""])
def test_a_length_that_is_no_count_of_bytes_is_left_to_the_app(value: str) -> None:
    """(gunicorn and the app refuse it; the sweep only ends waits it is sure of)"""
    with connection([("CONTENT-LENGTH", value)]) as (client, served):
        client.sendall(head(BODY))
        assert served.recv(8192).startswith(b"POST")
        client.shutdown(socket.SHUT_WR)
        time.sleep(0.1)
        assert not served.client_left()
