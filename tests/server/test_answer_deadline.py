"""``ClientSocket`` cuts a client that takes none of its answer for ``answer_timeout`` seconds, and only such
a client: a send that waits that long while the client took some of what was queued waits again, up to
``MOST_ANSWER_WAITS`` times. With a minimum rate it also cuts a client that keeps reading, but slower than
that rate once the timeout's grace is over.

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
def answering(
    read_every: float | None, *, min_rate: float | None = None
) -> Iterator[tuple[ClientSocket, list[str], bytearray]]:
    """The server's end as the worker wraps it (its cuts, by close reason, beside it), while a reader takes
    READ bytes every ``read_every`` seconds (None: it never reads) into the bytearray."""
    client, server = gevent.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    stalled: list[str] = []
    received = bytearray()

    def read(every: float) -> None:
        while chunk := client.recv(READ):
            received.extend(chunk)
            gevent.sleep(every)

    reader = None if read_every is None else gevent.spawn(read, read_every)
    served = ClientSocket(
        server,
        answer_timeout=TIMEOUT,
        on_stalled=lambda reason, why: stalled.append(reason),
        answer_min_rate=min_rate,
    )
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
    assert stalled == ["answer_stalled"]


def test_a_client_that_reads_nothing_is_cut_once() -> None:
    with (
        answering(read_every=None) as (served, stalled, received),
        pytest.raises(BrokenPipeError, match="took none of its answer"),
    ):
        served.sendall(ANSWER)
    assert received == bytearray()
    assert stalled == ["answer_stalled"]


def test_a_client_reading_slower_than_the_minimum_rate_is_cut_when_it_falls_behind() -> None:
    """The reader takes about 650 KiB a second, a step at every wait, so it is never stalled: against a
    minimum of 2 MiB a second, the answer's sends may wait the timeout's grace and then 1/rate second per byte
    handed over (0.45 s for the 425 KB that the buffers take at once): the waits outgrow that, and it is cut
    with part of the answer taken (about 0.6 s of waiting, 770 KB, here)."""
    rate = 2 * 1024 * 1024
    with (
        answering(read_every=0.006, min_rate=rate) as (served, stalled, received),
        pytest.raises(
            BrokenPipeError,
            match=r"slower than 2,097,152 bytes a second \([\d,]+ bytes handed over, [\d.]+ s waited for it",
        ),
    ):
        served.sendall(ANSWER)
    assert 0 < len(received) < len(ANSWER)
    assert stalled == ["answer_too_slow"]


def test_a_client_reading_faster_than_the_minimum_rate_gets_all_of_it() -> None:
    with answering(read_every=0.006, min_rate=256 * 1024) as (served, stalled, received):
        served.sendall(ANSWER)
        served.sock.shutdown(socket.SHUT_WR)
    assert bytes(received) == ANSWER
    assert stalled == []


def test_each_answer_on_a_connection_starts_without_credit() -> None:
    """What an answer may wait grows with the bytes handed over: counted over a kept-alive connection, a
    client could take small answers at once (never waiting) and then read a large one as slowly as their
    bytes allowed (100 answers of 1 MB at 256 KiB a second: 400 s). Each answer starts from nothing, at the
    next request's head or once the answer before has gone."""
    rate = 1024 * 1024
    with answering(read_every=0.006, min_rate=rate) as (served, stalled, _):
        served.sendall(b"x" * 100_000)  # fits in the buffers: handed over without waiting
        credit = served._wait_allowed()
        served.request_answered()
        after_answer = served._wait_allowed()
        served.sendall(b"y" * 100_000)
        served.head_read()  # an answer the server writes before the head (a 431, say) leaves none either
        after_head = served._wait_allowed()
    assert credit == pytest.approx(TIMEOUT + 100_001 / rate, abs=1e-3)
    assert after_answer == after_head == pytest.approx(TIMEOUT + 1 / rate, abs=1e-6)
    assert stalled == []
