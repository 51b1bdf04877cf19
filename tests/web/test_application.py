"""The service's Flask class decides sync or ``async`` once per function, and decides it as Flask does."""

from __future__ import annotations

import gc
import inspect
from typing import Any

import pytest

from service import create_app
from service.web import application
from service.web.application import ServiceFlask


@pytest.fixture
def inspections(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The functions ``inspect.iscoroutinefunction`` is asked about, in order."""
    asked: list[Any] = []

    def counting(func: Any) -> bool:
        asked.append(func)
        return inspect.iscoroutinefunction(func)

    monkeypatch.setattr(application, "iscoroutinefunction", counting)
    return asked


def test_the_app_is_the_service_flask_class() -> None:
    assert isinstance(create_app({"TESTING": True}), ServiceFlask)


def test_a_plain_function_is_returned_as_it_is_and_inspected_once(inspections: list[Any]) -> None:
    app = create_app({"TESTING": True})

    def view() -> str:
        return "ok"

    assert app.ensure_sync(view) is view
    assert app.ensure_sync(view) is view
    assert inspections == [view]


def test_a_coroutine_function_still_goes_through_async_to_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    app = create_app({"TESTING": True})
    wrapped: list[Any] = []

    def fake_async_to_sync(func: Any) -> Any:
        wrapped.append(func)
        return lambda *args, **kwargs: "ran"

    monkeypatch.setattr(app, "async_to_sync", fake_async_to_sync)

    async def view() -> str:
        return "ok"

    for _ in range(2):
        assert app.ensure_sync(view)() == "ran"
    assert wrapped == [view, view]


def test_a_bound_method_made_again_is_found_in_the_cache(inspections: list[Any]) -> None:
    app = create_app({"TESTING": True})

    class Hooks:
        def run(self) -> None: ...

    hooks = Hooks()
    stored = hooks.run  # as Flask stores a registered hook
    app.ensure_sync(stored)
    assert app.ensure_sync(hooks.run) == hooks.run  # a new bound-method object, equal to the stored one
    assert inspections == [stored]


def test_a_function_made_per_request_is_not_kept_alive() -> None:
    app = create_app({"TESTING": True})
    assert isinstance(app, ServiceFlask)
    for number in range(100):

        def after_this_request(response: Any, number: int = number) -> Any:
            return response

        app.ensure_sync(after_this_request)
    del after_this_request
    gc.collect()
    assert len(app.coroutine_functions) < 100  # entries die with their functions


def test_a_callable_without_weak_references_is_asked_about_every_time(inspections: list[Any]) -> None:
    app = create_app({"TESTING": True})

    class Slotted:
        __slots__ = ()  # no __weakref__: it cannot be a weak key

        def __call__(self) -> str:
            return "ok"

    view = Slotted()
    assert app.ensure_sync(view) is view
    assert app.ensure_sync(view) is view
    assert inspections == [view, view]
