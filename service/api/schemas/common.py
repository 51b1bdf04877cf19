"""Fields shared by the compute endpoints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from marshmallow import ValidationError, fields, validate

from service.kernels import ShapeError

T = TypeVar("T")

PRECISIONS = {"float64": np.float64, "float32": np.float32}


def precision_field() -> fields.String:
    return fields.String(
        load_default="float64",
        validate=validate.OneOf(list(PRECISIONS)),
        metadata={
            "description": "Floating-point type used for the arithmetic and the numbers in the response. "
            "float32 roughly halves the response size at about 1e-6 relative accuracy."
        },
    )


class IncludeList(fields.List[str]):
    """A list of names to include in the response: each allowed name at most once."""

    def __init__(self, choices: list[str], *, default: list[str], **kwargs: Any) -> None:
        super().__init__(
            fields.String(validate=validate.OneOf(choices)),
            load_default=default,
            metadata={"uniqueItems": True, "maxItems": len(choices), **kwargs.pop("metadata", {})},
            **kwargs,
        )
        self.choices = choices

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> list[str | None]:
        if isinstance(value, list) and len(value) > len(self.choices):  # before validating each entry
            count = len(self.choices)
            raise ValidationError(
                f"At most {count} {'name' if count == 1 else 'names'}, from: {', '.join(self.choices)}."
            )
        names = super()._deserialize(value, attr, data, **kwargs)
        if len(set(names)) != len(names):
            raise ValidationError("Each name may appear only once.")
        return names


def checked_shapes(check: Callable[[], T]) -> T:
    """Run a kernel's shape check; its ShapeError becomes a validation error naming the field to blame."""
    try:
        return check()
    except ShapeError as error:
        raise ValidationError({error.field or "body": [error.message]}) from None
