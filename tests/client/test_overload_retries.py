"""The client sends a call again when an overloaded service refuses it with a Retry-After it can wait for.

Hand-made answers (httpx.MockTransport) script the refusals, sync and async alike; the waits are recorded
instead of slept. The last test takes the service's own 503 from the app in process, and waits for real.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import email.utils
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx
import numpy as np
import pytest
from attention_client import ApiError, AsyncClient, Client, InvalidInput, SoftmaxResult
from attention_client import _client as client_module
from attention_client._protocol import retry_after_seconds

from service import create_app
from service.web.admission import Reservation, admission_of
from tests.client.test_malformed_answers import GOOD_BODY, GOOD_HEADERS, LOGITS, PROBABILITIES

OVERLOADED = json.dumps(
    {
        "type": "urn:attention-service:problem:overloaded",
        "title": "Overloaded",
        "status": 503,
        "detail": "8 requests are already queued for this worker's compute slots; try again shortly.",
        "request_id": "0123",
    }
).encode()
Answer = tuple[int, dict[str, str], bytes]
GOOD: Answer = (200, GOOD_HEADERS, GOOD_BODY)


def refusal(status: int = 503, retry_after: str | None = "1") -> Answer:
    headers = {"Content-Type": "application/problem+json"}
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    return status, headers, OVERLOADED


class Script:
    """A transport that answers each request with the next of ``answers`` (the last one again once they run
    out), and counts the requests."""

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = answers
        self.requests = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        status, headers, body = self.answers[min(self.requests, len(self.answers) - 1)]
        self.requests += 1
        return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body))


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The client's waits, recorded rather than slept."""
    recorded: list[float] = []

    async def asleep(seconds: float) -> None:
        recorded.append(seconds)

    monkeypatch.setattr(client_module.time, "sleep", recorded.append)
    monkeypatch.setattr(client_module.asyncio, "sleep", asleep)
    return recorded


def assert_waited(waits: list[float], retry_afters: list[float]) -> None:
    """Each wait is its Retry-After and up to a fifth more (jitter, to spread clients refused together)."""
    assert len(waits) == len(retry_afters), waits
    for waited, asked in zip(waits, retry_afters, strict=True):
        assert asked <= waited <= asked * (1 + client_module.RETRY_JITTER), (waits, retry_afters)


def call_sync(script: Script, **options: float) -> SoftmaxResult:
    transport = httpx.MockTransport(script.handle)
    with Client("http://service.test", transport=transport, **options) as service:  # type: ignore[arg-type]
        return service.softmax(LOGITS)


def call_async(script: Script, **options: float) -> SoftmaxResult:
    async def call() -> SoftmaxResult:
        transport = httpx.MockTransport(script.handle)
        async with AsyncClient("http://service.test", transport=transport, **options) as service:  # type: ignore[arg-type]
            return await service.softmax(LOGITS)

    # On a thread of its own, as in test_malformed_answers (a running loop may sit on this one).
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(lambda: asyncio.run(call())).result(timeout=60)


CALLS = pytest.mark.parametrize("call", [call_sync, call_async], ids=["sync", "async"])


@CALLS
def test_an_overloaded_refusal_is_sent_again_once_its_retry_after_has_passed(
    call: Callable[..., SoftmaxResult], waits: list[float]
) -> None:
    script = Script([refusal(503, "2"), refusal(429, "1"), GOOD])
    result = call(script)
    np.testing.assert_allclose(result.probabilities, PROBABILITIES, rtol=1e-15)
    assert script.requests == 3
    assert_waited(waits, [2.0, 1.0])


@CALLS
def test_when_the_retries_run_out_the_last_refusal_raises_with_its_retry_after(
    call: Callable[..., SoftmaxResult], waits: list[float]
) -> None:
    script = Script([refusal(503, "1")])
    with pytest.raises(ApiError) as raised:
        call(script, overload_retries=3)
    assert (raised.value.status, raised.value.title, raised.value.retry_after) == (503, "Overloaded", 1.0)
    assert script.requests == 4
    assert_waited(waits, [1.0, 1.0, 1.0])


