from __future__ import annotations

import pytest

from service.settings import SettingError, Settings


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


MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        # limits of 0 derived from it: every body a 413 while /readyz said 200
        ({"MEMORY_BUDGET_BYTES": "1"}, "MEMORY_BUDGET_BYTES must be at least 4,194,304 (4 MiB), got 1"),
        ({"MEMORY_BUDGET_BYTES": str(4 * MIB - 1)}, "MEMORY_BUDGET_BYTES must be at least 4,194,304"),
        # a worker peaked at 608 MiB against its 384 MiB budget (admission reserves at most the budget)
        (
            {"MAX_WORK_ELEMENTS": "1000000000", "MAX_ANSWER_BYTES": "100000000000"},
            "MAX_WORK_ELEMENTS (1,000,000,000) lets one request hold 24,000,000,000 bytes, more than "
            "MEMORY_BUDGET_BYTES (402,653,184)",
        ),
        ({"MAX_WORK_ELEMENTS": str(16 * MIB + 1)}, "MAX_WORK_ELEMENTS (16,777,217) lets one request hold"),
        ({"MAX_ANSWER_BYTES": "100000000000"}, "MAX_ANSWER_BYTES (100,000,000,000) lets one request hold"),
        ({"MAX_ANSWER_BYTES": str(402_653_185 * 25 // 24 + 1)}, "MAX_ANSWER_BYTES"),
        # was only refused as each worker built its app (AdmissionLimits); now by the settings themselves
        (
            {"MEMORY_BUDGET_BYTES": str(32 * MIB), "MAX_BODY_BYTES": str(32 * MIB)},
            "MAX_BODY_BYTES (33,554,432)",
        ),
        # an OverflowError, a 500, in every request that needed a slot
        ({"COMPUTE_SLOTS": str(10**20)}, "COMPUTE_SLOTS must be at most 1,024 (each is a thread)"),
    ],
)
def test_limits_that_cannot_work_together_are_refused(environ: dict[str, str], says: str) -> None:
    with pytest.raises(SettingError) as refused:
        Settings.from_env(environ)
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_limits_at_the_edge_of_the_rules_are_taken() -> None:
    assert Settings.from_env({"MEMORY_BUDGET_BYTES": str(4 * MIB)}).max_work_elements == 4 * MIB // 24
    budget = 384 * MIB
    settings = Settings.from_env(
        {
            "MAX_WORK_ELEMENTS": str(budget // 24),
            "MAX_ANSWER_BYTES": str(budget * 25 // 24),
            "COMPUTE_SLOTS": "1024",
        }
    )
    assert settings.max_answer_bytes == budget * 25 // 24
    assert settings == Settings.from_env(
        {"MAX_ANSWER_BYTES": str(budget * 25 // 24), "COMPUTE_SLOTS": "1024"}
    )
