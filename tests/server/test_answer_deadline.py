"""``ClientSocket`` cuts a client that takes none of its answer for ``answer_timeout`` seconds, and only such
a client: a send that waits that long while the client took some of what was queued waits again, up to
``MOST_ANSWER_WAITS`` times.

A Unix socket pair under gevent, which makes the timing exact where TCP's is not: a send waits until the
queue is down to a quarter of the send buffer, and the reader frees the queue a message (about 37 KB) at a
time, where a loopback TCP client frees it only as it opens its receive window (64-130 KiB at a time). The
reader here frees a message every 60 ms or so and the queue reaches a quarter after about 0.5 s: every send
waits past the 0.25 s timeout with the client plainly reading. End to end, over TCP and gunicorn:
tests/deploy/test_admission_gunicorn.py.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import gevent
import gevent.socket
import pytest

from service.server import worker
from service.server.worker import ClientSocket

TIMEOUT = 0.25  # seconds
ANSWER = bytes(range(256)) * 6_000  # 1.5 MB, each byte's place recognisable
READ = 4096
SEND_BUFFER = 212_992  # Linux's default maximum; the kernel doubles it


@contextmanager
def answering(read_every: float | None) -> Iterator[tuple[ClientSocket, list[int], bytearray]]:
    """The server's end as the worker wraps it (the count of its stalled cuts beside it), while a reader
    takes READ bytes every ``read_every`` seconds (None: it never reads) into the bytearray."""
    client, server = gevent.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    stalled: list[int] = []
    received = bytearray()

    def read(every: float) -> None:
        while chunk := client.recv(READ):
            received.extend(chunk)
            gevent.sleep(every)

    reader = None if read_every is None else gevent.spawn(read, read_every)
    served = ClientSocket(server, answer_timeout=TIMEOUT, on_stalled=lambda: stalled.append(1))
    try:
        yield served, stalled, received
    finally:
        server.close()
        if reader is not None:
            reader.join(timeout=5)
            reader.kill()
        client.close()


def test_a_client_reading_slower_than_the_send_wakes_gets_all_of_it() -> None:
    with answering(read_every=0.006) as (served, stalled, received):  # about 650 KiB a second
        served.sendall(ANSWER)
        served.sock.shutdown(socket.SHUT_WR)
    assert bytes(received) == ANSWER
    assert stalled == []


def test_the_waits_are_needed_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same reader, when a send may wait only once, is cut: without the waits again it would be."""
    monkeypatch.setattr(worker, "MOST_ANSWER_WAITS", 1)
    with (
        answering(read_every=0.006) as (served, stalled, received),
        pytest.raises(BrokenPipeError, match=r"took none of its answer for 0\.25 s"),
    ):
        served.sendall(ANSWER)
    assert 0 < len(received) < len(ANSWER)
    assert stalled == [1]


def test_a_client_that_reads_nothing_is_cut_once() -> None:
    with (
        answering(read_every=None) as (served, stalled, received),
        pytest.raises(BrokenPipeError, match="took none of its answer"),
    ):
        served.sendall(ANSWER)
    assert received == bytearray()
    assert stalled == [1]
