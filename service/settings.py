"""Settings read once from the environment, with documented defaults."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

MIB = 1024 * 1024


@dataclass(frozen=True)
class Settings:
    """Limits and switches of one app instance (see the README's configuration table)."""

    max_body_bytes: int = 16 * MIB
    max_work_elements: int = 16_777_216

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read ``MAX_BODY_BYTES`` and friends, failing loudly on a malformed value."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field in fields(cls):
            name = field.name.upper()
            if name in environ:
                values[field.name] = _positive_int(name, environ[name])
        return cls(**values)

    def as_flask_config(self) -> dict[str, Any]:
        """The Flask config keys these settings map to."""
        return {
            "MAX_CONTENT_LENGTH": self.max_body_bytes,
            "MAX_WORK_ELEMENTS": self.max_work_elements,
        }


def _positive_int(name: str, raw: str) -> int:
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value
