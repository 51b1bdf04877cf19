"""The work limit: refuse a request before allocating the arrays it would need."""

from __future__ import annotations

from flask import current_app

from service.web.problems import Problem


def ensure_work_within(elements: int, *, what: str, setting: str = "MAX_WORK_ELEMENTS") -> None:
    """Raise a 413 problem when ``elements`` is more than the limit named ``setting`` allows.

    ``MAX_WORK_ELEMENTS`` bounds the largest array a request would create; ``MAX_OUTPUT_ONLY_WORK_ELEMENTS``
    bounds the scores that output-only attention computes block by block without holding them.
    """
    limit: int = current_app.config[setting]
    if elements > limit:
        raise Problem(
            413,
            f"This request needs {what} of {elements:,} elements; the limit is {limit:,} ({setting}).",
            slug="work-too-large",
            title="Request needs too much work",
        )
