"""How many waiting connections the worker's server accepts at once (service/server/worker.py).

A worker busy with kept-alive connections serves each of them once per turn of its event loop and accepts
new connections once per turn; gunicorn has it accept one at a time when workers share the socket, so a
burst of new connections waited turns of the loop, one each. Counted here without timing: the connections
accepted before the first of their handlers runs are those of the first wake-up.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import gevent

from service.server.worker import ACCEPTS_PER_WAKEUP, connection_server

WAITING = 24  # more than one wake-up's worth when the socket is shared


def accepted_per_wakeup(shared: bool) -> list[int]:
    """For each connection handled, how many had been accepted when its handler ran (all ``WAITING`` connect
    before the server starts)."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as listener:
        listener.setblocking(False)  # as gunicorn's worker hands it to gevent
        clients = [socket.create_connection(listener.getsockname(), timeout=5) for _ in range(WAITING)]
        accepted: list[int] = []
        seen_when_handled: list[int] = []

        def spawn(handle: Callable[..., None], *args: Any) -> gevent.Greenlet:
            accepted.append(1)
            return gevent.spawn(handle, *args)

        def handle(client: socket.socket, address: Any) -> None:
            seen_when_handled.append(len(accepted))
            client.close()

        server = connection_server(listener, handle, spawn=spawn, shared=shared)
        server.start()
        try:
            with gevent.Timeout(10):
                while len(seen_when_handled) < WAITING:
                    gevent.sleep(0.01)
        finally:
            server.close()
            for client in clients:
                client.close()
        return seen_when_handled


def test_a_worker_sharing_the_socket_takes_a_burst_many_connections_to_a_wakeup() -> None:
    # gunicorn's own gevent worker accepts 1 per wake-up here: [1, 2, 3, ...]
    seen = accepted_per_wakeup(shared=True)
    assert 1 < ACCEPTS_PER_WAKEUP < WAITING
    assert seen[:ACCEPTS_PER_WAKEUP] == [ACCEPTS_PER_WAKEUP] * ACCEPTS_PER_WAKEUP
    assert seen[ACCEPTS_PER_WAKEUP:] == [WAITING] * (WAITING - ACCEPTS_PER_WAKEUP)


def test_a_worker_alone_on_the_socket_takes_every_waiting_connection_at_once() -> None:
    assert accepted_per_wakeup(shared=False) == [WAITING] * WAITING  # gevent's 100 per wake-up, as gunicorn
