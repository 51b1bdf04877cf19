"""The work limits: refuse a request before allocating the arrays it would need."""

from __future__ import annotations

from flask import current_app

from service.requests import Bound, Work
from service.web.metrics import record_work
from service.web.problems import Problem


def admit_work(work: Work) -> None:
    """Refuse ``work`` with a 413 problem if any of its bounds is over its limit; else count it.

    Accepted work is observed once in the ``attention_work_elements`` histogram (refused work is not):
    every protocol's view calls this, and only this, between building its typed request and running it.
    """
    for bound in work.bounds:
        ensure_within(bound)
    record_work(work.elements)


def ensure_within(bound: Bound) -> None:
    """Raise a 413 problem when ``bound.amount`` is more than the setting it names allows.

    ``MAX_WORK_ELEMENTS`` bounds the largest array a request would create; ``MAX_OUTPUT_ONLY_WORK_ELEMENTS``
    bounds the scores that output-only attention computes block by block without holding them.
    """
    limit: int = current_app.config[bound.setting]
    if bound.amount > limit:
        raise Problem(
            413,
            f"This request needs {bound.what} of {bound.amount:,} elements; the limit is {limit:,} "
            f"({bound.setting}).",
            slug="work-too-large",
            title="Request needs too much work",
        )
