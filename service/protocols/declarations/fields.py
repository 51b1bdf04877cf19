"""Scalar fields that refuse JSON's look-alikes: ``"1.5"`` is not a number and ``1`` is not ``true``."""

from __future__ import annotations

import math
from typing import Any

from marshmallow import ValidationError, fields

# An integer written as a JSON number with a fraction or an exponent, or beyond int64 (orjson reads such a
# literal as a float: -9223372036854775809 as -2.0**63), is a float whose magnitude at 2**63 no longer tells
# which integer was sent, so a float is in range only below it, in a scalar field and in an Array alike.
FLOAT_INTEGER_BOUND = 2.0**63


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
            if abs(value) >= FLOAT_INTEGER_BOUND:
                raise ValidationError("Integer out of range.")
            value = int(value)
        if not -(2**63) <= value < 2**63:
            raise ValidationError("Integer out of range.")
        return int(value)
