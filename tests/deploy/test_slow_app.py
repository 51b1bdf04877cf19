"""The tests' delay hook: only the tests' wrapper app has it, and it is bounded."""

from __future__ import annotations

import pytest

from service import create_app
from tests.deploy import slow_app


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    calls: list[float] = []
    monkeypatch.setattr(slow_app.time, "sleep", calls.append)
    return calls


def test_the_service_itself_ignores_the_header(sleeps: list[float]) -> None:
    client = create_app({"TESTING": True}).test_client()
    assert client.get("/livez", headers={"X-Test-Delay": "5"}).status_code == 200
    assert sleeps == []


@pytest.mark.parametrize(
    ("header", "slept"), [("0.25", [0.25]), ("999", [10.0]), ("nan", []), ("-1", []), ("x", [])]
)
def test_the_wrapper_app_holds_requests_for_a_bounded_time(
    sleeps: list[float], header: str, slept: list[float]
) -> None:
    client = slow_app.create_app({"TESTING": True}).test_client()
    assert client.get("/livez", headers={"X-Test-Delay": header}).status_code == 200
    assert sleeps == slept
