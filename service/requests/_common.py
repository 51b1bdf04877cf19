"""The rules every typed request shares: array specs, option checks, precisions and the work it asks for.

Both protocols build the same typed requests (``/v1`` from JSON lists, ``/v2`` from tensors), so each rule
is written here once and enforced when a request object is made, whichever codec made it. A broken rule
raises :class:`RequestError` naming the field; each protocol renders it in its one error handler.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, get_args

import numpy as np
from numpy.typing import NDArray

from service.kernels import KernelError, Range, all_finite

Precision = Literal["float64", "float32"]
PRECISIONS: dict[Precision, type[np.floating[Any]]] = {"float64": np.float64, "float32": np.float32}

ArrayKind = Literal["number", "integer", "boolean"]
AnyArray: TypeAlias = NDArray[Any]

# Arrays have at most four dimensions ([batch, head, rows, columns]); a fifth is a mistake, not a model.
MAX_RANK = 4
INT64_RANGE = (-(2**63), 2**63 - 1)


class RequestError(KernelError):
    """A request breaks one of its rules (a range, an allowed value, a rank); ``field`` names the culprit.

    A :class:`KernelError`, so the kernels' complaints and these are rendered by the same handler.
    """

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message, field=field)


@dataclass(frozen=True)
class ArraySpec:
    """What one array field may hold: its kind, its rank range and the names of its axes."""

    kind: ArrayKind = "number"
    min_rank: int = 1
    max_rank: int = MAX_RANK
    axes: str | None = None  # e.g. "[..., n, d_k]", for messages and the contract

    def check(self, array: AnyArray, *, field: str) -> AnyArray:
        """``array`` if it is of this kind and rank, with no empty dimension and only finite numbers."""
        if array.dtype.kind not in _DTYPE_KINDS[self.kind]:
            raise RequestError(
                f"{field} must contain only {_PLURALS[self.kind]}, got {array.dtype}", field=field
            )
        if not self.min_rank <= array.ndim <= self.max_rank:
            expected = (
                f"rank {self.min_rank}"
                if self.min_rank == self.max_rank
                else f"rank {self.min_rank} to {self.max_rank}"
            )
            got = "a scalar" if array.ndim == 0 else f"rank {array.ndim}"
            raise RequestError(
                f"{field} must be an array of {expected}{self._note()}, got {got}", field=field
            )
        if 0 in array.shape:
            raise RequestError(f"{field} must not have an empty dimension{self._note()}", field=field)
        # Integers are finite whatever their values: only a float array is scanned.
        if array.dtype.kind == "f" and not all_finite(array):
            raise RequestError(
                f"{field} contains a non-finite number (NaN or Infinity); only finite numbers are allowed",
                field=field,
            )
        return array

    def _note(self) -> str:
        return f" with shape {self.axes}" if self.axes else ""


_DTYPE_KINDS: dict[ArrayKind, str] = {"number": "fiu", "integer": "iu", "boolean": "b"}
_PLURALS: dict[ArrayKind, str] = {"number": "numbers", "integer": "integers", "boolean": "booleans"}


def check_arrays(request: object, specs: Mapping[str, ArraySpec]) -> None:
    """Check each array of ``request`` that is given against its spec (kind, rank, sizes), naming it."""
    for name, spec in specs.items():
        array = getattr(request, name)
        if array is not None:
            spec.check(array, field=name)


def number(value: object, *, field: str, allowed: Range | None = None) -> float:
    """``value`` as a finite float within ``allowed``; booleans and strings are refused."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise RequestError(f"{field} must be a number, got {_describe(value)}", field=field)
    try:
        result = float(value)
    except OverflowError:
        raise RequestError(f"{field} is out of range for a number", field=field) from None
    if not math.isfinite(result):
        raise RequestError(f"{field} must be a finite number, got {result}", field=field)
    if allowed is not None and not allowed.contains(result):
        raise RequestError(f"{field} must be {allowed}, got {result:g}", field=field)
    return result


