from __future__ import annotations

import pytest

from service.settings import Settings


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.max_body_bytes == 16 * 1024 * 1024
    assert settings.max_work_elements == 16_777_216
    assert settings.max_output_only_work_elements == 67_108_864 == 8192 * 8192


def test_environment_overrides() -> None:
    settings = Settings.from_env(
        {"MAX_BODY_BYTES": "1024", "MAX_WORK_ELEMENTS": "1_000", "MAX_OUTPUT_ONLY_WORK_ELEMENTS": "2000"}
    )
    assert settings.as_flask_config()["MAX_CONTENT_LENGTH"] == 1024
    assert settings.as_flask_config()["MAX_WORK_ELEMENTS"] == 1000
    assert settings.as_flask_config()["MAX_OUTPUT_ONLY_WORK_ELEMENTS"] == 2000


def test_cors_origins_are_a_comma_separated_list() -> None:
    assert Settings.from_env({}).cors_origins == ("*",)
    settings = Settings.from_env({"CORS_ORIGINS": "https://a.example, https://b.example"})
    assert settings.cors_origins == ("https://a.example", "https://b.example")
    with pytest.raises(ValueError, match="CORS_ORIGINS"):
        Settings.from_env({"CORS_ORIGINS": " , "})


@pytest.mark.parametrize("raw", ["", "  "])
def test_an_empty_size_limit_is_derived_from_the_budget(raw: str) -> None:
    # compose passes MAX_BODY_BYTES= and friends when the operator sets none: the budget must still decide
    limits = ("MAX_BODY_BYTES", "MAX_WORK_ELEMENTS", "MAX_OUTPUT_ONLY_WORK_ELEMENTS", "MAX_ANSWER_BYTES")
    budget = str(96 * 1024 * 1024)
    settings = Settings.from_env({"MEMORY_BUDGET_BYTES": budget, **dict.fromkeys(limits, raw)})
    assert settings == Settings.from_env({"MEMORY_BUDGET_BYTES": budget})
    assert settings.max_body_bytes == 4 * 1024 * 1024  # budget / 24
    assert settings.max_answer_bytes == 48 * 1024 * 1024  # budget / 2


@pytest.mark.parametrize("raw", ["lots", "0", "-5", "1.5"])
def test_malformed_values_fail_loudly(raw: str) -> None:
    with pytest.raises(ValueError, match="MAX_WORK_ELEMENTS"):
        Settings.from_env({"MAX_WORK_ELEMENTS": raw})


@pytest.mark.parametrize(
    ("raw", "value"), [("1", True), ("on", True), ("TRUE", True), ("0", False), ("no", False)]
)
def test_switches_read_common_spellings(raw: str, value: bool) -> None:
    assert Settings.from_env({"ACCESS_LOG": raw}).access_log is value


def test_a_malformed_switch_fails_loudly() -> None:
    with pytest.raises(ValueError, match="ACCESS_LOG"):
        Settings.from_env({"ACCESS_LOG": "maybe"})
    assert Settings.from_env({}).access_log is True
