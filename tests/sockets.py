"""Loopback sockets that tests of failed connections need."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager


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