@CALLS
def test_a_refusal_asking_for_a_longer_wait_than_the_client_allows_raises_at_once(
    call: Callable[..., SoftmaxResult], waits: list[float]
) -> None:
    script = Script([refusal(503, "30"), GOOD])
    with pytest.raises(ApiError) as raised:
        call(script)  # the default allows 10 s
    assert raised.value.retry_after == 30.0
    assert script.requests == 1
    assert waits == []
    assert call(Script([refusal(503, "30"), GOOD]), most_retry_wait=30).probabilities.shape == (3,)
    assert_waited(waits, [30.0])


@pytest.mark.parametrize(
    "answer",
    [
        refusal(503, None),  # no Retry-After: not the service's load shedding (a proxy's outage page)
        refusal(504, "1"),  # past its deadline: the computation ran
        refusal(500, "1"),
        refusal(422, "1"),
        refusal(503, "soon"),  # not a Retry-After
    ],
    ids=lambda answer: f"{answer[0]}-{answer[1].get('Retry-After')}",
)
def test_other_answers_are_not_sent_again(answer: Answer, waits: list[float]) -> None:
    script = Script([answer, GOOD])
    with pytest.raises(ApiError) as raised:
        call_sync(script)
    assert raised.value.status == answer[0]
    assert script.requests == 1
    assert waits == []


def test_no_overload_retries_raises_the_first_refusal(waits: list[float]) -> None:
    script = Script([refusal(503, "0"), GOOD])
    with pytest.raises(ApiError):
        call_sync(script, overload_retries=0)
    assert (script.requests, waits) == (1, [])


def test_retry_after_is_delta_seconds_or_an_http_date() -> None:
    assert retry_after_seconds({"Retry-After": "7"}) == 7.0
    assert retry_after_seconds({"retry-after": " 0 "}) == 0.0
    assert retry_after_seconds({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # passed already
    assert retry_after_seconds({"Retry-After": "Sunday, 06-Nov-94 08:49:37 GMT"}) == 0.0  # RFC 850's format
    assert retry_after_seconds({"Retry-After": "Sun Nov  6 08:49:37 1994"}) == 0.0  # asctime's, zoneless
    ahead = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=100), usegmt=True)
    seconds = retry_after_seconds({"Retry-After": ahead})
    assert seconds is not None
    assert 98.0 <= seconds <= 100.0  # the date has whole seconds, and a little time passes
    for unreadable in ["1.5", "-1", "soon", "", "5 GMT"]:
        assert retry_after_seconds({"Retry-After": unreadable}) is None, unreadable
    assert retry_after_seconds({}) is None


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("overload_retries", -1),
        ("overload_retries", 1.5),
        ("overload_retries", True),
        ("most_retry_wait", -1.0),
        ("most_retry_wait", float("inf")),
        ("most_retry_wait", float("nan")),
        ("most_retry_wait", True),
    ],
)
def test_retry_options_are_checked(option: str, value: object) -> None:
    with pytest.raises(InvalidInput) as raised:
        Client("http://service.test", **{option: value})  # type: ignore[arg-type]
    assert raised.value.argument == option


def test_the_service_s_own_overload_refusal_is_waited_out() -> None:
    """The app in process, its whole memory budget held: the worked example waits COMPUTE_QUEUE_SECONDS for
    room and is refused 503 with a Retry-After of 1 s. The budget is given back as that answer arrives, and
    the call, sent again a second later, is answered."""
    app = create_app({"TESTING": True, "COMPUTE_QUEUE_SECONDS": 0.2, "MEMORY_BUDGET_BYTES": 64 << 20})
    admission = admission_of(app)
    assert admission is not None
    holder = Reservation(admission)
    assert holder.take(64 << 20)
    inner = httpx.WSGITransport(app=app)
    answers: list[tuple[int, str | None]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        response = inner.handle_request(request)
        answers.append((response.status_code, response.headers.get("Retry-After")))
        holder.release()
        return response

    with Client("http://service.test", transport=httpx.MockTransport(handle)) as service:
        result = service.attention([0.0, 1.0], [[1.0, 0.0], [0.0, 1.0]], [[6.0, 0.0], [0.0, 3.0]])
    np.testing.assert_allclose(result.output, [1.9814, 2.0093], atol=1e-4)
    assert answers == [(503, "1"), (200, None)]
