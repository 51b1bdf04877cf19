"""The service's per-request steps (clock, request id, keys, access log, metrics, …), run by one Flask hook
before the view and one after it.

Flask calls each registered hook through ``app.ensure_sync`` (an ``inspect.iscoroutinefunction`` test per
hook per request), and each hook reached ``request`` and ``g`` through werkzeug's context-local proxies
several times over: with eight hooks that cost more per small request than the hooks' own work
(docs/performance.md, "Per-request overhead"). Here every step is a plain function given the request and
``g`` (and the response, after the view), resolved once per request. The steps keep Flask's semantics: the
before steps run in the order installed and a non-None result ends the request with that answer; the after
steps run in the reverse order, each handed the previous one's response, as Flask runs ``after_request``
hooks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Flask, Response, g, request
from flask.ctx import _AppCtxGlobals
from flask.wrappers import Request

BeforeStep = Callable[[Request, _AppCtxGlobals], Any]
AfterStep = Callable[[Request, _AppCtxGlobals, Response], Response]

_EXTENSION = "attention_request_steps"


class RequestSteps:
    """The app's before and after steps (``app.extensions``), run by the two hooks :meth:`install` adds."""

    def __init__(self) -> None:
        self.before: list[BeforeStep] = []
        self.after: list[AfterStep] = []  # in the order they run: the last installed first

    def add_before(self, step: BeforeStep) -> None:
        self.before.append(step)

    def add_after(self, step: AfterStep) -> None:
        self.after.insert(0, step)

    def run_before(self) -> Any:
        current_request: Request = request._get_current_object()  # type: ignore[attr-defined]
        current_g: _AppCtxGlobals = g._get_current_object()
        for step in self.before:
            answer = step(current_request, current_g)
            if answer is not None:
                return answer
        return None

    def run_after(self, response: Response) -> Response:
        current_request: Request = request._get_current_object()  # type: ignore[attr-defined]
        current_g: _AppCtxGlobals = g._get_current_object()
        for step in self.after:
            response = step(current_request, current_g, response)
        return response


def request_steps(app: Flask) -> RequestSteps:
    """The app's steps, created (and their two hooks registered) on first use."""
    steps: RequestSteps | None = app.extensions.get(_EXTENSION)
    if steps is None:
        steps = RequestSteps()
        app.extensions[_EXTENSION] = steps
        app.before_request(steps.run_before)
        app.after_request(steps.run_after)
    return steps
