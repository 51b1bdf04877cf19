"""Errors raised by the kernels: the inputs are well-formed but the computation can't proceed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence


class KernelError(ValueError):
    """Base: the inputs are well-formed but the computation can't proceed."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@contextlib.contextmanager
def fields_under(
    part: str, *, renamed: dict[str, str] | None = None, input_of: str | None = None
) -> Iterator[None]:
    """Errors raised within name their field by its path in a larger request: ``w_3`` becomes
    ``feed_forward.w_3``, and a field the part has no name of its own for becomes ``part``.

    ``renamed`` maps a part's field to the whole request's name for it instead (a block's attention calls
    its input ``query``; the block calls it ``x``). ``input_of`` says the part's input ``x`` is no field of
    the request but this sum made from it (``h + feed_forward``): an error about ``x`` then names the part
    and says which sum (a post-norm ``norm_2`` whose rows overflowed, made so by a weight, had blamed the
    block's ``x``). The error is re-raised as it is, its type and details kept, so that each protocol
    renders it as it would the part's own.
    """
    try:
        yield
    except KernelError as error:
        if input_of is not None and error.field == "x":
            error.field = part
            error.message = f"{part}'s input ({input_of}): {error.message}"
            error.args = (error.message,)
        elif error.field is None:
            error.field = part
        elif renamed is not None and error.field in renamed:
            error.field = renamed[error.field]
        else:
            error.field = f"{part}.{error.field}"
        raise


class ShapeError(KernelError):
    """Shapes don't match or broadcast; ``field`` names the request field to blame."""


class EmptyRowError(KernelError):
    """Rows have nothing visible: ``count`` of them, the first few of which are indexed in ``rows``."""

    def __init__(
        self, message: str, *, rows: list[list[int]], count: int, field: str | None = "mask"
    ) -> None:
        super().__init__(message, field=field)
        self.rows = rows
        self.count = count


class NumericalOverflowError(KernelError):
    """A result overflowed (inf or NaN where a finite value is required)."""


def format_shape(shape: Sequence[int]) -> str:
    """A shape written as a JSON-style list, e.g. ``[2, 3]``."""
    return "[" + ", ".join(str(int(size)) for size in shape) + "]"


def describe_rows(noun: str, problem: str, rows: list[list[int]], count: int, *, limit: int = 3) -> str:
    """E.g. ``4,194,304 query rows have no visible key; the first: [0, 0], [0, 1], [0, 2]``."""
    shown = ", ".join(format_shape(row) for row in rows[:limit])
    if count == 1:
        return f"{noun} {shown} has {problem}"
    if count <= limit:
        return f"{count:,} {noun}s have {problem}: {shown}"
    return f"{count:,} {noun}s have {problem}; the first: {shown}"
