"""HTTP status names and phrases as RFC 9110 states them, the same under every Python this service admits.

``http.HTTPStatus`` renamed four statuses in Python 3.13 (``REQUEST_ENTITY_TOO_LARGE`` became
``CONTENT_TOO_LARGE``, ``UNPROCESSABLE_ENTITY`` became ``UNPROCESSABLE_CONTENT``, and 414 and 416 with
them). The contract names its responses, and problem+json titles its errors, from this table, so neither
depends on the interpreter that generated or serves them.
"""

from __future__ import annotations

from http import HTTPStatus

# Every error status the service itself answers with, in RFC 9110's (and Python 3.13's) words.
STATUSES: dict[int, tuple[str, str]] = {
    400: ("BAD_REQUEST", "Bad Request"),
    401: ("UNAUTHORIZED", "Unauthorized"),
    404: ("NOT_FOUND", "Not Found"),
    405: ("METHOD_NOT_ALLOWED", "Method Not Allowed"),
    408: ("REQUEST_TIMEOUT", "Request Timeout"),
    413: ("CONTENT_TOO_LARGE", "Content Too Large"),
    414: ("URI_TOO_LONG", "URI Too Long"),
    415: ("UNSUPPORTED_MEDIA_TYPE", "Unsupported Media Type"),
    416: ("RANGE_NOT_SATISFIABLE", "Range Not Satisfiable"),
    422: ("UNPROCESSABLE_CONTENT", "Unprocessable Content"),
    500: ("INTERNAL_SERVER_ERROR", "Internal Server Error"),
    503: ("SERVICE_UNAVAILABLE", "Service Unavailable"),
    504: ("GATEWAY_TIMEOUT", "Gateway Timeout"),
}


def status_name(status: int) -> str:
    """The contract's name for the response component of ``status``, e.g. ``UNPROCESSABLE_CONTENT``."""
    return STATUSES[status][0]


def status_phrase(status: int) -> str:
    """The reason phrase of ``status``; others than the table's (none was renamed) come from Python."""
    known = STATUSES.get(status)
    return known[1] if known is not None else HTTPStatus(status).phrase
