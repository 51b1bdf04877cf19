"""The contract's examples: each model's declared example request, with its response computed by the service.

Computing the responses (rather than typing them) keeps the documentation true; the tests check them
against the loop references and check that the live endpoints answer them, within the rounding below.

The last bits of a float64 result depend on the machine (which SIMD code NumPy and OpenBLAS pick for the
CPU), so the numbers are rounded to EXAMPLE_DIGITS significant digits: the committed contract is then the
same bytes wherever it is generated.
"""

from __future__ import annotations

import functools
from typing import Any

import orjson
from marshmallow import Schema

from service.protocols.declarations.model import ModelDeclaration
from service.web.json_provider import dumps_bytes

# float64 carries about 16 digits and different CPUs' paths agree to about 1e-15 relative; 12 digits leave a
# wide margin (a test checks that no example sits within that margin of a rounding boundary).
EXAMPLE_DIGITS = 12


def _as_written(schema: Schema, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as a client reads it: dumped by its response schema, written by the JSON provider."""
    written: dict[str, Any] = orjson.loads(dumps_bytes(schema.dump(body)))
    return written


def round_floats(value: Any, digits: int = EXAMPLE_DIGITS) -> Any:
    """``value`` (parsed JSON) with every float rounded to ``digits`` significant digits."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, list):
        return [round_floats(item, digits) for item in value]
    if isinstance(value, dict):
        return {key: round_floats(item, digits) for key, item in value.items()}
    return value


def computed_example_response(model: ModelDeclaration) -> dict[str, Any]:
    """The answer to ``model``'s example, as a client reads it: loaded, computed and answered as the
    route does (without the web around it), unrounded."""
    typed = model.request_schema.load(dict(model.example))
    return _as_written(model.response(), model.answer(typed.run(), typed))


@functools.cache
def example_response(model: ModelDeclaration) -> dict[str, Any]:
    """The contract's example answer for ``model``: :func:`computed_example_response`, rounded."""
    rounded: dict[str, Any] = round_floats(computed_example_response(model))
    return rounded
