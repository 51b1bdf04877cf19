"""Whether a client has left a request whose body waits for room (``ClientSocket.client_left``).

A client that sends a head, then closes while its body waits for room in the memory budget, kept its place
in the queue of bodies for the whole ``COMPUTE_QUEUE_SECONDS``; the worker's sweep now ends such waits. It
must not end the wait of a client that shut down its side only once its whole body was sent: that one still
waits for its answer. Real loopback TCP sockets, the server's side read as gunicorn reads a head (one recv,
which may take some of the body with it).
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import gevent
import gevent.event
import pytest

from service.server.worker import ClientSocket, IdleConnections
from service.web.connection import WaitEnd

BODY = 100_000


@contextmanager
def connection(headers: list[tuple[str, str]]) -> Iterator[tuple[socket.socket, ClientSocket]]:
    """A connected pair: the client's socket, and the server's as the worker wraps it (its request being
    one with ``headers``, named as gunicorn names them)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
    served = ClientSocket(accepted, answer_timeout=None, on_stalled=lambda reason, why: None)
    served.request = SimpleNamespace(headers=headers)
    served.head_read()  # as the worker has it once gunicorn has parsed the head: what is read is the body
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


def read_as_gunicorn(served: ClientSocket, size: int) -> None:
    """Read ``size`` bytes in reads of 8,192 at the most, as gunicorn reads heads (a body of known length
    it reads up to 1 MiB at a time, never past the body's end)."""
    got = 0
    while got < size:
        got += len(served.recv(min(8192, size - got)))


def test_a_client_that_closed_on_a_kept_alive_connection_before_sending_its_body_has_left() -> None:
    """A pooled client's second upload: all the bytes of its first were no reason to think it sent this one
    (every byte the connection had received counted as this body's, so such a ghost was never seen)."""
    with connection(LENGTH) as (client, served):
        first = head(200_000) + b"0" * 200_000
        client.sendall(first)
        read_as_gunicorn(served, len(first))
        served.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        served.request_answered()
        assert client.recv(64).startswith(b"HTTP/1.1 200 OK")
        client.sendall(head(BODY))
        assert served.recv(8192).startswith(b"POST")
        client.close()
        assert settled(served, True)


def test_a_kept_alive_client_that_shut_down_its_side_once_its_whole_body_was_sent_waits() -> None:
    small = 30_000
    with connection([("CONTENT-LENGTH", str(small))]) as (client, served):
        for _ in range(2):  # the second request's bytes are not taken for the first's
            client.sendall(head(small))
            assert served.recv(8192).startswith(b"POST")
            client.sendall(b"0" * small)
            time.sleep(0.05)
            assert not served.client_left()
            read_as_gunicorn(served, small)
            served.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            served.request_answered()
            assert client.recv(64).startswith(b"HTTP/1.1 200 OK")
        client.sendall(head(small) + b"0" * small)
        assert served.recv(8192).startswith(b"POST")
        client.shutdown(socket.SHUT_WR)
        time.sleep(0.1)
        assert not served.client_left()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate and its key (made with the openssl command)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a certificate with")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    request = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"]
    subprocess.run(
        ["openssl", *request, "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def test_a_tls_client_that_shut_down_its_side_once_its_whole_body_was_sent_waits(
    certificate: tuple[Path, Path],
) -> None:
    """Under TLS, what OpenSSL has decrypted and the server not yet read is in neither the kernel's buffer
    nor the bytes received: such a client was taken for gone (its head read, the rest of its 16 KiB record
    pending)."""
    size = 12_000  # the head and the body in one record
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(*certificate)
    client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_context.check_hostname = False
    client_context.verify_mode = ssl.CERT_NONE
    with socket.create_server(("127.0.0.1", 0)) as listener:
        raw_client = socket.create_connection(listener.getsockname())
        raw_accepted, _ = listener.accept()
    wrapped: list[ssl.SSLSocket] = []
    handshake = threading.Thread(target=lambda: wrapped.append(client_context.wrap_socket(raw_client)))
    handshake.start()
    accepted = server_context.wrap_socket(raw_accepted, server_side=True)
    handshake.join(timeout=10)
    client = wrapped[0]
    served = ClientSocket(accepted, answer_timeout=None, on_stalled=lambda reason, why: None)
    served.request = SimpleNamespace(headers=[("CONTENT-LENGTH", str(size))])
    try:
        client.sendall(head(size) + b"0" * size)
        assert served.recv(8192).startswith(b"POST")
        with socket.socket(fileno=os.dup(client.fileno())) as same:  # (the TLS socket's own would end TLS)
            same.shutdown(socket.SHUT_WR)  # TCP's half-close, under the TLS layer: still reading
        time.sleep(0.1)
        assert not served.client_left()
        served.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        assert client.recv(64).startswith(b"HTTP/1.1 200 OK")
    finally:
        client.close()
        accepted.close()


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


@pytest.mark.parametrize("value", ["12abc", "+999999", " 999999", ""])
def test_a_length_that_is_no_count_of_bytes_is_left_to_the_app(value: str) -> None:
    """(gunicorn and the app refuse it; the sweep only ends waits it is sure of)"""
    with connection([("CONTENT-LENGTH", value)]) as (client, served):
        client.sendall(head(BODY))
        assert served.recv(8192).startswith(b"POST")
        client.shutdown(socket.SHUT_WR)
        time.sleep(0.1)
        assert not served.client_left()


def test_a_wait_ended_for_its_client_gone_is_not_chosen_again_for_a_crowd() -> None:
    """The sweep ends the waits of clients gone first; a crowd's closing that follows in the same turn of
    the loop must choose among the others (it chose the same wait again: its end came first, as overload,
    and the wait meant to make room for the crowd was never ended)."""
    idle = IdleConnections()
    ended: list[tuple[int, WaitEnd]] = []
    release = gevent.event.Event()

    def waiting(number: int) -> None:
        with idle.room(lambda why: ended.append((number, why))):
            release.wait(5)

    connections = [gevent.spawn(waiting, number) for number in range(3)]
    gevent.sleep(0)  # all three wait, the latest last
    try:
        assert idle.end_waits_for_room_of_clients_gone(lambda connection: connection is connections[2]) == 1
        assert idle.close_longest_idle(2) == 1  # the one gone counts; then the latest of the others
        gevent.sleep(0)  # the loop runs the ends
        assert ended == [(2, WaitEnd.CLIENT_LEFT), (1, WaitEnd.CROWDED)]
    finally:
        release.set()
        gevent.joinall(connections, timeout=5)


def test_a_burst_of_new_connections_ends_one_wait_each() -> None:
    """Each new connection over the crowded mark asks for as many waits to end as connections are over it,
    before any end has run (a burst is accepted in one turn of the loop): 3 connections over, 3 waits."""
    idle = IdleConnections()
    ended: list[int] = []
    release = gevent.event.Event()

    def waiting(number: int) -> None:
        with idle.room(lambda why: ended.append(number)):
            release.wait(5)

    connections = [gevent.spawn(waiting, number) for number in range(10)]
    gevent.sleep(0)
    try:
        for over in (1, 2, 3):  # as AdmittingGeventWorker.handle asks, once per new connection
            idle.close_longest_idle(over)
        gevent.sleep(0)
        assert sorted(ended) == [7, 8, 9]  # the latest three
    finally:
        release.set()
        gevent.joinall(connections, timeout=5)
