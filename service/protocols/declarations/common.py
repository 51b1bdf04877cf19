"""Fields shared by the compute endpoints, built from the typed requests' rules."""

from __future__ import annotations

from typing import Any, get_args

from marshmallow import ValidationError, fields, validate

from service.requests import Precision, Range


def precision_field() -> fields.String:
    return fields.String(
        load_default="float64",
        validate=validate.OneOf(get_args(Precision)),
        metadata={
            "description": "Floating-point type used for the arithmetic and the numbers in the response. "
            "float32 roughly halves the response size at about 1e-6 relative accuracy."
        },
    )


def one_of(allowed: Any) -> validate.OneOf:
    """A validator (and the contract's ``enum``) for the values of the ``Literal`` type ``allowed``."""
    return validate.OneOf(get_args(allowed))


def within(allowed: Range) -> validate.Range:
    """A validator (and the contract's bounds) for a typed request's :class:`Range`."""
    return validate.Range(
        min=allowed.minimum,
        max=allowed.maximum,
        min_inclusive=allowed.min_inclusive,
        max_inclusive=allowed.max_inclusive,
    )


class IncludeList(fields.List[str]):
    """A list of names to include in the response, from a ``Literal`` type: each name at most once."""

    def __init__(self, allowed: Any, *, default: list[str], **kwargs: Any) -> None:
        choices = list(get_args(allowed))
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


class FixedLengthList(fields.List[Any]):
    """A list of exactly ``length`` entries, its length checked before any entry: a list of a million is
    refused at once, not after a million entries' checks and messages."""

    def __init__(self, entry: fields.Field[Any], *, length: int, **kwargs: Any) -> None:
        metadata = {"minItems": length, "maxItems": length, **kwargs.pop("metadata", {})}
        super().__init__(entry, validate=validate.Length(equal=length), metadata=metadata, **kwargs)
        self.length = length

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> list[Any]:
        if isinstance(value, list) and len(value) != self.length:
            raise ValidationError(f"Length must be {self.length}.")
        return super()._deserialize(value, attr, data, **kwargs)
