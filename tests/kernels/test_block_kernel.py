"""The Transformer block against the loop reference (GQA, rotary, ALiBi, RMSNorm, gated feed-forward layers,
pre- and post-norm), the KV-cache property, and errors named by their path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.kernels import (
    AttentionOptions,
    FeedForwardWeights,
    KernelError,
    MultiHeadWeights,
    NormOptions,
    NumericalOverflowError,
    Rotary,
    ShapeError,
    TransformerBlockLayers,
    transformer_block,
    transformer_block_shapes,
)
from tests.layer_references import RopeSpec, reference_block


@st.composite
def block_cases(draw: st.DrawFn) -> dict[str, Any]:
    """A small block with any of: grouped heads, rotary, ALiBi, causal, a window, RMSNorm or LayerNorm with or
    without their affine parameters, every activation, biases, pre or post norm."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    batch = tuple(draw(st.lists(st.integers(1, 2), max_size=1)))
    kv_heads = draw(st.integers(1, 2))
    heads = kv_heads * draw(st.integers(1, 2))
    use_rope = draw(st.booleans())
    d_k = draw(st.sampled_from([2, 4])) if use_rope else draw(st.integers(1, 3))
    d_v, d_model, d_ff, n = (
        draw(st.integers(1, 3)),
        draw(st.integers(1, 4)),
        draw(st.integers(1, 5)),
        draw(st.integers(1, 4)),
    )
    activation = draw(st.sampled_from(["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu"]))
    gated = activation in ("swiglu", "geglu")
    biased = draw(st.booleans())
    attention_weights = {
        "w_q": rng.normal(size=(d_model, heads * d_k)),
        "w_k": rng.normal(size=(d_model, kv_heads * d_k)),
        "w_v": rng.normal(size=(d_model, kv_heads * d_v)),
        "w_o": rng.normal(size=(heads * d_v, d_model)),
    }
    widths = {"b_q": heads * d_k, "b_k": kv_heads * d_k, "b_v": kv_heads * d_v, "b_o": d_model}
    attention_biases = {name: rng.normal(size=width) if biased else None for name, width in widths.items()}
    ff_weights: dict[str, Any] = {
        "w_1": rng.normal(size=(d_model, d_ff)),
        "w_2": rng.normal(size=(d_ff, d_model)),
        "w_3": rng.normal(size=(d_model, d_ff)) if gated else None,
        "b_1": rng.normal(size=d_ff) if biased else None,
        "b_2": rng.normal(size=d_model) if biased else None,
        "b_3": rng.normal(size=d_ff) if biased and gated else None,
    }
    norms = []
    for _ in range(2):
        kind = draw(st.sampled_from(["layer", "rms"]))
        affine = draw(st.booleans())
        norms.append(
            {
                "kind": kind,
                "weight": rng.normal(size=d_model) if affine else None,
                "bias": rng.normal(size=d_model) if affine and kind == "layer" else None,
                "eps": draw(st.sampled_from([1e-5, 0.1])),
            }
        )
    return {
        "x": rng.normal(size=(*batch, n, d_model)),
        "attention": {
            "weights": attention_weights,
            "biases": attention_biases,
            "num_heads": heads,
            "num_kv_heads": kv_heads,
        },
        "feed_forward": {"weights": ff_weights, "activation": activation},
        "norms": norms,
        "norm_position": draw(st.sampled_from(["pre", "post"])),
        "causal": draw(st.booleans()),
        "window": draw(st.none() | st.tuples(st.none() | st.integers(0, 2), st.none() | st.integers(0, 2))),
        "slopes": np.round(rng.uniform(0.1, 1.0, size=heads), 3) if draw(st.booleans()) else None,
        "rope": RopeSpec(style=draw(st.sampled_from(["half", "interleaved"]))) if use_rope else None,
    }


def layers_of(case: dict[str, Any]) -> TransformerBlockLayers:
    attention = case["attention"]
    return TransformerBlockLayers(
        attention=MultiHeadWeights(
            **attention["weights"],
            **{name: bias for name, bias in attention["biases"].items() if bias is not None},
            num_heads=attention["num_heads"],
            num_kv_heads=attention["num_kv_heads"],
        ),
        feed_forward=FeedForwardWeights(
            **case["feed_forward"]["weights"], activation=case["feed_forward"]["activation"]
        ),
        norm_1=NormOptions(**case["norms"][0]),
        norm_2=NormOptions(**case["norms"][1]),
        norm_position=case["norm_position"],
    )


def options_of(case: dict[str, Any]) -> AttentionOptions:
    rope = case["rope"]
    return AttentionOptions(
        causal=case["causal"],
        window=case["window"],
        alibi_slopes=case["slopes"],
        rotary=None if rope is None else Rotary(style=rope.style),
        empty_rows="zero",
    )


