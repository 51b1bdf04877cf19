"""CORS for widgets on other origins, by flask-cors: origins from ``CORS_ORIGINS``, no credentials.

flask-cors works out the headers afresh for every response (origin matching, a MultiDict, debug logging);
here its per-response hook is replaced by one that asks flask-cors's own ``get_cors_headers`` once per
distinct (origin, preflight headers) and reuses the answer, so the headers are exactly flask-cors's. The
cache is bounded: past :data:`MAX_CACHED` distinct requests (a client making up origins) it computes
without storing.

A preflight from an allowed origin succeeds for any path, one without a route too: a 404 to the preflight
would make the browser block the real request, and the page would see a network failure (the JS client's
status 0, "Service unreachable") rather than the real request's 404 problem+json, which carries the CORS
headers as every answer does.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, Response
from flask.globals import request_ctx
from flask.wrappers import Request
from flask_cors import CORS
from flask_cors.core import (
    ACL_ORIGIN,
    ACL_REQUEST_HEADER_PRIVATE_NETWORK,
    ACL_REQUEST_HEADERS,
    ACL_REQUEST_METHOD,
    get_cors_headers,
    get_cors_options,
    get_cors_origins,
)

from service.web.hooks import RequestGlobals, request_steps

MAX_CACHED = 1024
# /v2's binary tensor data gives the JSON header's length in this header, both ways: a page on another
# origin must be allowed to send it (it is not CORS-safelisted) and to read it on the answer (only
# safelisted response headers are readable unless exposed), or it can neither send nor split binary bodies.
BINARY_HEADER_LENGTH = "Inference-Header-Content-Length"
# Content-Encoding: a page may send a gzip or deflate body too, as tritonclient's request compression does.
ALLOW_HEADERS = ["Content-Type", "Content-Encoding", "Authorization", "X-Request-ID", BINARY_HEADER_LENGTH]
# Retry-After too: an overloaded service's 503 says in it when to come back (the JS client waits for it).
EXPOSE_HEADERS = ["X-Request-ID", BINARY_HEADER_LENGTH, "Retry-After"]
_CacheKey = tuple[str | None, str | None, str | None, str | None, str | None]


def enable_cors(app: Flask) -> None:
    """Answer preflights (cached ``CORS_MAX_AGE`` seconds) and mark responses for the allowed origins."""
    options: dict[str, Any] = {
        "origins": app.config["CORS_ORIGINS"],
        "methods": ["GET", "POST", "OPTIONS"],
        "allow_headers": ALLOW_HEADERS,
        "expose_headers": EXPOSE_HEADERS,
        "max_age": app.config["CORS_MAX_AGE"],
        "supports_credentials": False,
        # "*" rather than an echo: cacheable by any proxy
        "send_wildcard": app.config["CORS_ORIGINS"] == ["*"],
    }
    CORS(app, **options)
    computed = get_cors_options(app, options)
    _replace_per_response_hook(app, _cached_cors_headers(computed))
    request_steps(app).add_before(_preflights_of_any_path(computed))
    if app.config["CORS_ORIGINS"] != ["*"]:
        app.after_request(_vary_on_origin)


def _preflights_of_any_path(options: Any) -> Any:
    """A before step: a preflight from an allowed origin to a path without a route is answered 200 (the
    per-response hook adds the CORS headers), not 404, so that the real request gets its real answer."""

    def answer_preflight(request: Request, g: RequestGlobals) -> Response | None:
        if request.method != "OPTIONS" or request.routing_exception is None:
            return None  # a routed path: Flask answers its OPTIONS itself
        headers = request.headers
        if ACL_REQUEST_METHOD not in headers or not get_cors_origins(options, headers.get("Origin")):
            return None  # not a preflight, or from an origin not allowed: its 404 as before
        return Response(status=200)

    return answer_preflight


def _replace_per_response_hook(app: Flask, replacement: Any) -> None:
    hooks = app.after_request_funcs.setdefault(None, [])
    positions = [i for i, hook in enumerate(hooks) if getattr(hook, "__name__", "") == "cors_after_request"]
    if len(positions) != 1:
        raise RuntimeError(
            "flask-cors no longer registers one cors_after_request hook: see service/web/cors.py"
        )
    hooks[positions[0]] = replacement


def _cached_cors_headers(options: Any) -> Any:
    cache: dict[_CacheKey, list[tuple[str, Any]]] = {}

    def cors_headers(response: Response) -> Response:
        # getlist, not get: get raises and catches a werkzeug KeyError (an HTTPException) when it is absent
        set_by_view = response.headers.getlist(ACL_ORIGIN)
        if set_by_view and set_by_view[0]:
            return response  # set by a view already, as flask-cors's own hook respects
        current_request = request_ctx.request  # once, not through the proxy per use
        headers = current_request.headers
        method = current_request.method
        preflight = method == "OPTIONS"
        key: _CacheKey = (
            method if preflight else None,
            headers.get("Origin"),
            headers.get(ACL_REQUEST_METHOD) if preflight else None,
            headers.get(ACL_REQUEST_HEADERS) if preflight else None,
            headers.get(ACL_REQUEST_HEADER_PRIVATE_NETWORK),
        )
        to_set = cache.get(key)
        if to_set is None:
            to_set = list(get_cors_headers(options, headers, method).items())
            if len(cache) < MAX_CACHED:
                cache[key] = to_set
        for name, value in to_set:
            response.headers.add(name, value)
        return response

    return cors_headers


def _vary_on_origin(response: Response) -> Response:
    # With a list of origins the CORS headers depend on the request's Origin, so a shared cache must
    # keep one copy per Origin (flask-cors says so only on the responses it decorates).
    response.vary.add("Origin")
    return response
