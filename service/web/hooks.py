"""The service's per-request steps (clock, request id, keys, access log, metrics, …), run by one Flask hook
before the view and one after it.

Each step is a plain function of the request and ``g`` (and the response, after the view), in an order that
matters (the clock before the request id, the access log after the metrics), stated in one list per app
rather than by the order of eight hook registrations. The steps keep Flask's semantics: the before steps
run in the order installed and a non-None result ends the request with that answer; the after steps run in
the reverse order, each handed the previous one's response, as Flask runs ``after_request`` hooks.

The steps are handed the request and ``g`` themselves, looked up once per hook through Flask's public
``flask.globals.request_ctx`` and ``app_ctx`` (what Flask 2.3 named in place of the context stacks), not
through the ``request``/``g`` proxies, which look the context up again on every attribute (about 40 times
a request across the steps).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from flask import Flask, Response
from flask.globals import app_ctx, request_ctx
from flask.wrappers import Request


class RequestGlobals(Protocol):
    """What a step uses of ``flask.g``: attributes set and read per request (``getattr`` with a default
    for one that may not be set)."""

    def __getattr__(self, name: str) -> Any: ...

    def __setattr__(self, name: str, value: Any) -> None: ...


BeforeStep = Callable[[Request, RequestGlobals], Any]
AfterStep = Callable[[Request, RequestGlobals, Response], Response]

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
        request, g = request_ctx.request, app_ctx.g
        for step in self.before:
            answer = step(request, g)
            if answer is not None:
                return answer
        return None

    def run_after(self, response: Response) -> Response:
        request, g = request_ctx.request, app_ctx.g
        for step in self.after:
            response = step(request, g, response)
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
