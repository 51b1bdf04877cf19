"""Loopback sockets that tests of failed connections need."""

from __future__ import annotations

import socket
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
