"""How many waiting connections the worker's server accepts at once (service/server/worker.py).

A worker busy with kept-alive connections serves each of them once per turn of its event loop and accepts
new connections once per turn; gunicorn has it accept one at a time when workers share the socket, so a
burst of new connections waited turns of the loop, one each. The worker accepts more per wake-up as its loop
lags. Counted here without timing: the connections accepted before the first of their handlers runs are
those of the first wake-up.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import gevent
from gevent.server import StreamServer

from service.server.worker import MOST_ACCEPTS_PER_WAKEUP, accepts_per_wakeup

WAITING = 24  # more than one wake-up's worth when the socket is shared


def accepted_per_wakeup(max_accept: int | None) -> list[int]:
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

        server = StreamServer(listener, handle=handle, spawn=spawn)  # as the worker builds it
        if max_accept is not None:
            server.max_accept = max_accept
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


def test_a_worker_whose_loop_keeps_up_takes_one_connection_per_wakeup_as_gunicorn() -> None:
    # so that one idle worker does not take a whole burst that the others would share
    assert accepts_per_wakeup(0.0) == accepts_per_wakeup(0.004) == 1
    assert accepted_per_wakeup(accepts_per_wakeup(0.0)) == list(range(1, WAITING + 1))


def test_a_worker_whose_loop_lags_takes_a_burst_many_connections_to_a_wakeup() -> None:
    assert [accepts_per_wakeup(lag) for lag in (0.005, 0.012, 0.046, 10.0)] == [
        2,
        3,
        10,
        MOST_ACCEPTS_PER_WAKEUP,
    ]
    assert MOST_ACCEPTS_PER_WAKEUP < WAITING
    seen = accepted_per_wakeup(accepts_per_wakeup(10.0))
    assert seen[:MOST_ACCEPTS_PER_WAKEUP] == [MOST_ACCEPTS_PER_WAKEUP] * MOST_ACCEPTS_PER_WAKEUP
    assert seen[MOST_ACCEPTS_PER_WAKEUP:] == [WAITING] * (WAITING - MOST_ACCEPTS_PER_WAKEUP)


def test_a_worker_alone_on_the_socket_takes_every_waiting_connection_at_once() -> None:
    assert accepted_per_wakeup(None) == [WAITING] * WAITING  # gevent's 100 per wake-up, as gunicorn leaves it
