"""Every way a JS client call can fail is an ApiError carrying the HTTP status the answer came with.

A page on another origin calls the service; its answers are replaced by hand (with the service's CORS
headers): a 502 labelled JSON that is a proxy's HTML page, a 200 whose JSON is cut short, a 503 whose body
says 200, and, from a loopback socket of the test's own, a body shorter than its Content-Length.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.browser.conftest import Watch, serve_page
from tests.browser.test_js_client_overload import CALL, OVERLOADED_HEADERS, WORKED

JSON_HEADERS = {**OVERLOADED_HEADERS, "Content-Type": "application/json"}


@pytest.fixture
def elsewhere() -> Iterator[str]:
    """A page on a second loopback origin, with nothing on it."""
    yield from serve_page('<!doctype html><html lang="en"><head><title>Elsewhere</title></head></html>')


def answer_posts(page: Any, url: str, answers: list[tuple[int, dict[str, str], str]]) -> list[int]:
    """Each POST to ``url`` answered by the next of ``answers``, then by the service; their statuses."""
    statuses: list[int] = []

    def handle(route: Any) -> None:
        if route.request.method != "POST":
            route.continue_()  # the preflight
            return
        if len(statuses) < len(answers):
            status, headers, body = answers[len(statuses)]
            statuses.append(status)
            route.fulfill(status=status, headers=headers, body=body)
            return
        response = route.fetch()
        statuses.append(response.status)
        route.fulfill(response=response)

    page.route(url, handle)
    return statuses


@pytest.mark.parametrize(
    ("status", "body", "title"),
    [
        (502, "<html><body><h1>502 Bad Gateway</h1></body></html>", "Bad Gateway"),
        (200, '{"output": [1.98', "Malformed answer"),
        (200, "null", "Malformed answer"),
        (200, "[1, 2]", "Malformed answer"),  # an array is no answer object (typeof says "object")
    ],
    ids=["html-labelled-json", "truncated-json", "json-null", "json-array"],
)
def test_an_answer_labelled_json_that_is_not_is_an_api_error_with_its_status(
    page: Any, base_url: str, elsewhere: str, watch: Watch, status: int, body: str, title: str
) -> None:
    # It was a raw SyntaxError from response.json().
    watch.expected.append(f"status of {status}")
    answer_posts(page, base_url + "/v1/attention", [(status, JSON_HEADERS, body)])
    page.goto(elsewhere + "/")
    result = page.evaluate(CALL, [base_url, WORKED, {}])
    assert result["error"] == {
        "name": "ApiError",
        "isApiError": True,
        "status": status,
        "retryAfter": 2,
        "title": title,
    }


def test_the_http_status_wins_over_the_body_s_and_an_overloaded_refusal_is_retried(
    page: Any, base_url: str, elsewhere: str, watch: Watch
) -> None:
    # A 503 whose problem document says 200 was ApiError(200), and so not sent again.
    watch.expected.append("status of 503")
    lying = (503, {**OVERLOADED_HEADERS, "Retry-After": "1"}, '{"title": "Overloaded", "status": 200}')
    statuses = answer_posts(page, base_url + "/v1/attention", [lying])
    page.goto(elsewhere + "/")
    result = page.evaluate(CALL, [base_url, WORKED, {}])
    assert result["answer"]["output"] == pytest.approx([1.9814, 2.0093], abs=1e-4)
    assert statuses == [503, 200]


@pytest.fixture
def cut_short() -> Iterator[str]:
    """A loopback server that answers every POST with 200 and half the body its Content-Length promises (and
    every preflight with CORS's permission)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def answer(connection: socket.socket) -> None:
        with connection:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = connection.recv(65536)
                if not chunk:
                    return
                head += chunk
            cors = b"Access-Control-Allow-Origin: *\r\nAccess-Control-Allow-Headers: Content-Type\r\n"
            if head.startswith(b"OPTIONS"):
                connection.sendall(b"HTTP/1.1 204 No Content\r\n" + cors + b"Connection: close\r\n\r\n")
                return
            body = b'{"output": [1.98'
            connection.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + cors
                + f"Content-Length: {2 * len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=answer, args=(connection,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=10)
        listener.close()


def test_a_body_cut_short_is_an_api_error_with_its_status(
    page: Any, base_url: str, elsewhere: str, watch: Watch, cut_short: str
) -> None:
    # It was fetch's own "TypeError: terminated" (or "network error"), not an ApiError.
    watch.expected.append("ERR_CONTENT_LENGTH_MISMATCH")
    page.goto(elsewhere + "/")
    result = page.evaluate(
        """async ([base, target, body]) => {
            const { attention, ApiError } = await import(base + "/static/client.js");
            try { return { answer: await attention(body, { baseUrl: target }) }; }
            catch (error) {
                return { error: { name: error.name, isApiError: error instanceof ApiError,
                                  status: error.status, title: error.title } };
            }
        }""",
        [base_url, cut_short, WORKED],
    )
    assert result["error"] == {
        "name": "ApiError",
        "isApiError": True,
        "status": 200,
        "title": "Truncated answer",
    }


def test_a_path_without_a_route_is_its_404_not_an_unreachable_service(
    browser: Any, base_url: str, elsewhere: str
) -> None:
    # A baseUrl ending in /v1 posts to /v1/v1/attention: its preflight was a 404, so Chromium blocked the
    # real call and the client said status 0, "Service unreachable". A context of its own, without the
    # loopback guard's routing: under it, the call read its 404 even while the preflight was a 404. Every
    # request it makes is checked to be a loopback one instead.
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        hosts: list[str | None] = []
        page.on("request", lambda request: hosts.append(urlsplit(request.url).hostname))
        page.goto(elsewhere + "/")
        result = page.evaluate(CALL, [base_url, WORKED, {"baseUrl": base_url + "/v1"}])
    finally:
        context.close()
    assert set(hosts) == {"127.0.0.1"}
    assert result["error"] == {
        "name": "ApiError",
        "isApiError": True,
        "status": 404,
        "retryAfter": None,
        "title": "Not Found",
    }


@pytest.mark.parametrize(
    ("make", "message"),
    [
        ("() => ({ logits: [1, 2], seed: 5n })", "BigInt"),
        ("() => { const body = { logits: [1, 2] }; body.self = body; return body; }", "circular"),
    ],
    ids=["bigint", "circular"],
)
def test_a_body_json_cannot_write_is_its_type_error_not_an_unreachable_service(
    page: Any, base_url: str, elsewhere: str, watch: Watch, make: str, message: str
) -> None:
    # JSON.stringify ran inside the fetch's try, whose catch made every error status 0, "Service unreachable".
    page.goto(elsewhere + "/")
    result = page.evaluate(
        """async ([base, make]) => {
            const { sample, ApiError } = await import(base + "/static/client.js");
            try { return { answer: await sample((0, eval)(make)()) }; }
            catch (error) {
                return { error: { name: error.name, isApiError: error instanceof ApiError,
                                  message: error.message } };
            }
        }""",
        [base_url, make],
    )
    assert result["error"]["name"] == "TypeError"
    assert result["error"]["isApiError"] is False
    assert message in result["error"]["message"]
    assert watch.posts_to("/v1/sample") == []
