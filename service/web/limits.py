"""The work limit: refuse a request before allocating the arrays it would need."""

from __future__ import annotations

from flask import current_app

from service.web.metrics import record_work
from service.web.problems import Problem


def ensure_work_within(elements: int, *, what: str) -> None:
    """Raise a 413 problem when ``elements`` (the largest array the request would create) is too many.

    Accepted work is counted in the ``attention_work_elements`` histogram.
    """
    limit: int = current_app.config["MAX_WORK_ELEMENTS"]
    if elements > limit:
        raise Problem(
            413,
            f"This request needs {what} of {elements:,} elements; "
            f"the limit is {limit:,} (MAX_WORK_ELEMENTS).",
            slug="work-too-large",
            title="Request needs too much work",
        )
    record_work(elements)
