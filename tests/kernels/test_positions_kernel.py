"""Sinusoidal and rotary positional encodings against the loop references and worked values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.kernels import (
    KernelError,
    NumericalOverflowError,
    ShapeError,
    apply_rotary,
    rotary_tables,
    sinusoidal_encoding,
)
from tests.layer_references import reference_rope, reference_sinusoidal


def test_sinusoidal_worked_values() -> None:
    # d_model = 4: frequencies 1 and 1/100. Position 1: [sin 1, cos 1, sin 0.01, cos 0.01].
    table = sinusoidal_encoding([0, 1], 4)
    np.testing.assert_array_equal(table[0], [0.0, 1.0, 0.0, 1.0])
    np.testing.assert_allclose(
        table[1], [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)], rtol=1e-15
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-50, 5000), min_size=0, max_size=8),
    st.integers(1, 12).map(lambda half: 2 * half),
    st.sampled_from([10000.0, 100.0, 2.0, 1e6]),
)
def test_sinusoidal_matches_the_loop_reference(positions: list[int], d_model: int, base: float) -> None:
    table = sinusoidal_encoding(positions, d_model, base=base)
    assert table.shape == (len(positions), d_model)
    if positions:
        np.testing.assert_allclose(
            table, reference_sinusoidal(positions, d_model, base), rtol=1e-12, atol=1e-12
        )


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 5),
    st.sampled_from([2, 4, 6, 8]),
    st.data(),
)
def test_rotary_matches_the_loop_reference(n: int, d: int, data: st.DataObject) -> None:
    dim = data.draw(st.sampled_from([k for k in range(2, d + 1, 2)]))
    style = data.draw(st.sampled_from(["half", "interleaved"]))
    base = data.draw(st.sampled_from([10000.0, 500.0, 10.0]))
    positions = data.draw(st.lists(st.integers(-10, 10000), min_size=n, max_size=n))
    x = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))).normal(size=(2, n, d))
    rotated = apply_rotary(x, positions, base=base, style=style, dim=dim)  # type: ignore[arg-type]
    for b in range(2):
        for i in range(n):
            expected = reference_rope(x[b, i].tolist(), positions[i], base=base, style=style, dim=dim)
            np.testing.assert_allclose(rotated[b, i], expected, rtol=1e-12, atol=1e-12)


def test_rotary_keeps_norms_and_the_unrotated_tail() -> None:
    x = np.random.default_rng(4).normal(size=(5, 10))
    rotated = apply_rotary(x, range(5), dim=6)
    np.testing.assert_array_equal(rotated[:, 6:], x[:, 6:])
    np.testing.assert_allclose(
        np.linalg.norm(rotated[:, :6], axis=-1), np.linalg.norm(x[:, :6], axis=-1), rtol=1e-13
    )
    np.testing.assert_array_equal(apply_rotary(x, [0] * 5), x)  # position 0 is the identity


def test_tables_are_cos_and_sin_of_the_angles() -> None:
    tables = rotary_tables([3], 4, base=100.0)
    np.testing.assert_allclose(tables.cos, [[math.cos(3), math.cos(0.3)]], rtol=1e-15)
    np.testing.assert_allclose(tables.sin, [[math.sin(3), math.sin(0.3)]], rtol=1e-15)
    assert rotary_tables([3], 4, dtype=np.float32).cos.dtype == np.float32


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: sinusoidal_encoding([0, 1], 5), "d_model"),
        (lambda: sinusoidal_encoding([0, 1], 0), "d_model"),
        (lambda: sinusoidal_encoding([0.5], 4), "positions"),
        (lambda: sinusoidal_encoding([[0, 1]], 4), "positions"),
        (lambda: sinusoidal_encoding([2**60], 4), "positions"),
        (lambda: sinusoidal_encoding([0], 4, base=0), "base"),
        (lambda: apply_rotary(np.ones((2, 4)), [0, 1], dim=3), "dim"),
        (lambda: apply_rotary(np.ones((2, 4)), [0, 1], dim=6), "dim"),
        (lambda: apply_rotary(np.ones((2, 5)), [0, 1]), "dim"),
        (lambda: apply_rotary(np.ones((2, 4)), [0, 1, 2]), "positions"),
        (lambda: apply_rotary(np.ones(4), [0]), "x"),
        (lambda: apply_rotary(np.ones((2, 4)), [0, 1], style="spiral"), "style"),  # type: ignore[arg-type]
    ],
)
def test_bad_arguments_name_the_field(call: object, field: str) -> None:
    with pytest.raises((KernelError, ShapeError)) as error:
        call()  # type: ignore[operator]
    assert error.value.field == field


# Rows near the float range: the loop reference (Python floats, float64) says which rotations leave it.
# [1.7e308, 1.7e308] at position 1 turns into [-5.1e307, 2.35e308]: the second feature is beyond float64.
HUGE = 1.7e308


def test_a_rotation_beyond_the_float_range_is_an_overflow_naming_x() -> None:
    assert math.isinf(reference_rope([HUGE, HUGE], 1, base=10000.0, style="half", dim=2)[1])
    with pytest.raises(NumericalOverflowError, match="overflowed") as error:
        apply_rotary([[HUGE, HUGE]], [1])
    assert error.value.field == "x"


def test_a_float32_rotation_beyond_its_range_is_an_overflow_naming_x() -> None:
    x = np.array([[3e38, 3e38]], dtype=np.float32)
    largest = float(np.finfo(np.float32).max)
    expected = reference_rope([float(v) for v in x[0]], 1, base=10000.0, style="interleaved", dim=2)
    assert abs(expected[1]) > largest  # the answer does not exist in float32
    with pytest.raises(NumericalOverflowError, match="float32") as error:
        apply_rotary(x, [1], style="interleaved", dtype=np.float32)
    assert error.value.field == "x"


def test_x_beyond_float32_before_any_rotation_is_an_overflow_naming_x() -> None:
    # 1e39 is inf in float32; a feature past dim passes through and would be answered as inf (null in JSON).
    with pytest.raises(NumericalOverflowError) as error:
        apply_rotary([[1.0, 0.0, 1e39]], [0], dim=2, dtype=np.float32)
    assert error.value.field == "x"


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_rows_near_the_float_range_that_stay_in_it_are_rotated(style: str) -> None:
    # |rotated| <= sqrt(2) * 1e308 < 1.798e308 at every angle: no false overflow near the edge.
    x = [[1e308, 1e308, -1e308, 1e308]]
    for position in (1, 2, 1000):
        rotated = apply_rotary(x, [position], style=style)  # type: ignore[arg-type]
        expected = reference_rope(x[0], position, base=10000.0, style=style, dim=4)
        np.testing.assert_allclose(rotated[0], expected, rtol=1e-12)
