"""One marshmallow field that turns nested JSON lists into a typed NumPy array in one call.

marshmallow's ``List(List(Float()))`` validates element by element in Python, about 30 times slower
than this for a 128×64 matrix. Here the element types are collected with C-level iteration
(``set(map(type, row))``), the conversion is ``np.asarray``, and every rule is checked: kind, rank, empty
dimensions, raggedness and finiteness.

The scan and the conversion take at most :data:`BLOCK_ELEMENTS` elements per C call (the conversion counting
the lists it walks too). A large body
is decoded on a thread beside the gevent worker's loop (service/web/admission.py), and one C call holds the
interpreter until it returns: ``np.asarray`` of a 16 MiB body's 4.2 million one-element rows took 0.5 s in
one call, and the loop (probes, other connections) waited for it. A block is a few milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import chain, islice
from typing import Any, TypeVar

import numpy as np
from marshmallow import ValidationError, fields

from service.kernels import all_finite
from service.protocols.declarations.fields import FLOAT_INTEGER_BOUND
from service.requests import MAX_RANK, ArrayKind, ArraySpec

T = TypeVar("T")

_DTYPES: dict[ArrayKind, type[np.generic]] = {"number": np.float64, "integer": np.int64, "boolean": np.bool_}
_ALLOWED_LEAF_TYPES: dict[ArrayKind, frozenset[type]] = {
    "number": frozenset({int, float}),
    "integer": frozenset({int, float}),  # 3.0 is an integer in JSON Schema; 3.5 is refused below
    "boolean": frozenset({bool}),
}
# Elements per C call of the type scan and the conversion (see the module's docstring).
BLOCK_ELEMENTS = 65_536
_TYPE_NAMES = {bool: "a boolean", str: "a string", type(None): "null", dict: "an object", list: "an array"}


class Array(fields.Field[np.ndarray]):
    """A rectangular array of numbers, integers or booleans, of rank ``min_rank`` to ``max_rank``.

    ``shape`` names the axes for messages and the contract, e.g. ``"[..., n, d_k]"``. When dumping,
    the value is passed through untouched so that the orjson provider writes the array directly;
    ``nullable`` documents that non-finite entries are written as ``null``.
    """

    def __init__(
        self,
        *,
        kind: ArrayKind = "number",
        min_rank: int = 1,
        max_rank: int = MAX_RANK,
        shape: str | None = None,
        nullable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.kind = kind
        self.min_rank = min_rank
        self.max_rank = max_rank
        self.shape = shape
        self.nullable = nullable

    @classmethod
    def of(cls, spec: ArraySpec, **kwargs: Any) -> Array:
        """The field for a typed request's array ``spec`` (kind, ranks and axes come from there)."""
        return cls(kind=spec.kind, min_rank=spec.min_rank, max_rank=spec.max_rank, shape=spec.axes, **kwargs)

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> Any:
        if isinstance(value, np.ndarray) and value.ndim == 0:
            # orjson cannot write a 0-d array; its NumPy scalar keeps the dtype, so a float32 total
            # is written with float32's shorter digits (``.item()`` would widen it to a float64)
            return value[()]
        return value

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> np.ndarray:
        if isinstance(value, np.ndarray):
            # A /v2 tensor: its codec made the array and checked its datatype (this field's kind), its
            # size and its finiteness; its rank is this field's rule.
            self._check_rank(value.ndim)
            if 0 in value.shape:
                raise ValidationError(f"must not have an empty dimension{self._shape_note()}.")
            return value
        rank = self._rank_of(value)
        leaf_types = _leaf_types(value, rank)
        if not leaf_types <= _ALLOWED_LEAF_TYPES[self.kind]:
            found = sorted(
                _TYPE_NAMES.get(t, t.__name__) for t in leaf_types - _ALLOWED_LEAF_TYPES[self.kind]
            )
            if list in leaf_types:
                raise self._ragged()
            raise ValidationError(f"must contain only {self._kind_plural()}, found {', '.join(found)}.")
        dtype = _DTYPES[self.kind]
        if self.kind == "integer" and float in leaf_types:
            dtype = np.float64  # checked for fractions and range in _to_integers
        try:
            array = _as_array(value, dtype)
        except ValueError:
            raise self._ragged() from None
        except OverflowError:
            # One np.asarray call reports a ragged array before a number out of range; a conversion in
            # blocks stops at the first block with such a number, so the later rows are checked here.
            if _rows_differ(value, rank):
                raise self._ragged() from None
            raise ValidationError(f"contains a number out of range for {self._kind_plural()}.") from None
        if array.ndim != rank:  # a ragged array whose rows nest to different depths
            raise self._ragged()
        if self.kind != "boolean" and not all_finite(array):
            raise ValidationError(
                "contains a non-finite number (NaN or Infinity); only finite numbers are allowed."
            )
        if self.kind == "integer" and array.dtype != np.int64:
            return _to_integers(array)
        return array

    def _rank_of(self, value: Any) -> int:
        rank, probe = 0, value
        while isinstance(probe, list):
            if not probe:
                raise ValidationError(f"must not have an empty dimension{self._shape_note()}.")
            rank += 1
            if rank > self.max_rank:
                break
            probe = probe[0]
        self._check_rank(rank)
        return rank

    def _check_rank(self, rank: int) -> None:
        if not self.min_rank <= rank <= self.max_rank:
            expected = (
                f"rank {self.min_rank}"
                if self.min_rank == self.max_rank
                else f"rank {self.min_rank} to {self.max_rank}"
            )
            got = "a scalar" if rank == 0 else f"rank {rank}" + (" or more" if rank > self.max_rank else "")
            raise ValidationError(f"must be an array of {expected}{self._shape_note()}, got {got}.")

    def _ragged(self) -> ValidationError:
        return ValidationError(f"must be a rectangular array{self._shape_note()}: it is ragged.")

    def _kind_plural(self) -> str:
        return {"number": "numbers", "integer": "integers", "boolean": "booleans (true/false)"}[self.kind]

    def _shape_note(self) -> str:
        return f" with shape {self.shape}" if self.shape else ""


