"""The TLS handshake of a connection just accepted, for a worker that bounds it with a deadline of its own.

gevent's server, which gunicorn's gevent worker hands its TLS context, completes each handshake before the
worker sees the connection, with no deadline; the worker (service/server/worker.py) calls :func:`handshake`
instead, inside a wait it can bound and end. A client that speaks plain HTTP to the TLS port is told so (a
400 problem, unencrypted: :data:`PLAIN_HTTP_DETAIL`), as Go's and nginx's servers tell it, instead of seeing
the connection dropped.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

PLAIN_HTTP_DETAIL = "this port serves HTTPS, and the request came as plain HTTP: send it to an https:// URL"


class PlainHttp(Exception):
    """The client sent a plain HTTP request to the TLS port (nothing of it has been read)."""


def handshake(sock: Any, context: ssl.SSLContext, *, suppress_ragged_eofs: bool) -> ssl.SSLSocket:
    """``sock`` (a connection just accepted) wrapped in TLS, its handshake done.

    It waits for the client as long as it takes: call it within a deadline. Raises :class:`PlainHttp` when
    the client's first byte is an ASCII letter (a request line), :class:`ConnectionAbortedError` when the
    client closes before sending anything, and :class:`ssl.SSLError` or :class:`OSError` when the handshake
    fails; the caller closes ``sock`` then. ``suppress_ragged_eofs`` is gunicorn's setting of that name.
    """
    first = sock.recv(1, socket.MSG_PEEK)  # looked at, left for the handshake to read
    if not first:
        raise ConnectionAbortedError("the client closed the connection before its TLS handshake")
    # A TLS connection starts with a handshake record, whose type byte is 0x16 (RFC 8446, section 5.1): never
    # a letter, as the first byte of a request line always is.
    if first.isascii() and first.isalpha():
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


def check_tls(cfg: Any) -> None:
    """Build the TLS context gunicorn's configuration ``cfg`` asks for, as each worker will, and raise
    :class:`~service.settings.SettingError` (one line naming the settings) if it cannot be built.

    Checked in the master at start-up: gunicorn builds it only in each worker's ``run()``, so a certificate
    without its key or ciphers OpenSSL does not know made every worker crash as it booted, and the master
    start another, for ever. ``gunicorn.sock.ssl_context`` is what gunicorn's gevent worker calls (with the
    ``ssl_context`` server hook, if one is set).
    """
    if not cfg.is_ssl:
        return
    import gunicorn.sock

    from service.settings import SettingError

    try:
        gunicorn.sock.ssl_context(cfg)
    except (OSError, ValueError, TypeError) as error:  # ssl.SSLError is an OSError
        # OpenSSL's own errors carry their text as their only argument ("No cipher can be selected.")
        reason = str(error.args[0]) if len(error.args) == 1 else str(error)
        if cfg.certfile and not cfg.keyfile:
            reason += " (no --keyfile: the certificate file must then hold the private key too)"
        given = f"certfile={cfg.certfile!r} keyfile={cfg.keyfile!r} ciphers={cfg.ciphers!r}"
        raise SettingError(
            f"TLS cannot be set up with {given} (gunicorn's --certfile, --keyfile and --ciphers, e.g. in "
            f"GUNICORN_CMD_ARGS): {' '.join(reason.split())}"
        ) from None
