"""Scalar fields that refuse JSON's look-alikes: ``"1.5"`` is not a number and ``1`` is not ``true``."""

from __future__ import annotations

import math
from typing import Any

from marshmallow import ValidationError, fields


class StrictBoolean(fields.Boolean):
    """Only the JSON literals ``true`` and ``false``."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> bool:
        if value is True or value is False:
            return value
        raise ValidationError("Not a boolean: use true or false.")


class StrictFloat(fields.Float):
    """A finite JSON number (integers allowed), never a string or a boolean."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValidationError("Not a number.")
        try:
            number = float(value)
        except OverflowError:
            raise ValidationError("Number out of range.") from None
        if not math.isfinite(number):
            raise ValidationError("Must be a finite number (NaN and Infinity are not allowed).")
        return number


class StrictInteger(fields.Integer):
    """A JSON integer (``3`` or ``3.0``), never ``3.5``, a string or a boolean."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(strict=True, **kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValidationError("Not an integer.")
        if isinstance(value, float):
            if not value.is_integer():
                raise ValidationError("Not an integer.")
            value = int(value)
        if not -(2**63) <= value < 2**63:
            raise ValidationError("Integer out of range.")
        return int(value)