def _leaf_types(value: list[Any], rank: int) -> set[type]:
    """The Python types found at depth ``rank``; ``list`` among them marks a deeper, ragged branch."""
    if rank == 0:  # a scalar, where a field allows one (e.g. one ALiBi slope for every head)
        return {type(value)}
    entries: list[Any] = value
    for entries in _levels(value, rank):
        types = _distinct(type, entries)
        if types != {list}:
            return types | {list}  # a number or other value where a row was expected: ragged
    # the leaves are read once, so not copied into a list of their own
    return _distinct(type, value if rank == 1 else chain.from_iterable(entries))


def _rows_differ(value: list[Any], rank: int) -> bool:
    """Whether the rows of some level of ``value`` (whose entries down to depth ``rank`` :func:`_leaf_types`
    found to be lists) differ in length."""
    return any(len(_distinct(len, rows)) != 1 for rows in _levels(value, rank))


def _levels(value: list[Any], rank: int) -> Iterator[list[Any]]:
    """The levels above the leaves, outermost first, each as one list of its entries: ``value``, then its
    rows' entries, ... (``rank - 1`` levels). Lazy: a caller checks that a level's entries are lists before
    the next level is made from them."""
    entries = value
    for depth in range(1, rank):
        yield entries
        if depth < rank - 1:
            entries = list(chain.from_iterable(entries))


def _distinct(function: Callable[[Any], T], items: Iterable[Any]) -> set[T]:
    """``set(map(function, items))``, :data:`BLOCK_ELEMENTS` items per call."""
    if isinstance(items, list) and len(items) <= BLOCK_ELEMENTS:
        return set(map(function, items))
    found: set[T] = set()
    remaining = iter(items)
    while block := list(islice(remaining, BLOCK_ELEMENTS)):
        found.update(map(function, block))
    return found


def _as_array(value: Any, dtype: type[np.generic]) -> np.ndarray:
    """``np.asarray(value, dtype=dtype)`` of nested lists whose leaves are numbers or booleans, about
    :data:`BLOCK_ELEMENTS` elements per call: a block of leading entries at a time, or entry by entry
    (recursively) when one entry is larger. ValueError when ragged, as ``np.asarray``."""
    if not isinstance(value, list) or not value:  # a scalar, where a field allows one
        return np.asarray(value, dtype=dtype)
    # What NumPy walks per entry: its numbers, and its lists (a /v2 tensor of shape [n, 1, …, 1] nests each
    # number 31 lists deep, and 65,536 of them took one 0.6 s call where rank-4 rows take 0.06 s).
    entry_elements = entry_cost = 1
    probe = value[0]
    while isinstance(probe, list) and probe:
        entry_cost += entry_elements  # the lists at this depth
        entry_elements *= len(probe)
        probe = probe[0]
    entry_cost += entry_elements - 1
    if len(value) * entry_cost <= BLOCK_ELEMENTS:
        return np.asarray(value, dtype=dtype)
    step = BLOCK_ELEMENTS // entry_cost
    if step:
        parts = (np.asarray(value[start : start + step], dtype=dtype) for start in range(0, len(value), step))
    else:
        parts = (_as_array(entry, dtype)[np.newaxis] for entry in value)
    first = next(parts)
    array = np.empty((len(value), *first.shape[1:]), dtype=dtype)
    array[: len(first)] = first
    start = len(first)
    for part in parts:
        if part.shape[1:] != first.shape[1:]:
            raise ValueError("the entries' shapes differ: a ragged array")
        array[start : start + len(part)] = part
        start += len(part)
    return array


def _to_integers(array: np.ndarray) -> np.ndarray:
    if not np.equal(np.floor(array), array).all():
        raise ValidationError("must contain only integers, found a number with a fractional part.")
    if np.abs(array).max() >= FLOAT_INTEGER_BOUND:
        raise ValidationError("contains a number out of range for integers.")
    return array.astype(np.int64)


def array_json_schema(field: Array) -> dict[str, Any]:
    """The JSON Schema of ``field``: nested arrays of exactly the allowed ranks (for apispec)."""
    item_type: Any = "number" if field.kind == "number" else field.kind
    if field.nullable:
        item_type = [item_type, "null"]
    variants = []
    for rank in range(field.min_rank, field.max_rank + 1):
        schema: dict[str, Any] = {"type": item_type}
        for _ in range(rank):
            schema = {"type": "array", "items": schema, "minItems": 1}
        variants.append(schema)
    return variants[0] if len(variants) == 1 else {"anyOf": variants}
