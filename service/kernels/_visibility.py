"""Which keys each query row may see: the mask, and the band that causal masking and windows cut out.

Query row ``i`` of ``n`` sits at key position ``i' = i + offset``: ``offset = m − n`` when the query rows are
the last ``n`` of ``m`` positions (``lower_right`` alignment, as in decoding over a KV cache), ``0`` when
they are the first (``upper_left``). A band ``[left, right]`` lets row ``i`` see key ``j`` only when
``i' − left ≤ j ≤ i' + right``; causal masking is the band ``[∞, 0]``. The mask (True = visible) combines
with the band by AND.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np

from service.kernels._common import ArrayT, BoolArray, IntArray, rows_per_block

CausalAlignment = Literal["lower_right", "upper_left"]


def position_offset(n: int, m: int, alignment: CausalAlignment) -> int:
    """The key position of query row 0: ``m − n`` for ``lower_right``, ``0`` for ``upper_left``."""
    return m - n if alignment == "lower_right" else 0


@dataclass(frozen=True)
class Band:
    """Key ``j`` is visible from query row ``i`` iff ``i + offset − left ≤ j ≤ i + offset + right``.

    ``None`` leaves that side unbounded. Built by :meth:`build` from ``causal`` and a ``window``.
    """

    offset: int
    left: int | None
    right: int | None

    @classmethod
    def build(
        cls,
        *,
        n: int,
        m: int,
        causal: bool,
        alignment: CausalAlignment,
        window: tuple[int | None, int | None] | None = None,
    ) -> Band | None:
        """The band of ``causal`` AND ``window``, or None when neither limits anything."""
        left, right = window if window is not None else (None, None)
        if causal:
            right = 0 if right is None else min(right, 0)
        if left is None and right is None:
            return None
        return cls(offset=position_offset(n, m, alignment), left=left, right=right)

    def key_range(self, rows: IntArray, m: int) -> tuple[IntArray, IntArray]:
        """The first and last visible key of each of ``rows``, within ``[0, m − 1]`` (first > last: none)."""
        positions = rows + self.offset
        first = np.zeros_like(positions) if self.left is None else np.maximum(positions - self.left, 0)
        last = (
            np.full_like(positions, m - 1)
            if self.right is None
            else np.minimum(positions + self.right, m - 1)
        )
        return first, last

    def hidden(self, start: int, stop: int, m: int) -> BoolArray:
        """``[stop − start, m]``: True where the band hides key ``j`` from query row ``i``."""
        first, last = self.key_range(np.arange(start, stop), m)
        keys = np.arange(m)
        outside: BoolArray = (keys < first[:, np.newaxis]) | (keys > last[:, np.newaxis])
        return outside


def row_block(array: ArrayT, start: int, stop: int) -> ArrayT:
    """Rows ``start:stop`` of a mask or bias, unless every row shares it (a row axis of 1, or none)."""
    if array.ndim >= 2 and array.shape[-2] != 1:
        return cast("ArrayT", array[..., start:stop, :])  # a view: same dtype (the stubs lose it)
    return array


def hidden_keys(
    band: Band | None, visible: BoolArray | None, start: int, stop: int, m: int
) -> BoolArray | None:
    """True where query rows ``start:stop`` may not see a key (None: every key is visible).

    ``visible`` is the mask (True = visible), broadcastable to ``[..., n, m]``; the result broadcasts to
    ``[..., stop − start, m]``. The one place where the mask and the band combine.
    """
    hidden = None if visible is None else ~row_block(visible, start, stop)
    if band is not None:
        band_hidden = band.hidden(start, stop, m)
        hidden = band_hidden if hidden is None else hidden | band_hidden
    return hidden


def empty_row_flags(
    band: Band | None, visible: BoolArray | None, *, batch: tuple[int, ...], n: int, m: int
) -> BoolArray:
    """``batch + (n,)``: True for each query row that sees no key. Reads the mask only, never the data.

    Without a mask the answer follows from the band's key range; with one, rows are checked a block at a
    time, so the temporaries stay O(block × m) however large the band makes the mask.
    """
    rows_shape = (*batch, n)
    if m == 0:
        return np.ones(rows_shape, dtype=np.bool_)
    if visible is None:
        if band is None:
            return np.zeros(rows_shape, dtype=np.bool_)
        first, last = band.key_range(np.arange(n), m)
        return np.broadcast_to(first > last, rows_shape)
    mask = visible if visible.ndim >= 2 else visible.reshape(1, -1)
    if band is None:
        return np.broadcast_to(~mask.any(axis=-1), rows_shape)
    flags = np.empty((*mask.shape[:-2], n), dtype=np.bool_)
    block = rows_per_block(math.prod(mask.shape[:-2]) * m, n)
    for start in range(0, n, block):
        stop = min(start + block, n)
        hidden = hidden_keys(band, mask, start, stop, m)
        assert hidden is not None  # a band is given
        flags[..., start:stop] = hidden.all(axis=-1)
    return np.broadcast_to(flags, rows_shape)
