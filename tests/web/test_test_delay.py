"""The test-only delay hook: off unless ENABLE_TEST_DELAY is set, bounded when on."""

from __future__ import annotations

import pytest

from service import create_app
from service.web import test_delay


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    calls: list[float] = []
    monkeypatch.setattr(test_delay.time, "sleep", calls.append)
    return calls


def test_off_by_default(sleeps: list[float]) -> None:
    client = create_app({"TESTING": True}).test_client()
    assert client.get("/livez", headers={"X-Test-Delay": "5"}).status_code == 200
    assert sleeps == []


@pytest.mark.parametrize(
    ("header", "slept"), [("0.25", [0.25]), ("999", [10.0]), ("nan", []), ("-1", []), ("x", [])]
)
def test_when_enabled_the_delay_is_bounded(sleeps: list[float], header: str, slept: list[float]) -> None:
    client = create_app({"TESTING": True, "ENABLE_TEST_DELAY": True}).test_client()
    assert client.get("/livez", headers={"X-Test-Delay": header}).status_code == 200
    assert sleeps == slept