@settings(max_examples=60, deadline=None)
@given(block_cases())
def test_the_block_matches_the_loop_reference(case: dict[str, Any]) -> None:
    x = case["x"]
    result = transformer_block(x, layers_of(case), options_of(case), include={"weights", "residual"})
    slopes = case["slopes"]
    output, residual, per_head = reference_block(
        x,
        case["attention"],
        case["feed_forward"],
        (case["norms"][0], case["norms"][1]),
        norm_position=case["norm_position"],
        causal=case["causal"],
        window=case["window"],
        slopes=None if slopes is None else np.broadcast_to(slopes, (*x.shape[:-2], len(slopes))),
        rope=case["rope"],
    )
    np.testing.assert_allclose(result.output, output, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(result.residual, residual, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(result.weights, per_head.weights, rtol=1e-12, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(block_cases(), st.integers(1, 3))
def test_the_last_rows_of_a_causal_block_equal_the_block_over_them_with_the_rest_cached(
    case: dict[str, Any], new_rows: int
) -> None:
    # Decoding: the rows before the last few enter only as keys and values (the KV cache, held as the rows
    # whose projections they are); causal masking aligned lower-right puts the new rows at the end, and
    # rotary and ALiBi follow that alignment.
    x = case["x"]
    n = x.shape[-2]
    new_rows = min(new_rows, n)
    case = {**case, "causal": True}
    layers, options = layers_of(case), options_of(case)
    whole = transformer_block(x, layers, options, include={"weights", "residual"})
    step = transformer_block(
        x[..., n - new_rows :, :], layers, options, past=x[..., : n - new_rows, :], include={"weights"}
    )
    np.testing.assert_allclose(step.output, whole.output[..., n - new_rows :, :], rtol=1e-12, atol=1e-12)
    assert whole.weights is not None
    assert step.weights is not None
    np.testing.assert_allclose(step.weights, whole.weights[..., n - new_rows :, :], rtol=1e-12, atol=1e-12)


def small_layers(**changes: Any) -> dict[str, Any]:
    """Keywords of a valid block over d_model = 4 (2 heads of 2), d_ff = 3, which a test then breaks."""
    parts: dict[str, Any] = {
        "attention": {
            "w_q": np.ones((4, 4)),
            "w_k": np.ones((4, 4)),
            "w_v": np.ones((4, 4)),
            "w_o": np.ones((4, 4)),
        },
        "num_heads": 2,
        "feed_forward": {"w_1": np.ones((4, 3)), "w_2": np.ones((3, 4))},
        "norm_1": {},
        "norm_2": {},
    }
    for path, value in changes.items():
        part, _, name = path.partition(".")
        if name:
            parts[part][name] = value
        else:
            parts[part] = value
    return parts


def build(parts: dict[str, Any], norm_position: str = "pre") -> TransformerBlockLayers:
    return TransformerBlockLayers(
        attention=MultiHeadWeights(**parts["attention"], num_heads=parts["num_heads"]),
        feed_forward=FeedForwardWeights(**parts["feed_forward"]),
        norm_1=NormOptions(**parts["norm_1"]),
        norm_2=NormOptions(**parts["norm_2"]),
        norm_position=norm_position,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"attention.w_q": np.ones((3, 4))}, "attention.w_q"),
        ({"attention.w_o": np.ones((4, 2))}, "attention.w_o"),  # the residual needs d_model columns
        ({"attention.b_k": np.ones(3)}, "attention.b_k"),
        ({"num_heads": 3}, "attention.w_q"),
        ({"feed_forward.w_1": np.ones((2, 3))}, "feed_forward.w_1"),
        ({"feed_forward.w_2": np.ones((3, 5))}, "feed_forward.w_2"),
        ({"feed_forward.w_3": np.ones((4, 2)), "feed_forward.activation": "swiglu"}, "feed_forward.w_3"),
        ({"norm_1.weight": np.ones(3)}, "norm_1.weight"),
        ({"norm_2.bias": np.ones(5)}, "norm_2.bias"),
    ],
)
def test_a_part_with_the_wrong_shape_is_named_by_its_path(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ShapeError) as error:
        transformer_block(np.ones((2, 4)).reshape(1, 2, 4), build(small_layers(**changes)))
    assert error.value.field == field
    with pytest.raises(ShapeError) as checked:  # the same, from the shapes alone
        transformer_block_shapes((1, 2, 4), build(small_layers(**changes)))
    assert checked.value.field == field


