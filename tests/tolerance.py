"""How the tests compare floats: within a stated relative tolerance, not bit for bit.

Which SIMD code NumPy and OpenBLAS run depends on the CPU (AVX-512, AVX2, SSE), and the last bits of a
float64 result with it; a test that compares bit for bit passes on one machine only. Tests about one
machine's own bit-exactness (the same request answered twice) compare exactly, and say so.
"""

from __future__ import annotations

import math
from typing import Any

from service.protocols.v1.examples import EXAMPLE_DIGITS

# float64 results of the same formula on different arithmetic paths agree to a few units in the last place
# (~1e-16 relative); 1e-12 leaves room for the error a short computation accumulates, and no more.
FLOAT64_RTOL = 1e-12

# The contract's examples are rounded to EXAMPLE_DIGITS significant digits: half a unit in the last digit
# kept, plus the machine's own difference.
EXAMPLE_RTOL = 0.5 * 10.0 ** (1 - EXAMPLE_DIGITS) + FLOAT64_RTOL


def assert_json_close(actual: Any, expected: Any, *, rel: float = FLOAT64_RTOL, where: str = "$") -> None:
    """Parsed JSON ``actual`` equals ``expected``: the same structure, keys, strings, booleans, nulls and
    integers, and every float within ``rel`` of the expected one (relative: a zero must be zero)."""
    if isinstance(expected, float) and isinstance(actual, float):
        assert math.isclose(actual, expected, rel_tol=rel, abs_tol=0.0), (
            f"{where}: {actual!r} is not within {rel:g} (relative) of {expected!r}"
        )
    elif isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: {actual!r} is not an object"
        assert list(actual) == list(expected), f"{where}: keys {list(actual)} != {list(expected)}"
        for key, item in expected.items():
            assert_json_close(actual[key], item, rel=rel, where=f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{where}: {actual!r} is not an array"
        assert len(actual) == len(expected), f"{where}: length {len(actual)} != {len(expected)}"
        for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
            assert_json_close(got, want, rel=rel, where=f"{where}[{index}]")
    else:
        assert type(actual) is type(expected), f"{where}: {actual!r} is not a {type(expected).__name__}"
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"
