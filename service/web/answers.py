"""Large answers written in pieces: JSON bytes of a block of rows at a time, never the whole answer at once.

``orjson.dumps`` of a 16-million-element array builds a 300 MB ``bytes`` object next to the array it came
from; Flask would then hold it until the last byte is sent. Here an answer with large arrays is an iterator
of pieces, each the orjson encoding of a block of about :data:`BLOCK_ELEMENTS` elements, joined with the
commas and brackets between them, so the bytes are exactly those of ``dumps_bytes(body)`` (a test checks it)
and the memory held for writing is one block.

:func:`dumps_bytes`, the one JSON encoding of answers, lives here too (the Flask JSON provider plugs it in),
so that the provider imports this module and not the other way round.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import orjson

from service.web.connection import POLL_SECONDS, let_other_connections_run

DUMP_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS

# About 1.5 MB of JSON per piece for float64: large enough that the per-piece cost is noise, small enough
# that a piece is nothing next to the arrays.
BLOCK_ELEMENTS = 65_536
# Answers with fewer array elements than this are written whole: one piece is cheapest for small answers.
STREAM_ABOVE_ELEMENTS = 4 * BLOCK_ELEMENTS


def _default(value: Any) -> Any:
    # orjson only takes C-contiguous arrays of at least one dimension natively; views and transposes come
    # here, and 0-d arrays (a per-row figure of a single row), written as their NumPy scalar, which keeps
    # the dtype (a float32 total is written with float32's shorter digits; ``.item()`` would widen it).
    if isinstance(value, np.ndarray):
        return value[()] if value.ndim == 0 else np.ascontiguousarray(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps_bytes(value: Any) -> bytes:
    """Serialize to JSON bytes; non-finite floats become ``null`` (callers decide when that is allowed)."""
    return orjson.dumps(value, default=_default, option=DUMP_OPTIONS)


def array_elements(body: Mapping[str, Any]) -> int:
    """How many array elements the answer ``body`` holds at its top level."""
    return sum(value.size for value in body.values() if isinstance(value, np.ndarray))


def should_stream(body: Any) -> bool:
    """Whether ``body`` is a JSON object large enough to be written in pieces."""
    return isinstance(body, Mapping) and array_elements(body) > STREAM_ABOVE_ELEMENTS


def encode_in_pieces(body: Mapping[str, Any], *, block_elements: int = BLOCK_ELEMENTS) -> Iterator[bytes]:
    """The bytes of ``dumps_bytes(body)``, as pieces of about ``block_elements`` array elements each.

    The pieces are made as the server sends them, on the worker's loop, which looks for and serves its other
    connections between two pieces: a send to a fast reader never waits, so nothing else let it run, and 8
    million values shaped [2837, 2837, 1, 1] took 2.2 s to write, ``/livez`` waiting up to 1.8 s.
    """
    for piece in _pieces(body, block_elements):
        yield piece
        let_other_connections_run(poll_seconds=POLL_SECONDS)


def _pieces(body: Mapping[str, Any], block_elements: int) -> Iterator[bytes]:
    yield b"{"
    for position, (name, value) in enumerate(body.items()):
        yield (b"," if position else b"") + orjson.dumps(name) + b":"
        if isinstance(value, np.ndarray) and value.ndim >= 1 and value.size > block_elements:
            yield from _array_pieces(value, block_elements)
        else:
            yield dumps_bytes(value)
    yield b"}"


def _array_pieces(array: np.ndarray, block_elements: int) -> Iterator[bytes]:
    """``[…]`` of ``array``, a block of leading-axis entries at a time (recursing into entries too large)."""
    entry_elements = math.prod(array.shape[1:])
    if entry_elements > block_elements:
        yield b"["
        for index in range(array.shape[0]):
            if index:
                yield b","
            yield from _array_pieces(array[index], block_elements)
        yield b"]"
        return
    step = max(1, block_elements // max(1, entry_elements))
    yield b"["
    for start in range(0, array.shape[0], step):
        piece = dumps_bytes(array[start : start + step])  # "[a,b,…]": the brackets are written once, here
        yield (b"," if start else b"") + piece[1:-1]
    yield b"]"