def test_options_of_a_part_are_named_by_its_path_too() -> None:
    with pytest.raises(KernelError) as error:
        transformer_block(
            np.ones((2, 4)),
            build(small_layers()),
            AttentionOptions(rotary=Rotary(dim=3)),
        )
    assert error.value.field == "attention.rotary.dim"
    with pytest.raises(KernelError) as masked:  # a mask that hides every key of a row
        transformer_block(
            np.ones((2, 4)), build(small_layers()), AttentionOptions(mask=[[True, False], [False, False]])
        )
    assert masked.value.field == "attention.mask"


def test_the_inputs_are_named_as_the_block_names_them() -> None:
    with pytest.raises(ShapeError) as error:
        transformer_block(np.ones(4), build(small_layers()))
    assert error.value.field == "x"
    with pytest.raises(ShapeError) as past:
        transformer_block(np.ones((2, 4)), build(small_layers()), past=np.ones((2, 3)))
    assert past.value.field == "past"
    with pytest.raises(NumericalOverflowError) as overflow:  # in the norm of a pre-norm block
        transformer_block([[1.7e308, -1.7e308, 0.0, 0.0]], build(small_layers()))
    assert overflow.value.field == "x"


def test_a_residual_sum_beyond_the_float_range_names_x() -> None:
    # Post-norm adds x to the attention output before normalizing: zero scores, so one row attends to
    # itself, and identity values and output give 1.7e308 + 1.7e308.
    identity = {"w_q": np.zeros((4, 4)), "w_k": np.zeros((4, 4)), "w_v": np.eye(4), "w_o": np.eye(4)}
    with pytest.raises(NumericalOverflowError) as error:
        transformer_block([[1.7e308] * 4], build(small_layers(attention=identity), norm_position="post"))
    assert error.value.field == "x"
    assert "residual" in error.value.message


def test_float32_blocks_are_computed_in_float32() -> None:
    rng = np.random.default_rng(9)
    case = {
        "x": rng.normal(size=(3, 4)),
        "attention": {
            "weights": {name: rng.normal(size=(4, 4)) for name in ("w_q", "w_k", "w_v", "w_o")},
            "biases": {},
            "num_heads": 2,
            "num_kv_heads": 2,
        },
        "feed_forward": {
            "weights": {
                "w_1": rng.normal(size=(4, 6)),
                "w_2": rng.normal(size=(6, 4)),
                "w_3": rng.normal(size=(4, 6)),
            },
            "activation": "swiglu",
        },
        "norms": [{"kind": "rms", "weight": rng.normal(size=4)}, {"kind": "layer"}],
        "norm_position": "pre",
        "causal": True,
        "window": None,
        "slopes": None,
        "rope": None,
    }
    result = transformer_block(case["x"], layers_of(case), options_of(case), dtype=np.float32)
    assert result.output.dtype == np.float32
    expected, _, _ = reference_block(
        case["x"],
        case["attention"],
        case["feed_forward"],
        (case["norms"][0], case["norms"][1]),
        norm_position="pre",
        causal=True,
    )
    np.testing.assert_allclose(result.output, expected, rtol=1e-4, atol=1e-4)


_EYE = np.eye(2)
_OPPOSITE = np.array([[1.0, -1.0], [-1.0, 1.0]])


@pytest.mark.parametrize(
    ("norm_position", "changes", "field", "sum_named"),
    [
        # x is [[1, 0], [0, 1]] in every case: a weight makes the rows that overflow, not x. (The norms
        # normalize rows of any finite size; rows [a, -a] with a near 1e308 leave the range when centred.)
        ("pre", {"attention.w_o": 1e308 * _OPPOSITE}, "norm_2", "h = x + attention"),
        ("post", {"feed_forward.w_2": 1.7e308 * _OPPOSITE}, "norm_2", "h + feed_forward"),
        # A residual sum that overflows names the field behind its larger addend; each named x.
        (
            "post",
            {"norm_1.bias": np.array([1.5e308, 1.5e308])},
            "norm_1.bias",
            "residual sum h + feed_forward",
        ),
        ("post", {"norm_1.weight": np.array([1.7e308, 1.7e308])}, "norm_1.weight", "residual sum h + feed"),
    ],
)
def test_an_overflow_inside_the_block_names_the_part_whose_input_it_was(
    norm_position: str, changes: dict[str, Any], field: str, sum_named: str
) -> None:
    # Each was blamed on x, the block's small input.
    parts: dict[str, Any] = {
        "attention": {"w_q": _EYE, "w_k": _EYE, "w_v": _EYE, "w_o": _EYE},
        "num_heads": 1,
        "feed_forward": {"w_1": _EYE, "w_2": _EYE},
        "norm_1": {},
        "norm_2": {},
    }
    for path, value in changes.items():
        part, name = path.split(".")
        parts[part][name] = value
    with pytest.raises(NumericalOverflowError) as error:
        transformer_block(_EYE, build(parts, norm_position))
    assert error.value.field == field
    assert sum_named in error.value.message
