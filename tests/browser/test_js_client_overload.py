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
# A hand-made overloaded refusal, with the CORS headers the service sends on its own.
OVERLOADED_HEADERS = {
    "Content-Type": "application/problem+json",
    "Retry-After": "2",
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Expose-Headers": "X-Request-ID, Inference-Header-Content-Length, Retry-After",
}
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
    headers = {**OVERLOADED_HEADERS, "Retry-After": "60"}
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


@pytest.fixture
def widget_elsewhere(base_url: str) -> Iterator[str]:
    """A page on a second loopback origin holding one widget of the service."""
    yield from serve_page(
        '<!doctype html><html lang="en"><head><title>A widget elsewhere</title>'
        f'<script type="module" src="{base_url}/static/widgets.js"></script></head>'
        f'<body><softmax-temperature api="{base_url}"></softmax-temperature></body></html>'
    )


def test_a_widget_says_the_service_is_busy_while_it_waits_to_ask_again(
    page: Any, base_url: str, widget_elsewhere: str, watch: Watch
) -> None:
    """The first request of a widget on another origin is refused as overloaded (hand-made, asking for 2 s):
    the card says so while it waits, then shows the answer with the notice gone."""
    watch.expected.append("status of 503")
    refused: list[str] = []

    def first_refused(route: Any) -> None:
        if route.request.method != "POST" or refused:
            route.continue_()
            return
        refused.append(route.request.url)
        route.fulfill(status=503, headers=OVERLOADED_HEADERS, body='{"title": "Overloaded", "status": 503}')

    page.route(base_url + "/v1/softmax", first_refused)
    page.goto(widget_elsewhere + "/")
    card = "document.querySelector('softmax-temperature')?.shadowRoot"
    notice = f"{card}?.querySelector('.error.general')"
    page.wait_for_function(f"({notice}?.textContent ?? '').includes('busy')")
    said = page.evaluate(f"{notice}.textContent")
    assert said in {f"The service is busy; asking again in {s} s." for s in (2, 3)}  # 2 s and the jitter
    page.wait_for_function("document.querySelector('softmax-temperature').dataset.state === 'ready'")
    assert page.evaluate(f"{notice}.textContent") == ""
    assert page.evaluate("document.querySelector('softmax-temperature').hasAttribute('aria-busy')") is False
    assert page.evaluate(f"{card}.querySelector('.output').childElementCount") > 0  # the answer, drawn
    assert len(refused) == 1


def test_retry_options_are_checked_and_retry_after_read_in_its_forms(
    page: Any, base_url: str, elsewhere: str
) -> None:
    page.goto(elsewhere + "/")
    result = page.evaluate(
        """async base => {
            const { softmax, retryAfterSeconds } = await import(base + "/static/client.js");
            const refused = [];
            const bad = [{ overloadRetries: NaN }, { overloadRetries: -1 }, { overloadRetries: 1.5 },
                         { mostRetryWait: Infinity }, { mostRetryWait: "10" }];
            for (const options of bad) {
                try { await softmax({ logits: [1] }, options); refused.push(null); }
                catch (error) { refused.push(error.name); }
            }
            const forms = ["7", " 0 ", "Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
                           "Sun Nov  6 08:49:37 1994", "5 GMT", "12 GMT", "soon", "1.5", "-1", "", null];
            return { refused, read: forms.map(retryAfterSeconds) };
        }""",
        base_url,
    )
    assert result["refused"] == ["TypeError"] * 5
    assert result["read"] == [7, 0, 0, 0, 0, None, None, None, None, None, None, None]
