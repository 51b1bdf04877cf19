"""The service's Flask class decides sync or ``async`` once per function, and decides it as Flask does."""

from __future__ import annotations

from typing import Any

import pytest

from service import create_app
from service.web.application import ServiceFlask


def test_the_app_is_the_service_flask_class() -> None:
    assert isinstance(create_app({"TESTING": True}), ServiceFlask)


def test_a_plain_function_is_returned_as_it_is() -> None:
    app = create_app({"TESTING": True})

    def view() -> str:
        return "ok"

    assert app.ensure_sync(view) is view
    assert app.ensure_sync(view) is view  # the second time from the cache


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


def test_a_bound_method_made_again_is_found_in_the_cache() -> None:
    app = create_app({"TESTING": True})

    class Hooks:
        def run(self) -> None: ...

    hooks = Hooks()
    assert app.ensure_sync(hooks.run) == hooks.run  # a new bound-method object, equal to the cached one
