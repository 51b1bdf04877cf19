"""Layer normalization and RMSNorm against the loop reference, and their edge cases."""

from __future__ import annotations

import decimal
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.kernels import KernelError, NormOptions, NumericalOverflowError, ShapeError, layer_norm
from tests.layer_references import reference_norm


@settings(max_examples=80, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    kind=st.sampled_from(["layer", "rms"]),
    affine=st.booleans(),
    eps=st.sampled_from([1e-5, 1e-6, 0.5]),
    magnitude=st.sampled_from([1e-3, 1.0, 1e3]),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_norm_matches_the_loop_reference(
    shape: list[int], kind: str, affine: bool, eps: float, magnitude: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape) * magnitude + rng.normal()
    d = shape[-1]
    weight = rng.normal(size=d) if affine else None
    bias = rng.normal(size=d) if affine and kind == "layer" else None
    result = layer_norm(x, NormOptions(kind=kind, weight=weight, bias=bias, eps=eps))  # type: ignore[arg-type]
    expected = reference_norm(x, kind=kind, weight=weight, bias=bias, eps=eps)
    np.testing.assert_allclose(result, expected, rtol=1e-12, atol=1e-12)


def test_a_layer_norm_row_has_mean_zero_and_unit_variance_before_the_affine_map() -> None:
    x = np.array([[1.0, 2.0, 3.0, 4.0], [10.0, -10.0, 0.0, 5.0]])
    out = layer_norm(x, NormOptions(eps=0.0 + 1e-300))
    np.testing.assert_allclose(out.mean(axis=-1), 0.0, atol=1e-15)
    np.testing.assert_allclose((out**2).mean(axis=-1), 1.0, rtol=1e-14)
    # [1, 2, 3, 4]: mean 2.5, population variance 1.25, so the first entry is −1.5 / √1.25.
    assert out[0, 0] == pytest.approx(-1.5 / np.sqrt(1.25), rel=1e-14)


@pytest.mark.parametrize("value", [0.1, 1e300, -7.0, 3.0e-300])
def test_a_constant_row_gives_exactly_the_bias(value: float) -> None:
    # 0.1 · 3 / 3 is not 0.1 in floating point: centring by the mean alone would leave ±1.4e-17 · 316.
    bias = np.array([0.5, -2.0, 3.0])
    out = layer_norm(np.full((2, 3), value), NormOptions(weight=[2.0, 3.0, 4.0], bias=bias))
    assert out.tolist() == [bias.tolist()] * 2


def test_rms_norm_of_a_constant_row_is_its_sign_times_the_weight_almost() -> None:
    out = layer_norm([[-2.0, -2.0]], NormOptions(kind="rms", weight=[1.0, 3.0], eps=1e-5))
    np.testing.assert_allclose(out, [[-2.0 / np.sqrt(4 + 1e-5), -6.0 / np.sqrt(4 + 1e-5)]], rtol=1e-15)


def exact_norm(row: list[float], *, kind: str, eps: float) -> list[float]:
    """One row normalized in decimal arithmetic precise enough to hold any double exactly (up to 767
    significant digits), and whose exponent range holds every square."""
    with decimal.localcontext(decimal.Context(prec=1100, Emax=10**6, Emin=-(10**6))):
        values = [decimal.Decimal(v) for v in row]
        centre = sum(values) / len(values) if kind == "layer" else decimal.Decimal(0)
        spread = sum((v - centre) ** 2 for v in values) / len(values)
        root = (spread + decimal.Decimal(eps)).sqrt()
        return [float((v - centre) / root) for v in values]


@pytest.mark.parametrize(
    ("row", "kind", "eps"),
    [
        # Squares below the normal range were flushed to 0, leaving eps alone under the root: 10⁵× too large.
        ([1e-155, -1e-155], "layer", 1e-320),
        ([1.414e-154, -1.414e-154], "layer", 2.3e-308),  # a normal eps: ±0.932 where ±0.682 is right
        ([1e-155], "rms", 1e-320),
        ([3e-160, 1e-160, -2e-161], "layer", 1e-5),
        # Variance + eps past the range gave 1 / sqrt(inf) = 0: the rows came back as zeros.
        ([9e153, -9e153], "layer", 1.7e308),
        ([1.3e154], "rms", 1.7e308),
        # Squares past the range were a 422 for x.
        ([1e200, -1e200, 0.0], "layer", 1e-5),
        ([1e200, 1.0], "rms", 1e-5),
        ([1e-200, -1e-200], "layer", 1e-5),  # eps dominates: the output is tiny, not 0
        # A row of zeros beside a subnormal eps: 0 / sqrt(0) once the flush read eps as 0 (schemathesis)
        ([0.0, 0.0], "rms", 5e-324),
        ([2.0, 2.0], "layer", 5e-324),
    ],
)
def test_rows_far_from_1_are_normalized_as_exactly_as_others(row: list[float], kind: str, eps: float) -> None:
    result = layer_norm([row], NormOptions(kind=kind, eps=eps))  # type: ignore[arg-type]
    np.testing.assert_allclose(result[0], exact_norm(row, kind=kind, eps=eps), rtol=1e-14, atol=0)


@pytest.mark.parametrize(
    ("x", "kind", "dtype"),
    [
        ([[1.7e308, -1.7e308]], "layer", np.float64),  # the shift by the first entry already overflows
        ([[1e308, 1e308, -1e308]], "layer", np.float64),  # so does the mean of the shifted row
        ([[1e39, 1.0]], "rms", np.float32),  # beyond float32 when cast
    ],
)
def test_rows_whose_statistics_overflow_name_x(x: Any, kind: str, dtype: Any) -> None:
    with pytest.raises(NumericalOverflowError) as error:
        layer_norm(x, NormOptions(kind=kind), dtype=dtype)  # type: ignore[arg-type]
    assert error.value.field == "x"


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_float32_statistics_are_computed_in_float64(kind: str) -> None:
    # Squares of 1e20 are beyond float32, and an eps of 1e-300 is 0 there: a constant row would be 0 · inf.
    # The statistics are float64 whatever the precision, so both are answered (and cast to float32).
    large = layer_norm([[1e20, -1e20]], NormOptions(kind=kind), dtype=np.float32)  # type: ignore[arg-type]
    np.testing.assert_allclose(large, [[1.0, -1.0]], rtol=1e-6)
    constant = layer_norm([[3.0, 3.0]], NormOptions(kind=kind, eps=1e-300), dtype=np.float32)  # type: ignore[arg-type]
    assert constant.dtype == np.float32
    assert constant.tolist() == ([[0.0, 0.0]] if kind == "layer" else [[1.0, 1.0]])
    tiny = layer_norm([[1e-30, -1e-30]], NormOptions(kind=kind, eps=1e-300), dtype=np.float32)  # type: ignore[arg-type]
    np.testing.assert_allclose(tiny, [[1.0, -1.0]], rtol=1e-6)


def test_large_rows_within_range_are_normalized() -> None:
    out = layer_norm([[1e150, -1e150]], NormOptions())
    np.testing.assert_allclose(out, [[1.0, -1.0]], rtol=1e-14)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        # [1, 0, 0, 0] normalizes to [√3, −1/√3, −1/√3, −1/√3]: √3 · 1.7e308 is beyond the range.
        ({"weight": [1.7e308, 1.0, 1.0, 1.0]}, "weight"),
        # √3 · 1e308 is finite; adding 1.7e308 is not.
        ({"weight": [1e308, 1.0, 1.0, 1.0], "bias": [1.7e308, 0.0, 0.0, 0.0]}, "bias"),
    ],
)
def test_an_overflow_through_weight_or_bias_names_it(options: dict[str, Any], field: str) -> None:
    with pytest.raises(NumericalOverflowError) as error:
        layer_norm([[1.0, 0.0, 0.0, 0.0]], NormOptions(**options))
    assert error.value.field == field


@pytest.mark.parametrize(
    ("options", "x", "field"),
    [
        ({"kind": "rms", "bias": [0.0, 0.0]}, [[1.0, 2.0]], "bias"),
        ({"kind": "batch"}, [[1.0, 2.0]], "kind"),
        ({"eps": 0.0}, [[1.0, 2.0]], "eps"),
        ({"eps": -1e-5}, [[1.0, 2.0]], "eps"),
        ({"eps": float("nan")}, [[1.0, 2.0]], "eps"),
        ({"weight": [1.0, 2.0, 3.0]}, [[1.0, 2.0]], "weight"),
        ({"bias": [[1.0, 2.0]]}, [[1.0, 2.0]], "bias"),
        ({}, 3.0, "x"),
    ],
)
def test_bad_options_and_shapes_name_the_field(options: dict[str, Any], x: Any, field: str) -> None:
    with pytest.raises((KernelError, ShapeError)) as error:
        layer_norm(x, NormOptions(**options))
    assert error.value.field == field


def test_float32_is_computed_in_float32() -> None:
    x = np.random.default_rng(3).normal(size=(3, 5))
    out = layer_norm(x, NormOptions(), dtype=np.float32)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, reference_norm(x), rtol=1e-5, atol=1e-6)
