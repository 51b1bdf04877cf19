"""Errors raised by the kernels: the inputs are well-formed but the computation can't proceed."""

from __future__ import annotations

from collections.abc import Sequence


class KernelError(ValueError):
    """Base: the inputs are well-formed but the computation can't proceed."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class ShapeError(KernelError):
    """Shapes don't match or broadcast; ``field`` names the request field to blame."""


class EmptyRowError(KernelError):
    """A row has nothing visible; ``rows`` holds the index list of every such row."""

    def __init__(self, message: str, *, rows: list[list[int]], field: str | None = "mask") -> None:
        super().__init__(message, field=field)
        self.rows = rows


class NumericalOverflowError(KernelError):
    """A result overflowed (inf or NaN where a finite value is required)."""


def format_shape(shape: Sequence[int]) -> str:
    """A shape written as a JSON-style list, e.g. ``[2, 3]``."""
    return "[" + ", ".join(str(int(size)) for size in shape) + "]"


def describe_rows(rows: list[list[int]], *, limit: int = 3) -> str:
    """The first ``limit`` row indices, e.g. ``[0, 1], [0, 2] and 5 more``."""
    shown = ", ".join(format_shape(row) for row in rows[:limit])
    hidden = len(rows) - limit
    return f"{shown} and {hidden} more" if hidden > 0 else shown
