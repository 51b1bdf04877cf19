"""Real headless Chromium (Debian's package) against the app served in-process on a free loopback port.

Every page is watched: a request to anything but 127.0.0.1 is aborted and fails the test, and so does any
console error or uncaught exception. Without Chromium these tests skip locally, and fail under CI=true.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from werkzeug.serving import make_server

from service import create_app

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"
LOOPBACK = "127.0.0.1"

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Any]


def _require_chromium() -> None:
    if CHROMIUM.exists():
        return
    reason = f"{CHROMIUM} is missing: `apt-get install chromium` (the browser tests drive Debian's Chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def serve(app: WSGIApp) -> Iterator[str]:
    """Serve ``app`` on a free 127.0.0.1 port in a thread; yields its base URL."""
    server = make_server(LOOPBACK, 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{LOOPBACK}:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def serve_page(html: str) -> Iterator[str]:
    """A second loopback origin serving one HTML page (a page embedding a widget); yields its base URL."""
    body = html.encode()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
        return [body]

    yield from serve(app)


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the tests save screenshots: ``docs/`` for the README with UPDATE_SCREENSHOTS=1, else a temp dir.

    Writing to ``docs/`` on every run would leave a modified file after each ``make test`` (the docs page
    shows a random port); ``make screenshots`` refreshes the committed ones.
    """
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        return DOCS_DIR
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="session")
def base_url() -> Iterator[str]:
    """The service itself."""
    yield from serve(create_app({"TESTING": True}))


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    _require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        yield chromium
        chromium.close()


@dataclass
class Watch:
    """What a page did that it must not: leave loopback, log an error, throw."""

    external: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, url, body
    expected: list[str] = field(default_factory=list)  # console errors a test provokes on purpose

    def unexpected_errors(self) -> list[str]:
        return [error for error in self.errors if not any(part in error for part in self.expected)]

    def posts_to(self, path: str) -> list[str | None]:
        return [
            body for method, url, body in self.requests if method == "POST" and urlsplit(url).path == path
        ]


@pytest.fixture
def watch() -> Watch:
    return Watch()


def _guard(watch: Watch) -> Callable[[Any], None]:
    def handle(route: Any) -> None:
        request = route.request
        if urlsplit(request.url).hostname == LOOPBACK:
            watch.requests.append((request.method, request.url, request.post_data))
            route.continue_()
        else:
            watch.external.append(request.url)
            route.abort("blockedbyclient")

    return handle


@pytest.fixture
def page(browser: Any, watch: Watch) -> Iterator[Any]:
    """A fresh desktop-sized page whose every request goes through the loopback guard."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.route("**/*", _guard(watch))
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.on("console", lambda message: message.type == "error" and watch.errors.append(message.text))
    page.on("pageerror", lambda error: watch.errors.append(f"uncaught: {error}"))
    yield page
    context.close()
    assert watch.external == [], f"requests left 127.0.0.1: {watch.external}"
    assert watch.unexpected_errors() == [], f"console errors: {watch.errors}"