def integer(value: object, *, field: str, allowed: Range | None = None) -> int:
    """``value`` as a 64-bit integer within ``allowed`` (``3.0`` is one; ``3.5`` and ``true`` are not)."""
    if isinstance(value, float | np.floating) and float(value).is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise RequestError(f"{field} must be an integer, got {_describe(value)}", field=field)
    result = int(value)
    if not INT64_RANGE[0] <= result <= INT64_RANGE[1]:
        raise RequestError(f"{field} is out of range for a 64-bit integer", field=field)
    if allowed is not None and not allowed.contains(result):
        raise RequestError(f"{field} must be {allowed}, got {result}", field=field)
    return result


def boolean(value: object, *, field: str) -> bool:
    """``value`` if it is ``True`` or ``False`` (``1`` and ``"true"`` are not booleans)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise RequestError(f"{field} must be true or false, got {_describe(value)}", field=field)


def literal_values(allowed: Any) -> tuple[str, ...]:
    """The values of the ``Literal`` type ``allowed``, in order."""
    # Looked up by identity: the requests' few Literal types are asked about on every request, and both
    # typing.get_args and a Literal's own hash cost microseconds. Holding ``allowed`` keeps its id unique.
    known = _LITERAL_VALUES.get(id(allowed))
    if known is None:
        known = _LITERAL_VALUES[id(allowed)] = (allowed, get_args(allowed))
    return known[1]


_LITERAL_VALUES: dict[int, tuple[Any, tuple[str, ...]]] = {}


def choice(value: object, allowed: Any, *, field: str) -> Any:
    """``value`` if it is one of the ``Literal`` type ``allowed``'s values."""
    options = literal_values(allowed)
    if isinstance(value, str) and value in options:
        return value
    raise RequestError(f"{field} must be one of {', '.join(options)}; got {_describe(value)}", field=field)


def names(value: object, allowed: Any, *, field: str) -> frozenset[str]:
    """A list of distinct names from the ``Literal`` type ``allowed``."""
    options = literal_values(allowed)
    if not isinstance(value, list | tuple | frozenset | set):
        raise RequestError(f"{field} must be a list of names from: {', '.join(options)}", field=field)
    if len(value) > len(options):  # before looking at each: a million names is refused at once
        raise RequestError(
            f"{field} lists at most {len(options)} names, from: {', '.join(options)}", field=field
        )
    chosen = [choice(name, allowed, field=field) for name in value]
    if len(set(chosen)) != len(chosen):
        raise RequestError(f"{field}: each name may appear only once", field=field)
    return frozenset(chosen)


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class Bound:
    """One limit a request must stay within: ``amount`` of something, measured against ``setting``."""

    amount: int
    what: str
    setting: str = "MAX_WORK_ELEMENTS"


# CPU seconds per reference score (one unit of ``Work.compute``) on the benchmark machine: the most any
# endpoint's most expensive accepted request took per unit (bench/worst_cases.py; docs/operations.md, "Worst
# case per endpoint"). An estimate that errs high for most requests, for admission to weigh requests by.
SECONDS_PER_COMPUTE_UNIT = 30e-9


@dataclass(frozen=True)
class Work:
    """How much a request asks for, known from its shapes and options before anything large is allocated.

    ``bounds`` are checked in order against their settings; ``elements`` is the size of the computation
    (the largest array it works through, held whole or a block of rows at a time) that the
    ``attention_work_elements`` histogram counts once it is accepted. ``answer_elements`` is how many
    values the answer holds, for a bound on the answer's size in the terms of each protocol. ``compute`` is
    its arithmetic in reference scores (one attention score with d_k + d_v = 128, the unit of
    ``MAX_OUTPUT_ONLY_WORK_ELEMENTS``), each endpoint's cost drivers counted in that unit.
    """

    elements: int
    bounds: tuple[Bound, ...]
    answer_elements: int
    compute: int

    @property
    def estimated_cpu_seconds(self) -> float:
        """Roughly how many CPU seconds the kernel will take (erring high), from ``compute``: seconds, on
        the benchmark machine (``SECONDS_PER_COMPUTE_UNIT``), not counting parsing and writing the JSON."""
        return self.compute * SECONDS_PER_COMPUTE_UNIT


def rows_of(batch: tuple[int, ...], n: int) -> int:
    """``prod(batch) * n``."""
    return math.prod(batch) * n
