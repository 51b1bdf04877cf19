"""TLS set up by the worker itself, so that its handshake has a deadline as the request head after it does.

gunicorn's gevent worker hands its TLS context (``--certfile``/``--keyfile`` in ``GUNICORN_CMD_ARGS``) to
gevent's server, which wraps each accepted connection and completes its handshake before the worker sees
it, and with no deadline: a client that connected and sent nothing held its connection for ever, where the
worker could neither count it nor close it for room. 150 such connections to 2 workers of 50
``worker_connections`` refused every other client for as long as they stayed (the whole 40 s of the test), and
each client that left mid-handshake was logged with a traceback. The worker (service/server/worker.py) now
does the handshake here, in a wait like the one for a request head: ``HEADER_TIMEOUT_SECONDS``, then as long
again for the first head (as Go's server gives the handshake its own deadline before ``ReadHeaderTimeout``),
and closed to make room like an idle head when the worker is crowded.

A client that speaks plain HTTP to the TLS port is told so (a 400 problem, unencrypted:
:data:`PLAIN_HTTP_DETAIL`), as Go's and nginx's servers tell it, instead of seeing the connection dropped.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

# The first byte of every TLS connection: a record of type handshake, carrying the ClientHello (RFC 8446,
# section 5.1). A plain HTTP request starts with its method's first letter instead.
HANDSHAKE_RECORD = b"\x16"

PLAIN_HTTP_DETAIL = "this port serves HTTPS, and the request came as plain HTTP: send it to an https:// URL"


class PlainHttp(Exception):
    """The client sent a plain HTTP request to the TLS port (nothing of it has been read)."""


def handshake(sock: Any, context: ssl.SSLContext, *, suppress_ragged_eofs: bool) -> ssl.SSLSocket:
    """``sock`` (a connection just accepted) wrapped in TLS, its handshake done.

    It waits for the client as long as it takes: call it within a deadline. Raises :class:`PlainHttp` when
    the client's first byte is an ASCII letter (a request line), :class:`ConnectionAbortedError` when the
    client closes before sending anything, and :class:`ssl.SSLError` or :class:`OSError` when the handshake
    fails (the connection is then closed). ``suppress_ragged_eofs`` is gunicorn's setting of that name.
    """
    first = sock.recv(1, socket.MSG_PEEK)  # looked at, left for the handshake to read
    if not first:
        raise ConnectionAbortedError("the client closed the connection before its TLS handshake")
    if first.isascii() and first.isalpha():  # (a TLS record starts with HANDSHAKE_RECORD: not a letter)
        raise PlainHttp
    secured = context.wrap_socket(
        sock, server_side=True, do_handshake_on_connect=False, suppress_ragged_eofs=suppress_ragged_eofs
    )
    try:
        secured.do_handshake()
    except BaseException:
        secured.close()
        raise
    return secured
