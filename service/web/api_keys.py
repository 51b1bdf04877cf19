"""Optional API keys: when ``API_KEYS``/``API_KEYS_FILE`` is set, ``/v1/*`` and /v2 infer need a bearer key.

Probes, ``/metrics``, the contract and the index stay open, and CORS preflights (which browsers send
without credentials) are never refused, or no widget could ever make the real call.
"""

from __future__ import annotations

import hmac

from flask import Flask
from flask.wrappers import Request

from service.web.hooks import RequestGlobals, request_steps
from service.web.problems import Problem

PROTECTED_PREFIX = "/v1/"
SCHEME_NAME = "bearerAuth"
SECURITY_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": (
        "An API key, sent as `Authorization: Bearer <key>`. Required on /v1/* and /v2/models/*/infer only "
        "when the operator configures keys (API_KEYS or API_KEYS_FILE); otherwise the API is open."
    ),
}
# Either no credentials (keys not configured) or a bearer key: the contract holds for both set-ups.
SECURITY_REQUIREMENT: list[dict[str, list[str]]] = [{}, {SCHEME_NAME: []}]
_CHALLENGE = 'Bearer realm="attention-service"'


def key_is_valid(token: str, keys: list[str]) -> bool:
    """Compare ``token`` with every key in constant time, without stopping at the first match."""
    supplied = token.encode()
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(supplied, key.encode())
    return matched


def is_protected(path: str) -> bool:
    """/v1/* and the /v2 infer operations: the computations (health and metadata stay open)."""
    return path.startswith(PROTECTED_PREFIX) or (path.startswith("/v2/") and path.endswith("/infer"))


def _bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def install_api_keys(app: Flask) -> None:
    """Refuse computations without a valid key (401 problem+json) when keys are configured."""
    keys: list[str] = list(app.config.get("API_KEYS") or [])
    if not keys:
        return

    def _require_key(request: Request, g: RequestGlobals) -> None:
        if request.method == "OPTIONS" or not is_protected(request.path):
            return
        token = _bearer_token(request.headers.get("Authorization"))
        if token is None:
            raise Problem(
                401,
                "Send an API key as `Authorization: Bearer <key>`.",
                slug="unauthorized",
                headers={"WWW-Authenticate": _CHALLENGE},
            )
        if not key_is_valid(token, keys):
            raise Problem(
                401,
                "The API key is not valid.",
                slug="unauthorized",
                headers={"WWW-Authenticate": f'{_CHALLENGE}, error="invalid_token"'},
            )

    request_steps(app).add_before(_require_key)
