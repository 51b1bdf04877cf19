"""The typed positional-encoding request: the sinusoidal table, or rotary embedding applied to ``x``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np

from service.kernels import Range, RotaryStyle, apply_rotary, rotary_tables, sinusoidal_encoding
from service.kernels._positions import DEFAULT_BASE, MAX_POSITION, check_rotary_dim
from service.requests._common import (
    PRECISIONS,
    AnyArray,
    ArraySpec,
    Bound,
    Precision,
    RequestError,
    Work,
    check_arrays,
    choice,
    integer,
    names,
    number,
)

EncodingKind = Literal["sinusoidal", "rotary"]
PositionalOutput = Literal["tables"]
POSITIVE = Range(minimum=0, min_inclusive=False)
LENGTH = Range(minimum=1, maximum=MAX_POSITION)
D_MODEL = Range(minimum=2)
# Each table entry is a sine or cosine (rotary applies two per rotated pair): a reference score or two each.
TABLE_COST = 2
# NumPy's float64 sine and cosine reduce arguments past about 1e9 the slow way (70-77 ns a call here, against
# 20), so angles from this one on cost this many times more. Two positions near 2^53 and d_model 8,388,608
# took 1.3-2.2 s of CPU; so did a base of 1e-300, whose frequencies reach 1e300 from position 1.
SLOW_ANGLE = 2**29
SLOW_ANGLE_COST = 4


def table_entry_cost(largest_position: int, *, base: float, dim: int) -> int:
    """Reference scores per sine or cosine of the angles ``position · base^(−2i/dim)``, ``i < dim / 2``, at
    positions up to ``largest_position`` (absolute): more once an angle can reach :data:`SLOW_ANGLE`. The
    largest frequency is 1 (i = 0) for a base of 1 or more, else ``base^(−(dim − 2)/dim)``."""
    if base >= 1 or largest_position == 0:
        slow = largest_position >= SLOW_ANGLE  # exact for any position: no float rounding at the boundary
    else:  # in logarithms: the frequency alone may be beyond float64 (a base of 5e-324)
        largest_log = math.log(largest_position) - (dim - 2) / dim * math.log(base)
        slow = largest_log >= math.log(SLOW_ANGLE)
    return TABLE_COST * (SLOW_ANGLE_COST if slow else 1)


def rotary_work(*, rotated_values: int, positions: int, dim: int, base: float, largest_position: int) -> int:
    """Rotary embedding's arithmetic in reference scores: its cos and sin tables (``dim / 2`` of each per
    position, each counting :func:`table_entry_cost`) and the values it rotates (``TABLE_COST`` each: a
    rotation's products cost the same whatever the angle). Shared by the positional-encoding endpoint and
    attention's ``rotary`` option, which compute the same tables."""
    tables = 2 * positions * (dim // 2)
    return rotated_values * TABLE_COST + tables * table_entry_cost(largest_position, base=base, dim=dim)


@dataclass(frozen=True)
class PositionalEncodingResult:
    """``encoding [n, d_model]`` (sinusoidal), or ``output`` like ``x`` and the ``cos``/``sin`` tables."""

    encoding: AnyArray | None = None
    output: AnyArray | None = None
    cos: AnyArray | None = None
    sin: AnyArray | None = None


@dataclass(frozen=True)
class PositionalEncodingRequest:
    """``kind="sinusoidal"``: ``PE[n, d_model]`` for ``positions`` (or ``0 … length − 1``);
    ``kind="rotary"``: RoPE applied to ``x [..., n, d]`` at ``positions`` (default ``0 … n − 1``)."""

    ARRAYS: ClassVar[dict[str, ArraySpec]] = {
        "positions": ArraySpec(kind="integer", max_rank=1, axes="[n]"),
        "x": ArraySpec(min_rank=2, axes="[..., n, d]"),
    }
    BASE: ClassVar[Range] = POSITIVE

    kind: EncodingKind
    positions: AnyArray | None = None
    length: int | None = None
    d_model: int | None = None
    x: AnyArray | None = None
    base: float = DEFAULT_BASE
    style: RotaryStyle | None = None  # rotary only: "half" when not given
    dim: int | None = None
    include: frozenset[PositionalOutput] = frozenset()
    precision: Precision = "float64"
    rows: int = field(init=False, repr=False)  # n: how many positions
    largest_position: int = field(init=False, repr=False)  # the largest |position|

    def __post_init__(self) -> None:
        check_arrays(self, self.ARRAYS)
        set_ = object.__setattr__  # frozen: the checked, normalized values are set once, here
        set_(self, "kind", choice(self.kind, EncodingKind, field="kind"))
        set_(self, "base", number(self.base, field="base", allowed=self.BASE))
        set_(self, "include", names(self.include, PositionalOutput, field="include"))
        set_(self, "precision", choice(self.precision, Precision, field="precision"))
        largest = None if self.positions is None else int(np.abs(self.positions).max())
        if largest is not None and largest > MAX_POSITION:
            raise RequestError("positions must be within ±2^53", field="positions")
        if self.kind == "sinusoidal":
            self._check_sinusoidal()
        else:
            self._check_rotary()
        set_(self, "largest_position", self.rows - 1 if largest is None else largest)

    def _check_sinusoidal(self) -> None:
        for name in ("x", "dim", "style"):
            if getattr(self, name) is not None:
                raise RequestError(f"{name} is for kind rotary, not sinusoidal", field=name)
        if self.d_model is None:
            raise RequestError("d_model is required for kind sinusoidal", field="d_model")
        d_model = integer(self.d_model, field="d_model", allowed=D_MODEL)
        if d_model % 2:
            raise RequestError(f"d_model must be even (sin and cos pairs), got {d_model}", field="d_model")
        object.__setattr__(self, "d_model", d_model)
        if (self.positions is None) == (self.length is None):
            which = "not both" if self.length is not None else "one of them is required"
            raise RequestError(f"give either positions or length (0 … length − 1): {which}", field="length")
        if self.length is not None:
            object.__setattr__(self, "length", integer(self.length, field="length", allowed=LENGTH))
            object.__setattr__(self, "rows", self.length)
        else:
            assert self.positions is not None
            object.__setattr__(self, "rows", int(self.positions.shape[0]))
        if self.include:
            raise RequestError("tables are for kind rotary", field="include")

    def _check_rotary(self) -> None:
        for name in ("length", "d_model"):
            if getattr(self, name) is not None:
                raise RequestError(f"{name} is for kind sinusoidal, not rotary", field=name)
        if self.x is None:
            raise RequestError("x is required for kind rotary", field="x")
        style = "half" if self.style is None else self.style
        object.__setattr__(self, "style", choice(style, RotaryStyle, field="style"))
        n, d = self.x.shape[-2:]
        if self.positions is not None and self.positions.shape[0] != n:
            raise RequestError(
                f"positions has {self.positions.shape[0]} entries but x has n={n} rows", field="positions"
            )
        if self.dim is not None:
            object.__setattr__(self, "dim", integer(self.dim, field="dim"))
        check_rotary_dim(self.dim, d, width="d")
        object.__setattr__(self, "rows", int(n))

    def work(self) -> Work:
        """The answer's size: the table, or the rotated copy of ``x`` and (on request) the tables."""
        if self.kind == "sinusoidal":
            assert self.d_model is not None
            elements = self.rows * self.d_model
            computed = elements * table_entry_cost(self.largest_position, base=self.base, dim=self.d_model)
            return Work(
                elements=elements,
                bounds=(Bound(elements, "a sinusoidal table (n × d_model)"), self._compute_bound(computed)),
                answer_elements=elements,
                compute=computed,
            )
        assert self.x is not None
        dim = self.x.shape[-1] if self.dim is None else self.dim
        tables = 2 * self.rows * (dim // 2) if self.include else 0
        elements = int(self.x.size) + tables
        largest = self.largest_position
        computed = rotary_work(
            rotated_values=int(self.x.size),
            positions=self.rows,
            dim=dim,
            base=self.base,
            largest_position=largest,
        )
        return Work(
            elements=elements,
            bounds=(
                Bound(elements, "rotated rows (the size of x) and tables"),
                self._compute_bound(computed),
            ),
            answer_elements=elements,
            compute=computed,
        )

    @staticmethod
    def _compute_bound(computed: int) -> Bound:
        return Bound(
            computed,
            f"sines and cosines (× {TABLE_COST} each, × {SLOW_ANGLE_COST} more from position {SLOW_ANGLE:,})",
            setting="MAX_OUTPUT_ONLY_WORK_ELEMENTS",
        )

    def run(self) -> PositionalEncodingResult:
        dtype = PRECISIONS[self.precision]
        positions = np.arange(self.rows) if self.positions is None else self.positions
        if self.kind == "sinusoidal":
            assert self.d_model is not None
            return PositionalEncodingResult(
                encoding=sinusoidal_encoding(positions, self.d_model, base=self.base, dtype=dtype)
            )
        assert self.x is not None
        assert self.style is not None  # rotary: set in __post_init__
        dim = self.x.shape[-1] if self.dim is None else self.dim
        output = apply_rotary(self.x, positions, base=self.base, style=self.style, dim=dim, dtype=dtype)
        if not self.include:
            return PositionalEncodingResult(output=output)
        tables = rotary_tables(positions, dim, base=self.base, dtype=dtype)
        return PositionalEncodingResult(output=output, cos=tables.cos, sin=tables.sin)
