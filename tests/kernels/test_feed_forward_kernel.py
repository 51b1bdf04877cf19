"""The feed-forward layer against the loop reference for every activation, and its rules."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.kernels import (
    FeedForwardWeights,
    KernelError,
    NumericalOverflowError,
    ShapeError,
    feed_forward,
    feed_forward_shapes,
)
from tests.layer_references import reference_activation, reference_feed_forward

ACTIVATIONS = ["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu"]


@settings(max_examples=80, deadline=None)
@given(
    activation=st.sampled_from(ACTIVATIONS),
    lead=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    d_model=st.integers(1, 4),
    d_ff=st.integers(1, 6),
    d_out=st.integers(1, 4),
    biases=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_layer_matches_the_loop_reference(
    activation: str, lead: list[int], d_model: int, d_ff: int, d_out: int, biases: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    gated = activation in ("swiglu", "geglu")
    weights: dict[str, Any] = {
        "w_1": rng.normal(size=(d_model, d_ff)),
        "w_2": rng.normal(size=(d_ff, d_out)),
        "w_3": rng.normal(size=(d_model, d_ff)) if gated else None,
        "b_1": rng.normal(size=d_ff) if biases else None,
        "b_2": rng.normal(size=d_out) if biases else None,
        "b_3": rng.normal(size=d_ff) if biases and gated else None,
    }
    x = rng.normal(size=(*lead, d_model)) * 2
    result = feed_forward(x, FeedForwardWeights(**weights, activation=activation), include={"hidden"})
    output, hidden = reference_feed_forward(x, weights, activation)
    np.testing.assert_allclose(result.output, output, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(result.hidden, hidden, rtol=1e-12, atol=1e-12)
    assert result.output.shape == (*lead, d_out)


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh", "silu"])
def test_each_activation_keeps_its_relative_accuracy_far_into_the_tails(activation: str) -> None:
    # Identity weights show the activation itself; no absolute tolerance, so a tail value that kept only
    # its absolute accuracy (1 + erf(z/√2) for z = −30 is all rounding) would fail. erfc(t) amplifies the
    # rounding of its argument t = −z/√2 by 2t² (900 ulp at z = −30), hence the usual 1e-12, not less.
    z = np.array([-745.0, -40.0, -30.0, -8.0, -3.0, -1e-8, 0.0, 1e-300, 0.5, 3.0, 8.0, 1e10, 1e200])
    result = feed_forward(
        z[:, np.newaxis], FeedForwardWeights(w_1=[[1.0]], w_2=[[1.0]], activation=activation)
    )  # type: ignore[arg-type]
    expected = [reference_activation(activation, float(value)) for value in z]
    np.testing.assert_allclose(result.output[:, 0], expected, rtol=1e-12, atol=0)


def test_gelu_is_z_times_the_normal_cdf() -> None:
    out = feed_forward([[1.0], [-1.0]], FeedForwardWeights(w_1=[[1.0]], w_2=[[1.0]], activation="gelu"))
    phi = 0.8413447460685429  # Φ(1)
    np.testing.assert_allclose(out.output[:, 0], [phi, -(1 - phi)], rtol=1e-15)


def test_swiglu_multiplies_the_silu_of_the_first_projection_by_the_third() -> None:
    x = [[2.0, -1.0]]
    weights = FeedForwardWeights(w_1=[[1.0], [0.0]], w_3=[[0.0], [3.0]], w_2=[[1.0]], activation="swiglu")
    expected = 2.0 / (1.0 + math.exp(-2.0)) * -3.0
    assert feed_forward(x, weights).output[0, 0] == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    ("weights", "field"),
    [
        ({"activation": "swiglu"}, "w_3"),  # required for the gated ones
        ({"activation": "relu", "w_3": np.ones((2, 3))}, "w_3"),  # refused for the others
        ({"activation": "gelu", "b_3": np.ones(3)}, "b_3"),
        ({"activation": "tanh"}, "activation"),
        ({"w_1": np.ones((3, 3))}, "w_1"),
        ({"w_1": np.ones(2)}, "w_1"),
        ({"w_2": np.ones((2, 4))}, "w_2"),
        ({"activation": "geglu", "w_3": np.ones((2, 4))}, "w_3"),
        ({"b_1": np.ones(2)}, "b_1"),
        ({"b_2": np.ones(3)}, "b_2"),
        ({"activation": "swiglu", "w_3": np.ones((2, 3)), "b_3": np.ones(2)}, "b_3"),
    ],
)
def test_bad_weights_name_the_field(weights: dict[str, Any], field: str) -> None:
    layer: dict[str, Any] = {"w_1": np.ones((2, 3)), "w_2": np.ones((3, 4))}
    layer.update(weights)
    with pytest.raises((KernelError, ShapeError)) as error:
        feed_forward(np.ones((5, 2)), FeedForwardWeights(**layer))
    assert error.value.field == field


@pytest.mark.parametrize(("activation", "field"), [("relu", "w_1"), ("swiglu", "w_3"), ("gelu", "w_2")])
def test_an_overflowing_product_names_its_weight(activation: str, field: str) -> None:
    big = [[1e300]]
    weights: dict[str, Any] = {"w_1": [[1.0]], "w_2": [[1.0]], "activation": activation}
    if field == "w_1":
        weights["w_1"] = big
    elif field == "w_3":
        weights.update(w_1=[[1e200]], w_3=big)  # each product is finite; the gate's product is not
    else:
        weights["w_2"] = big
    with pytest.raises(NumericalOverflowError) as error:
        feed_forward([[1e10]], FeedForwardWeights(**weights))
    assert error.value.field == field


def test_shapes_are_read_without_copying() -> None:
    wide = np.broadcast_to(0.0, (512, 2048))
    shapes = feed_forward_shapes(
        (4, 16, 512),
        FeedForwardWeights(w_1=wide, w_3=wide, w_2=np.broadcast_to(0.0, (2048, 256)), activation="swiglu"),
    )
    assert (shapes.rows, shapes.d_model, shapes.d_ff, shapes.d_out) == (64, 512, 2048, 256)
    assert shapes.multiplies == 64 * 2048 * (2 * 512 + 256)


def test_float32_is_computed_in_float32() -> None:
    rng = np.random.default_rng(5)
    weights: dict[str, Any] = {"w_1": rng.normal(size=(3, 4)), "w_2": rng.normal(size=(4, 2))}
    x = rng.normal(size=(2, 3))
    result = feed_forward(x, FeedForwardWeights(**weights, activation="gelu"), dtype=np.float32)
    assert result.output.dtype == np.float32
    np.testing.assert_allclose(
        result.output, reference_feed_forward(x, weights, "gelu")[0], rtol=1e-5, atol=1e-5
    )
