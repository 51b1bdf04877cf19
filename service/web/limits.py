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
    ensure_answer_within(work.answer_elements)
    record_work(work.elements)


# The longest JSON one value of an answer takes with its separator: a float64 such as
# -2.2250738585072014e-308 and a comma. float32 values, integers, booleans and nulls are shorter, so the
# estimate is an upper bound for every precision (brackets of one-value rows aside).
JSON_BYTES_PER_VALUE = 25


def answer_bytes_estimate(answer_elements: int) -> int:
    """At most how many bytes of JSON an answer of ``answer_elements`` values takes."""
    return answer_elements * JSON_BYTES_PER_VALUE


def ensure_answer_within(answer_elements: int) -> None:
    """Raise a 413 problem naming the answer's size when its estimate is over ``MAX_ANSWER_BYTES``.

    Checked before computing: broadcasting lets a body of a few KB ask for hundreds of MB of answer.
    """
    limit: int = current_app.config["MAX_ANSWER_BYTES"]
    estimate = answer_bytes_estimate(answer_elements)
    if estimate > limit:
        raise Problem(
            413,
            f"The answer would hold {answer_elements:,} values, up to {estimate:,} bytes of JSON "
            f"({JSON_BYTES_PER_VALUE} per value); the limit is {limit:,} bytes (MAX_ANSWER_BYTES). Ask for "
            "fewer arrays (include) or smaller shapes.",
            slug="answer-too-large",
            title="Answer too large",
        )


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
