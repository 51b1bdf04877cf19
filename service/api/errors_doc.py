"""The error responses every compute endpoint documents."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from service.web.blueprint import Blueprint
from service.web.statuses import status_name

# 408: the body did not arrive in time; 503: overloaded (no compute slot or memory soon enough, with
# Retry-After); 504: the computation outlived COMPUTE_DEADLINE_SECONDS (service/web/admission.py).
COMPUTE_ERRORS = (400, 401, 408, 413, 415, 503, 504)


def document_compute_errors(blp: Blueprint) -> Callable[[Any], Any]:
    """Decorator adding the problem+json responses of :data:`COMPUTE_ERRORS` (422 comes from
    ``@blp.arguments``; the optional API-key requirement from the contract's rule for /v1/*, in
    service.web.spec)."""

    def decorate(view: Any) -> Any:
        for status in COMPUTE_ERRORS:
            view = blp.alt_response(status, status_name(status))(view)
        return view

    return decorate
