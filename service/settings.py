"""Settings read once from the environment; the defaults here are the ones docs/operations.md states."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


class SettingError(ValueError):
    """A setting the service cannot start with; its message is one line that names the variable.

    ``attention-service serve`` prints it as that one line and exits 2, in gunicorn's master, before the port
    is bound or a worker forked (service/server/cli.py).
    """


DERIVED = 0  # a limit not set in the environment: derived from MEMORY_BUDGET_BYTES

# The smallest budget a worker starts with: its derived limits (175 KB bodies, 174,762 elements) take the
# worked example and more; MEMORY_BUDGET_BYTES=1 had derived limits of 0: every body a 413, /readyz a 200.
MIN_MEMORY_BUDGET_BYTES = 4 * MIB
# Computations a worker may run at once: each is a thread (10**20 was an OverflowError, a 500, per request).
MAX_COMPUTE_SLOTS = 1024
# What admission (service/web/admission.py) counts, and the limits are checked against here:
# uploads over SMALL_BODY_BYTES may hold UPLOAD_SHARE of the budget between them; a computation holds
# HELD_PER_WORK_ELEMENT bytes for each element of the arrays it holds whole; a value of a JSON answer takes
# at most JSON_BYTES_PER_VALUE bytes (service/web/limits.py).
SMALL_BODY_BYTES = 64 * 1024
UPLOAD_SHARE = 0.75
HELD_PER_WORK_ELEMENT = 24
JSON_BYTES_PER_VALUE = 25


def check_body_limit(max_body_bytes: int, memory_budget_bytes: int) -> None:
    """Refuse a body limit over what uploads may hold of the budget: no body that large could ever be read (a
    503 "try again" for ever, and every chunked body, reserved at ``MAX_BODY_BYTES``, with it)."""
    uploads_may_hold = int(UPLOAD_SHARE * memory_budget_bytes)
    if max_body_bytes > max(uploads_may_hold, SMALL_BODY_BYTES):
        raise SettingError(
            f"MAX_BODY_BYTES ({max_body_bytes:,}) is more than uploads may hold of "
            f"MEMORY_BUDGET_BYTES ({UPLOAD_SHARE:g} × {memory_budget_bytes:,} = "
            f"{uploads_may_hold:,}): no body that large could ever be read. Lower MAX_BODY_BYTES (or "
            "leave it unset: it is then derived from the budget) or raise MEMORY_BUDGET_BYTES."
        )


def check_request_fits(max_work_elements: int, max_answer_bytes: int, memory_budget_bytes: int) -> None:
    """Refuse limits that let one request hold more than the budget: its arrays (``MAX_WORK_ELEMENTS``, 24
    bytes an element) or the values of its largest JSON answer (``MAX_ANSWER_BYTES`` / 25, as many arrays).

    Admission reserves at most the budget for a request, whatever its estimate: with
    ``MAX_WORK_ELEMENTS=1000000000`` one worker peaked at 608 MiB against a 384 MiB budget. The limits derived
    from the budget pass (budget / 24 elements, budget / 2 of answer).
    """
    for name, limit, held in (
        ("MAX_WORK_ELEMENTS", max_work_elements, HELD_PER_WORK_ELEMENT * max_work_elements),
        (
            "MAX_ANSWER_BYTES",
            max_answer_bytes,
            HELD_PER_WORK_ELEMENT * max_answer_bytes // JSON_BYTES_PER_VALUE,
        ),
    ):
        if held > memory_budget_bytes:
            raise SettingError(
                f"{name} ({limit:,}) lets one request hold {held:,} bytes, more than MEMORY_BUDGET_BYTES "
                f"({memory_budget_bytes:,}): lower {name} (or leave it unset: it is then derived from the "
                "budget) or raise MEMORY_BUDGET_BYTES."
            )


def derived_limits(budget: int) -> dict[str, int]:
    """Every size limit from the memory one request may use (384 MiB gives 16 MiB, 16 Mi elements, …).

    Thirds of the budget: parsing a JSON body holds up to 8 bytes of Python objects per body byte (a 16 MiB
    body of ``1.5,`` parses to 128 MiB of floats and list slots), so the body gets budget / 24; the arrays a
    request holds (weights, scores, outputs, 8 bytes an element) get a third, budget / 24 elements; the last
    third is for the parsed inputs, the kernels' temporaries and the answer's pieces. Output-only attention
    works in blocks and holds none of its scores, so its limit (4 × the work limit) bounds time, not memory.
    The answer is written in pieces and never held whole, so its bound (budget / 2 of JSON, estimated before
    computing) limits time and traffic: without it a 9 KB body could ask for a 300 MB answer.
    """
    work_elements = budget // 24
    return {
        "max_body_bytes": budget // 24,
        "max_work_elements": work_elements,
        "max_output_only_work_elements": 4 * work_elements,
        "max_answer_bytes": budget // 2,
    }


def _positive_int(name: str, raw: str) -> int:
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        raise SettingError(f"{name} must be a whole number, got {raw!r}") from None
    if value <= 0:
        raise SettingError(f"{name} must be positive, got {value}")
    return value


def _limit(name: str, raw: str) -> int:
    """A size limit: a positive whole number, or empty for the one derived from ``MEMORY_BUDGET_BYTES``
    (compose passes ``MAX_BODY_BYTES=`` when the operator sets none, so that the budget still decides)."""
    return DERIVED if not raw.strip() else _positive_int(name, raw)


def _positive_seconds(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise SettingError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise SettingError(f"{name} must be a positive number of seconds, got {raw!r}")
    return value


def _origins(name: str, raw: str) -> tuple[str, ...]:
    origins = tuple(origin.strip() for origin in raw.split(",") if origin.strip())
    if not origins:
        raise SettingError(f"{name} must list at least one origin (or *), got {raw!r}")
    return origins


def _keys(name: str, raw: str) -> tuple[str, ...]:
    return _bearer_tokens(name, (key.strip() for key in raw.split(",")))


# RFC 6750 section 2.1: a bearer token is b64token, ASCII letters, digits and -._~+/ then any "=". A client
# sends the header as such bytes; a key with other characters (clé) could never match what it sends.
_BEARER_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")


def _bearer_tokens(name: str, keys: Iterable[str]) -> tuple[str, ...]:
    """The non-empty ``keys``, each checked to be a token a client can send."""
    tokens = tuple(key for key in keys if key)
    for number, key in enumerate(tokens, start=1):
        if not _BEARER_TOKEN.fullmatch(key):
            raise SettingError(
                f"{name}: key {number} is not a bearer token (RFC 6750: ASCII letters, digits and -._~+/, "
                "then any '='), so no client could send it"
            )
    return tokens


def _keys_file(name: str, raw: str) -> tuple[str, ...]:
    """One key per line; blank lines and ``#`` comments are skipped (a mounted secret's shape).

    An empty value means no file, as compose passes ``API_KEYS_FILE=`` when it is not set.
    """
    if not raw.strip():
        return ()
    try:
        text = Path(raw).read_text(encoding="utf-8")
    except OSError as error:
        raise SettingError(f"{name} names a file that cannot be read: {error}") from None
    keys = _bearer_tokens(
        name, (line.strip() for line in text.splitlines() if not line.lstrip().startswith("#"))
    )
    if not keys:
        raise SettingError(f"{name} ({raw}) holds no key")
    return keys


def _flag(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise SettingError(f"{name} must be 1/0, true/false, yes/no or on/off, got {raw!r}")


def _setting(default: Any, parse: Callable[[str, str], Any], *, secret: bool = False) -> Any:
    return field(default=default, repr=not secret, metadata={"parse": parse})


@dataclass(frozen=True)
class Settings:
    """Limits and switches of one app instance; each field is read from its upper-cased name."""

    # What one worker may hold for one request; every limit below left unset is derived from it.
    memory_budget_bytes: int = _setting(384 * MIB, _positive_int)
    max_body_bytes: int = _setting(DERIVED, _limit)
    max_work_elements: int = _setting(DERIVED, _limit)
    # Output-only attention never holds the n×m scores (it works in blocks of rows), so its limit
    # bounds time rather than memory and can be higher.
    max_output_only_work_elements: int = _setting(DERIVED, _limit)
    max_answer_bytes: int = _setting(DERIVED, _limit)
    # Admission (service/web/admission.py): computations at once per worker, how many may wait for them and
    # how long, how long one may run before its answer is a 504, and the deadlines for heads, bodies and
    # answers.
    compute_slots: int = _setting(1, _positive_int)
    compute_queue_length: int = _setting(128, _positive_int)
    compute_queue_seconds: float = _setting(3.0, _positive_seconds)
    compute_deadline_seconds: float = _setting(20.0, _positive_seconds)
    header_timeout_seconds: float = _setting(10.0, _positive_seconds)
    body_timeout_seconds: float = _setting(10.0, _positive_seconds)
    body_min_bytes_per_second: int = _setting(256 * 1024, _positive_int)
    answer_timeout_seconds: float = _setting(10.0, _positive_seconds)
    answer_min_bytes_per_second: int = _setting(256 * 1024, _positive_int)
    cors_origins: tuple[str, ...] = _setting(("*",), _origins)
    cors_max_age: int = _setting(600, _positive_int)
    api_keys: tuple[str, ...] = _setting((), _keys, secret=True)
    api_keys_file: tuple[str, ...] = _setting((), _keys_file, secret=True)
    access_log: bool = _setting(True, _flag)

    def __post_init__(self) -> None:
        if self.memory_budget_bytes < MIN_MEMORY_BUDGET_BYTES:
            raise SettingError(
                f"MEMORY_BUDGET_BYTES must be at least {MIN_MEMORY_BUDGET_BYTES:,} (4 MiB), got "
                f"{self.memory_budget_bytes:,}: the limits derived from less would refuse every request."
            )
        for name, value in derived_limits(self.memory_budget_bytes).items():
            if getattr(self, name) == DERIVED:
                object.__setattr__(self, name, value)  # frozen: filled in once, here
        check_body_limit(self.max_body_bytes, self.memory_budget_bytes)
        check_request_fits(self.max_work_elements, self.max_answer_bytes, self.memory_budget_bytes)
        if self.compute_slots > MAX_COMPUTE_SLOTS:
            raise SettingError(
                f"COMPUTE_SLOTS must be at most {MAX_COMPUTE_SLOTS:,} (each is a thread), "
                f"got {self.compute_slots:,}"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read ``MAX_BODY_BYTES`` and friends, failing loudly on a malformed value."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for setting in fields(cls):
            name = setting.name.upper()
            if name in environ:
                values[setting.name] = setting.metadata["parse"](name, environ[name])
        return cls(**values)

    def as_flask_config(self) -> dict[str, Any]:
        """The Flask config keys these settings map to."""
        return {
            "MAX_CONTENT_LENGTH": self.max_body_bytes,
            "MAX_WORK_ELEMENTS": self.max_work_elements,
            "MAX_OUTPUT_ONLY_WORK_ELEMENTS": self.max_output_only_work_elements,
            "MAX_ANSWER_BYTES": self.max_answer_bytes,
            "MEMORY_BUDGET_BYTES": self.memory_budget_bytes,
            "COMPUTE_SLOTS": self.compute_slots,
            "COMPUTE_QUEUE_LENGTH": self.compute_queue_length,
            "COMPUTE_QUEUE_SECONDS": self.compute_queue_seconds,
            "COMPUTE_DEADLINE_SECONDS": self.compute_deadline_seconds,
            "HEADER_TIMEOUT_SECONDS": self.header_timeout_seconds,
            "BODY_TIMEOUT_SECONDS": self.body_timeout_seconds,
            "BODY_MIN_BYTES_PER_SECOND": self.body_min_bytes_per_second,
            "ANSWER_TIMEOUT_SECONDS": self.answer_timeout_seconds,
            "ANSWER_MIN_BYTES_PER_SECOND": self.answer_min_bytes_per_second,
            "CORS_ORIGINS": list(self.cors_origins),
            "CORS_MAX_AGE": self.cors_max_age,
            "API_KEYS": [*self.api_keys, *self.api_keys_file],
            "ACCESS_LOG": self.access_log,
        }
