"""The server's variables, read and checked for service/server/gunicorn_settings.py (docs/operations.md).

Each bad value raises :class:`~service.settings.SettingError`, one line naming the variable, which
``attention-service serve`` prints before anything starts. A variable set to an empty value (or only spaces)
counts as unset, as the service's other variables do (compose passes them empty when the shell has none).
Nothing here imports gunicorn or NumPy: the command line checks ``--host`` and ``--port`` with it too.
"""

from __future__ import annotations

import ipaddress
import os

from service.settings import SettingError

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")  # gunicorn's, which reads any other as info


def given(name: str) -> str | None:
    """``name``'s value without surrounding spaces, or None when it is unset or empty."""
    value = os.environ.get(name, "").strip()
    return value or None


def whole(name: str, default: int, *, least: int) -> int:
    """A whole number of at least ``least`` (gunicorn's counts and seconds), or ``default`` when not given."""
    raw = given(name)
    if raw is None:
        return default
    return checked_whole(name, raw, least=least)


def checked_whole(name: str, raw: str, *, least: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise SettingError(f"{name} must be a whole number, got {raw!r}") from None
    if value < least:
        raise SettingError(f"{name} must be at least {least}, not {value}")
    return value


def tcp_port(name: str, raw: str) -> int:
    """A TCP port, 0-65535 (the command line's ``--port`` says the same)."""
    try:
        value = int(raw)
    except ValueError:
        raise SettingError(f"{name} must be a TCP port (0-65535), got {raw!r}") from None
    if not 0 <= value <= 65535:
        raise SettingError(f"{name} must be a TCP port (0-65535), not {value}")
    return value


def bind_host(name: str, raw: str) -> str:
    """The host part of gunicorn's ``HOST:PORT`` address: a name or an IPv4 address as given, an IPv6 address
    in brackets (given with or without them: gunicorn splits ``::1:8000`` at its first colon)."""
    literal = raw[1:-1] if raw.startswith("[") and raw.endswith("]") else raw
    try:
        address = ipaddress.ip_address(literal)
    except ValueError:
        address = None
    if isinstance(address, ipaddress.IPv6Address):
        return f"[{literal}]"
    if address is None and (not raw or any(character in raw for character in ":[]/ \t")):
        raise SettingError(
            f"{name} must be a host name or an IP address (IPv6 in brackets or not), got {raw!r}"
        )
    return raw
