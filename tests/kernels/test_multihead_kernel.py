"""The multi-head layer against the loop reference (every option, GQA included) and worked checks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

from service.kernels import (
    AttentionOptions,
    KernelError,
    MultiHeadWeights,
    NumericalOverflowError,
    Rotary,
    ShapeError,
    multi_head_attention,
    multi_head_shapes,
)
from service.kernels import _attention as kernel_attention
from tests.layer_references import layer_cases, reference_for_layer


@settings(max_examples=100, deadline=None)
@given(layer_cases())
def test_the_layer_matches_the_loop_reference(case: dict[str, Any]) -> None:
    batch = case["query"].shape[:-2]
    heads = case["num_heads"]
    result = multi_head_attention(
        case["query"],
        None if case["self_attention"] else case["key"],
        None if case["self_attention"] else case["value"],
        weights=MultiHeadWeights(
            **case["weights"],
            num_heads=heads,
            num_kv_heads=case["num_kv_heads"],
            **{name: bias for name, bias in case["biases"].items() if bias is not None},
        ),
        options=AttentionOptions(
            mask=case["mask"],
            causal=case["causal"],
            causal_alignment=case["alignment"],
            window=case["window"],
            alibi_slopes=case["slopes"],
            softcap=case["softcap"],
            rotary=None if case["rope"] is None else Rotary(base=case["rope"].base, style=case["rope"].style),  # type: ignore[arg-type]
            empty_rows="zero",
        ),
        include={"weights", "heads", "q", "k", "v"},
    )
    output, per_head, head_outputs = reference_for_layer(case)
    np.testing.assert_allclose(result.output, output, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(result.weights, per_head.weights, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(result.heads, head_outputs, rtol=1e-12, atol=1e-12)
    assert result.q is not None
    assert result.k is not None
    assert result.v is not None
    assert result.q.shape == (
        *batch,
        heads,
        case["query"].shape[-2],
        case["weights"]["w_q"].shape[1] // heads,
    )
    assert result.k.shape[-3] == result.v.shape[-3] == case["num_kv_heads"]
    # The projections shown are the ones the scores used: q kᵀ · scale reproduces the weights' rows.
    group = heads // case["num_kv_heads"]
    k_per_head = np.repeat(result.k, group, axis=-3)
    scores = result.q @ np.swapaxes(k_per_head, -1, -2) * result.scale
    if (
        case["softcap"] is None
        and case["slopes"] is None
        and case["mask"] is None
        and not case["causal"]
        and case["window"] is None
    ):
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        np.testing.assert_allclose(
            result.weights, weights / weights.sum(-1, keepdims=True), rtol=1e-12, atol=1e-12
        )


def test_shapes_are_checked_before_allocating() -> None:
    square = np.broadcast_to(0.0, (512, 512))  # a view of one number: only its shape is read
    shapes = multi_head_shapes(
        (2, 512, 512),
        None,
        None,
        MultiHeadWeights(w_q=square, w_k=square, w_v=square, w_o=square, num_heads=8),
    )
    assert (shapes.d_k, shapes.d_v, shapes.num_kv_heads) == (64, 64, 8)
    assert shapes.scores_elements == 2 * 8 * 512 * 512
    assert shapes.projection_multiplies == 2 * 4 * 512 * 512 * 512


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"num_heads": 3}, "w_q"),  # 8 columns do not split into 3 heads
        ({"num_heads": 4, "num_kv_heads": 3}, "num_kv_heads"),
        ({"num_heads": 0}, "num_heads"),
        ({"num_heads": 2, "w_o": np.ones((3, 2))}, "w_o"),
        ({"num_heads": 2, "w_k": np.ones((5, 8))}, "w_k"),
        ({"num_heads": 2, "w_k": np.ones((4, 6))}, "w_k"),
        ({"num_heads": 2, "b_q": np.ones(3)}, "b_q"),
        ({"num_heads": 2, "rotary": Rotary(dim=5)}, "rotary.dim"),
        ({"num_heads": 2, "softcap": 0.0}, "softcap"),
        ({"num_heads": 2, "window": (-2, 0)}, "window"),
    ],
)
def test_bad_layers_name_the_field(arguments: dict[str, Any], field: str) -> None:
    layer: dict[str, Any] = {
        "w_q": np.ones((4, 8)),
        "w_k": np.ones((4, 8)),
        "w_v": np.ones((4, 8)),
        "w_o": np.ones((8, 2)),
    }
    layer.update(arguments)
    weights = {name: layer.pop(name) for name in list(layer) if name in MultiHeadWeights.__dataclass_fields__}
    with pytest.raises((KernelError, ShapeError)) as error:
        multi_head_attention(
            np.ones((3, 4)), weights=MultiHeadWeights(**weights), options=AttentionOptions(**layer)
        )
    assert error.value.field == field


@pytest.mark.parametrize("return_projections", [False, True])
def test_projections_rotated_beyond_the_float_range_are_an_overflow(return_projections: bool) -> None:
    # Identity projections keep [1.7e308, 1.7e308] finite; rotary at position 1 takes it to 2.35e308.
    # With a soft-cap the overflowed scores were capped into an answer, and the projections held inf.
    eye = np.eye(2)
    with pytest.raises(NumericalOverflowError, match="rotary") as error:
        multi_head_attention(
            [[1.0, 1.0], [1.7e308, 1.7e308]],
            weights=MultiHeadWeights(w_q=eye, w_k=eye, w_v=eye, w_o=eye, num_heads=1),
            options=AttentionOptions(softcap=5.0, rotary=Rotary()),
            include={"q", "k", "v"} if return_projections else (),
        )
    assert error.value.field == "query"


def test_rotary_tables_are_computed_once_when_the_rotated_projections_are_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Shown under include q and k, the rotated rows were rotated a second time after attention: every sine and
    # cosine table computed twice, which the request's work counts once.
    calls: list[int] = []
    real_tables_at = kernel_attention.tables_at

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(len(args[0]))  # the positions
        return real_tables_at(*args, **kwargs)

    monkeypatch.setattr(kernel_attention, "tables_at", counted)
    rng = np.random.default_rng(5)
    weights = MultiHeadWeights(
        w_q=rng.normal(size=(4, 4)),
        w_k=rng.normal(size=(4, 4)),
        w_v=rng.normal(size=(4, 4)),
        w_o=np.eye(4),
        num_heads=2,
    )
    x = rng.normal(size=(3, 4))
    shown = multi_head_attention(
        x, weights=weights, options=AttentionOptions(rotary=Rotary()), include={"q", "k"}
    )
    assert calls == [3, 3]  # the query positions, then the key positions: once each
    calls.clear()
    plain = multi_head_attention(x, weights=weights, options=AttentionOptions(rotary=Rotary()))
    assert calls == [3, 3]
    np.testing.assert_array_equal(shown.output, plain.output)
    # q as the scores used it: the projection rotated at positions 0, 1, 2 (row 0 unturned)
    assert shown.q is not None
    projected = (x @ weights.w_q).reshape(3, 2, 2).swapaxes(0, 1)
    np.testing.assert_allclose(shown.q[:, 0], projected[:, 0], rtol=1e-12)
    angle = 1.0  # position 1, the first of d_k / 2 = 1 frequencies
    expected = projected[:, 1] @ np.array([[np.cos(angle), np.sin(angle)], [-np.sin(angle), np.cos(angle)]])
    np.testing.assert_allclose(shown.q[:, 1], expected, rtol=1e-12)


@pytest.mark.parametrize(("softcap", "field"), [(1e39, "softcap")])
def test_a_softcap_beyond_float32_is_blamed_in_the_layer(softcap: float, field: str) -> None:
    eye = np.eye(2)
    with pytest.raises(NumericalOverflowError) as error:
        multi_head_attention(
            [[0.0, 1.0], [1.0, 0.0]],
            weights=MultiHeadWeights(w_q=eye, w_k=eye, w_v=eye, w_o=eye, num_heads=1),
            options=AttentionOptions(softcap=softcap),
            dtype=np.float32,
        )
    assert error.value.field == field
