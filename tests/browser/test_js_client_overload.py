"""The JS client, from a page on another origin, waits out an overloaded service's 503 and sends again.

The service is the app in process with its whole memory budget held, so the worked example's body waits
COMPUTE_QUEUE_SECONDS for room and is refused 503 with a Retry-After of 1 s: the service's own answer, its
own CORS headers, read by Chromium as any page would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from service import create_app
from service.web.admission import Reservation, admission_of
from tests.browser.conftest import Watch, serve, serve_page

WORKED = {"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}
CALL = """async ([base, body, options]) => {
    const { attention, ApiError } = await import(base + "/static/client.js");
    const controller = new AbortController();
    if (options.abortAfter !== undefined) setTimeout(() => controller.abort(), options.abortAfter);
    try {
        return { answer: await attention(body, { ...options, signal: controller.signal }) };
    } catch (error) {
        return { error: { name: error.name, isApiError: error instanceof ApiError, status: error.status,
                          retryAfter: error.retryAfter, title: error.title } };
    }
}"""


@pytest.fixture
def overloaded() -> Iterator[tuple[str, Reservation]]:
    """A service whose memory budget is all held (by the reservation, until released): its URL, the hold."""
    app = create_app({"TESTING": True, "MEMORY_BUDGET_BYTES": 64 << 20, "COMPUTE_QUEUE_SECONDS": 0.1})
    admission = admission_of(app)
    assert admission is not None
    holder = Reservation(admission)
    assert holder.take(64 << 20)
    try:
        yield from ((url, holder) for url in serve(app))
    finally:
        holder.release()


@pytest.fixture
def elsewhere() -> Iterator[str]:
    """A page on a second loopback origin, with nothing on it."""
    yield from serve_page('<!doctype html><html lang="en"><head><title>Elsewhere</title></head></html>')


def posts(page: Any, base: str, release: Reservation | None = None) -> list[int]:
    """The statuses of the worked example's POSTs, as they come; ``release`` is given back after the first."""
    statuses: list[int] = []

    def handle(route: Any) -> None:
        if route.request.method != "POST":
            route.continue_()  # the preflight
            return
        response = route.fetch()
        statuses.append(response.status)
        if release is not None:
            release.release()
        route.fulfill(response=response)

    page.route(base + "/v1/attention", handle)
    return statuses


def test_an_overloaded_refusal_is_waited_out_and_the_call_answered(
    page: Any, overloaded: tuple[str, Reservation], elsewhere: str, watch: Watch
) -> None:
    base, holder = overloaded
    watch.expected.append("status of 503")  # Chromium logs the refused attempt
    statuses = posts(page, base, release=holder)
    page.goto(elsewhere + "/")
    result = page.evaluate(CALL, [base, WORKED, {}])
    output = result["answer"]["output"]
    assert output == pytest.approx([1.9814, 2.0093], abs=1e-4)
    assert statuses == [503, 200]


def test_a_longer_retry_after_than_allowed_is_raised_at_once_with_its_retry_after(
    page: Any, overloaded: tuple[str, Reservation], elsewhere: str, watch: Watch
) -> None:
    base, _ = overloaded
    watch.expected.append("status of 503")
    statuses = posts(page, base)
    page.goto(elsewhere + "/")
    result = page.evaluate(CALL, [base, WORKED, {"mostRetryWait": 0.5}])
    assert result["error"] == {
        "name": "ApiError",
        "isApiError": True,
        "status": 503,
        "retryAfter": 1,  # read across origins: the service exposes Retry-After
        "title": "Overloaded",
    }
    assert statuses == [503]


def test_aborting_ends_the_wait_for_a_retry(page: Any, base_url: str, elsewhere: str, watch: Watch) -> None:
    """A refusal that asks for a minute (hand-made, with the service's CORS headers), which the call allows:
    aborting it 0.3 s in ends the wait at once (ignored, the call would end a minute later)."""
    watch.expected.append("status of 503")
    headers = {
        "Content-Type": "application/problem+json",
        "Retry-After": "60",
        "Access-Control-Allow-Origin": "*",
        "Access-Control-Expose-Headers": "X-Request-ID, Inference-Header-Content-Length, Retry-After",
    }
    statuses: list[int] = []

    def refuse(route: Any) -> None:
        if route.request.method != "POST":
            route.continue_()
            return
        statuses.append(503)
        route.fulfill(status=503, headers=headers, body='{"title": "Overloaded", "status": 503}')

    page.route(base_url + "/v1/attention", refuse)
    page.goto(elsewhere + "/")
    page.evaluate(f"() => {{ window.__call = {CALL}; }}")
    page.evaluate(  # started, not awaited: the wait below is bounded
        "args => { window.__call(args).then(result => { window.__result = result; }); }",
        [base_url, WORKED, {"mostRetryWait": 120, "abortAfter": 300}],
    )
    page.wait_for_function("window.__result !== undefined", timeout=15_000)  # a minute if not ended
    assert page.evaluate("window.__result.error.name") == "AbortError"
    assert statuses == [503]
