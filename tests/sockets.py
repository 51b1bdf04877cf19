"""Loopback sockets that tests of failed connections need."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress


@contextmanager
def refusing_url() -> Iterator[str]:
    """A loopback URL whose port nothing listens on: bound for the whole ``with`` and never listening, so
    every connection is refused and no other process can take the port meanwhile (a port bound and then
    closed may be taken)."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{bound.getsockname()[1]}"


@contextmanager
def silent_crowd(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` loopback connections to ``port`` that send nothing, closed on the way out. They are given
    once they have waited 1.5 s: past the worker's ``MIN_IDLE_SECONDS``, so that it may close them for room,
    and well within the default 10 s head deadline."""
    crowd = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]
    try:
        time.sleep(1.5)
        yield crowd
    finally:
        for sock in crowd:
            sock.close()


def read_slowly(sock: socket.socket, *, seconds: float = 30.0) -> tuple[int, float]:
    """Read ``sock`` at 128 KiB a second (16 KiB every 1/8 s) until the server closes or resets it, or for
    ``seconds`` at most: the bytes taken and the seconds it took."""
    taken, started = 0, time.monotonic()
    with suppress(ConnectionResetError, ssl.SSLError):  # (an answer cut short over TLS)
        while time.monotonic() - started < seconds:
            chunk = sock.recv(16384)
            if not chunk:
                break
            taken += len(chunk)
            time.sleep(0.125)
    return taken, time.monotonic() - started
