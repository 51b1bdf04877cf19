"""The JS client, from a page on another origin, sends an API key to a service that requires one.

The service is the app in process with ``API_KEYS`` set, as operations.md shows: its computations answer 401
without a valid `Authorization: Bearer <key>`, and its preflights (which carry no credentials) stay open.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from service import create_app
from tests.browser.conftest import Watch, serve, serve_page
from tests.browser.test_js_client_overload import CALL, WORKED

KEY = "s3cret-key"


@pytest.fixture
def keyed() -> Iterator[str]:
    """A service that requires the key ``KEY``."""
    yield from serve(create_app({"TESTING": True, "API_KEYS": [KEY]}))


@pytest.fixture
def elsewhere() -> Iterator[str]:
    """A page on a second loopback origin, with nothing on it."""
    yield from serve_page('<!doctype html><html lang="en"><head><title>Elsewhere</title></head></html>')


def test_the_api_key_is_sent_as_a_bearer_token(page: Any, keyed: str, elsewhere: str, watch: Watch) -> None:
    # The client had no way to send one: every call to a keyed service was a 401.
    authorizations: list[str | None] = []
    page.on(
        "request",
        lambda request: (
            request.method == "POST" and authorizations.append(request.headers.get("authorization"))
        ),
    )
    page.goto(elsewhere + "/")
    result = page.evaluate(CALL, [keyed, WORKED, {"baseUrl": keyed, "apiKey": KEY}])
    assert result["answer"]["output"] == pytest.approx([1.9814, 2.0093], abs=1e-4)
    assert authorizations == [f"Bearer {KEY}"]


@pytest.mark.parametrize("options", [{}, {"apiKey": "not-the-key"}], ids=["no-key", "wrong-key"])
def test_without_the_right_key_the_call_is_a_401_api_error(
    page: Any, keyed: str, elsewhere: str, watch: Watch, options: dict[str, str]
) -> None:
    watch.expected.append("status of 401")
    page.goto(elsewhere + "/")
    result = page.evaluate(CALL, [keyed, WORKED, {"baseUrl": keyed, **options}])
    assert result["error"] == {
        "name": "ApiError",
        "isApiError": True,
        "status": 401,
        "retryAfter": None,
        "title": "Unauthorized",
    }


def test_an_api_key_that_is_not_a_string_is_refused_before_sending(
    page: Any, keyed: str, elsewhere: str, watch: Watch
) -> None:
    page.goto(elsewhere + "/")
    result = page.evaluate(CALL, [keyed, WORKED, {"baseUrl": keyed, "apiKey": 42}])
    assert result["error"]["name"] == "TypeError"
    assert [url for method, url, _ in watch.requests if method == "POST"] == []
