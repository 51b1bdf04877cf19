"""The work limits: refuse a request before allocating the arrays it would need."""

from __future__ import annotations

from dataclasses import dataclass

from flask import current_app

from service.requests import Bound, Work
from service.settings import JSON_BYTES_PER_VALUE
from service.web.metrics import record_work
from service.web.problems import Problem

# The longest JSON one value of an answer takes with its separator: a float64 such as
# -2.2250738585072014e-308 and a comma. float32 values, integers, booleans and nulls are shorter, so the
# estimate is an upper bound for every precision (brackets of one-value rows aside). service/settings.py's
# JSON_BYTES_PER_VALUE (the settings check MAX_ANSWER_BYTES with it).


@dataclass(frozen=True)
class AnswerEncoding:
    """How an answer writes its values, for the estimate of its size made before computing."""

    name: str  # as the 413 names it: "JSON", "binary tensor data"
    bytes_per_value: int  # the most one value can take, its separator included


JSON_ANSWER = AnswerEncoding("JSON", JSON_BYTES_PER_VALUE)


def binary_answer(bytes_per_value: int) -> AnswerEncoding:
    """An answer of raw little-endian values (/v2's binary tensor data): 8 bytes per float64 or int64, 4
    per float32, 1 per boolean, no separators."""
    return AnswerEncoding("binary tensor data", bytes_per_value)


def admit_work(work: Work, answer: AnswerEncoding = JSON_ANSWER) -> None:
    """Refuse ``work`` with a 413 problem if any of its bounds, or its answer written as ``answer``, is over
    its limit; else count it.

    Accepted work is observed once in the ``attention_work_elements`` histogram (refused work is not):
    every protocol's view calls this, and only this, between building its typed request and running it.
    """
    config = current_app.config  # once: each lookup through the proxy finds the app context again
    for bound in work.bounds:
        ensure_within(bound, config[bound.setting])
    ensure_answer_within(work.answer_elements, answer, config["MAX_ANSWER_BYTES"])
    record_work(work.elements)


def answer_bytes_estimate(answer_elements: int, answer: AnswerEncoding = JSON_ANSWER) -> int:
    """At most how many bytes an answer of ``answer_elements`` values takes, written as ``answer``."""
    return answer_elements * answer.bytes_per_value


# CPU seconds per byte of answer, to make it (its arrays' Python objects, orjson's text or the raw bytes),
# erring high: 8 million values took orjson 357 ms (1.8 ns per byte of its 25-byte bound), 16.7 million binary
# float64 values 84-116 ms to copy out.
ANSWER_SECONDS_PER_BYTE = 2e-9


def expected_cpu_seconds(work: Work, answer: AnswerEncoding = JSON_ANSWER) -> float:
    """What a request's computation is expected to cost, its answer's making included: the kernel's estimate
    alone had put 4.2 million output values at under 1 ms (no compute slot, on the worker's loop), and
    making them took 148-270 ms there."""
    return (
        work.estimated_cpu_seconds
        + answer_bytes_estimate(work.answer_elements, answer) * ANSWER_SECONDS_PER_BYTE
    )


def ensure_answer_within(answer_elements: int, answer: AnswerEncoding, limit: int) -> None:
    """Raise a 413 problem naming the answer's size when its estimate is over ``limit``
    (``MAX_ANSWER_BYTES``).

    Checked before computing: broadcasting lets a body of a few KB ask for hundreds of MB of answer.
    """
    estimate = answer_bytes_estimate(answer_elements, answer)
    if estimate > limit:
        raise Problem(
            413,
            f"The answer would hold {answer_elements:,} values, up to {estimate:,} bytes of {answer.name} "
            f"({answer.bytes_per_value} per value); the limit is {limit:,} bytes (MAX_ANSWER_BYTES). Ask "
            "for fewer arrays (include) or smaller shapes.",
            slug="answer-too-large",
            title="Answer too large",
        )


def ensure_within(bound: Bound, limit: int) -> None:
    """Raise a 413 problem when ``bound.amount`` is more than ``limit``, the value of the setting it names.

    ``MAX_WORK_ELEMENTS`` bounds the largest array a request would create; ``MAX_OUTPUT_ONLY_WORK_ELEMENTS``
    bounds the scores that output-only attention computes block by block without holding them.
    """
    if bound.amount > limit:
        raise Problem(
            413,
            f"This request needs {bound.what} of {bound.amount:,} elements; the limit is {limit:,} "
            f"({bound.setting}).",
            slug="work-too-large",
            title="Request needs too much work",
        )
