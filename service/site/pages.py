"""The pages for people: the playground's files under /static and Swagger UI at /docs, all served locally."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib.metadata import version
from importlib.resources import files
from pathlib import Path
from typing import Any

from flask import Response, render_template, request
from werkzeug.security import safe_join

from service.web.problems import Problem
from service.web.routes import Routes

routes = Routes("pages", __name__, description="The playground, its widgets and the interactive API docs.")

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
# flask-swagger-ui is used only for the Swagger UI files it ships (its own blueprint would template a page).
SWAGGER_UI_DIR = Path(str(files("flask_swagger_ui") / "dist"))
SWAGGER_UI_VERSION = version("flask-swagger-ui")  # its releases follow Swagger UI's own numbers

# Content types by suffix, stated here rather than guessed: Python 3.11's table says application/javascript,
# and browsers only run ES modules served with a JavaScript type. Other suffixes are not served.
CONTENT_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}

# Unversioned URLs are revalidated soon after a deploy; the pinned Swagger UI bundle never changes at its URL.
STATIC_MAX_AGE = 300
IMMUTABLE_MAX_AGE = 365 * 24 * 3600

# The pages load nothing from elsewhere; the browser enforces it. Swagger UI sets inline styles and shows
# the schema's data: images; the playground talks to this origin only.
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'self'; frame-ancestors 'self'"
)


NOT_MODIFIED = {"description": "Not modified: the If-None-Match ETag is current."}


def _content(description: str, *media_types: str) -> dict[str, Any]:
    def schema(media_type: str) -> dict[str, str]:
        return (
            {"type": "string"} if media_type.startswith("text/") else {"type": "string", "format": "binary"}
        )

    return {
        "description": description,
        "content": {media_type: {"schema": schema(media_type)} for media_type in media_types},
    }


@lru_cache(maxsize=64)
def _read(directory: Path, filename: str) -> tuple[bytes, str]:
    """A shipped file's bytes and ETag, read once: the files are small and never change while serving."""
    path = safe_join(str(directory), filename)
    if path is None or not Path(path).is_file():
        raise Problem(404, f"There is no file {filename!r} here.", slug="not-found")
    body = Path(path).read_bytes()
    return body, hashlib.sha256(body).hexdigest()[:32]


def _send(directory: Path, filename: str, content_type: str, *, max_age: int) -> Response:
    body, etag = _read(directory, filename)
    response = Response(body, mimetype=content_type)
    response.set_etag(etag)
    _protect(response)
    if max_age == 0:
        response.headers["Cache-Control"] = "no-cache"
    else:
        immutable = ", immutable" if max_age == IMMUTABLE_MAX_AGE else ""
        response.headers["Cache-Control"] = f"public, max-age={max_age}{immutable}"
    response.make_conditional(request)  # 304 for a matching If-None-Match
    if response.status_code == 412:
        # werkzeug marks a failed If-Match 412 but keeps the file and its public Cache-Control: a shared
        # cache could then store the 412, and the body is not what the client conditioned on.
        raise Problem(
            412, "The If-Match condition failed: the file's ETag is different.", slug="precondition-failed"
        )
    return response


def _protect(response: Response) -> None:
    """No type sniffing for any file, and every HTML page, wherever it is served from, under the CSP."""
    response.headers["X-Content-Type-Options"] = "nosniff"
    if response.mimetype == "text/html":
        response.headers["Content-Security-Policy"] = PAGE_CSP


def send_page(directory: Path, filename: str) -> Response:
    """An HTML page, always revalidated."""
    return _send(directory, filename, "text/html", max_age=0)


def _send_asset(directory: Path, filename: str, *, max_age: int) -> Response:
    content_type = CONTENT_TYPES.get(Path(filename).suffix)
    if content_type is None:
        raise Problem(404, f"There is no file {filename!r} here.", slug="not-found")
    return _send(directory, filename, content_type, max_age=max_age)


@routes.get(
    "/static/<path:filename>",
    operation_id="staticFile",
    summary="The playground's files: widgets.js (the widgets), client.js (the JS client), the page's styles.",
    responses={"200": _content("The file.", *dict.fromkeys(CONTENT_TYPES.values())), "304": NOT_MODIFIED},
)
def static_file(filename: str) -> Response:
    """The widgets (widgets.js), the JS client (client.js) and the playground's own files."""
    return _send_asset(STATIC_DIR, filename, max_age=STATIC_MAX_AGE)


@routes.get(
    "/static/widgets/<filename>",
    operation_id="widgetFile",
    summary="The widgets' ES modules, which widgets.js imports: one per widget, base.js and bigram.js.",
    responses={"200": _content("The module.", "text/javascript"), "304": NOT_MODIFIED},
)
def widget_module(filename: str) -> Response:
    """One module of the widgets (a path of its own, as a contract path parameter holds no slash)."""
    return _send_asset(STATIC_DIR / "widgets", filename, max_age=STATIC_MAX_AGE)


@routes.get(
    "/docs", operation_id="docs", responses={"200": _content("Swagger UI for this contract.", "text/html")}
)
def docs() -> Response:
    """Interactive documentation of this contract (Swagger UI, served from this service)."""
    response = Response(render_template("docs.html", swagger_ui=f"/docs/swagger-ui/{SWAGGER_UI_VERSION}"))
    response.headers["Cache-Control"] = "no-cache"
    _protect(response)
    return response


@routes.get(
    "/docs/swagger-ui/<version>/<filename>",
    operation_id="swaggerUiFile",
    summary="Swagger UI's files, at the pinned version.",
    responses={"200": _content("The file.", "text/javascript", "text/css", "image/png"), "304": NOT_MODIFIED},
)
def swagger_ui_file(version: str, filename: str) -> Response:
    """Swagger UI's bundle and styles; the URL names the version, so they may be cached for good."""
    if version != SWAGGER_UI_VERSION:
        raise Problem(
            404, f"This service ships Swagger UI {SWAGGER_UI_VERSION}, not {version}.", slug="not-found"
        )
    return _send_asset(SWAGGER_UI_DIR, filename, max_age=IMMUTABLE_MAX_AGE)
