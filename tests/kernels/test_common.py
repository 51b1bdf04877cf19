"""The kernels' shared helpers that have a small-input path of their own."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.kernels import all_finite
from service.kernels._common import SMALL_ARRAY_ENTRIES


@pytest.mark.parametrize("size", [1, 2, SMALL_ARRAY_ENTRIES, SMALL_ARRAY_ENTRIES + 1, 1000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bad", [None, math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("where", [0, -1])
def test_all_finite_agrees_with_a_plain_loop_on_both_sides_of_the_small_path(
    size: int, dtype: type[np.float32] | type[np.float64], bad: float | None, where: int
) -> None:
    # Shaped [.., 2] where possible: the small path reads a raveled copy, so a view's layout must not matter.
    values = np.linspace(-3e38, 3e38, size).astype(dtype)
    if bad is not None:
        values[where] = bad
    array = values.reshape(-1, 2)[:, ::-1] if size % 2 == 0 else values
    expected = all(math.isfinite(float(value)) for value in array.flat)
    assert all_finite(array) is expected
    assert expected is (bad is None)


def test_all_finite_takes_integers_and_zero_dimensional_arrays() -> None:
    assert all_finite(np.array([2**62, -(2**62)], dtype=np.int64)) is True
    assert all_finite(np.array(1.5)) is True
    assert all_finite(np.array(math.nan)) is False
    assert all_finite(np.empty((0, 3))) is True
