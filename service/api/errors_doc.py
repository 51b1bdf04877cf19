"""The error responses every compute endpoint documents."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from service.web.api_keys import SECURITY_REQUIREMENT
from service.web.blueprint import Blueprint
from service.web.statuses import status_name

COMPUTE_ERRORS = (400, 401, 413, 415)


def document_compute_errors(blp: Blueprint) -> Callable[[Any], Any]:
    """Decorator adding the 400/401/413/415 problem+json responses (422 comes from ``@blp.arguments``)
    and the optional API-key requirement."""

    def decorate(view: Any) -> Any:
        view = blp.doc(security=SECURITY_REQUIREMENT)(view)
        for status in COMPUTE_ERRORS:
            view = blp.alt_response(status, status_name(status))(view)
        return view

    return decorate
