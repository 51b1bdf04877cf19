"""The typed requests of the block's parts and the block itself: their rules name the field (by its path
inside the block), their work counts the whole block, and run() is the kernel's answer."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from service.kernels import (
    AttentionOptions,
    FeedForwardWeights,
    KernelError,
    MultiHeadWeights,
    NormOptions,
    TransformerBlockLayers,
    feed_forward,
    layer_norm,
    transformer_block,
)
from service.requests import (
    FeedForwardRequest,
    LayerNormRequest,
    MultiHeadRequest,
    RequestError,
    TransformerBlockRequest,
    Work,
)
from service.requests._feed_forward import ACTIVATION_COST, product_work
from service.requests._norms import NORM_COST_PER_ENTRY, NORM_COST_PER_ROW

RNG = np.random.default_rng(22)


def normal(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape)


def compute_bound(work: Work) -> int:
    (amount,) = [bound.amount for bound in work.bounds if bound.setting == "MAX_OUTPUT_ONLY_WORK_ELEMENTS"]
    return amount


def block_body(**changes: Any) -> dict[str, Any]:
    """A valid block over x [2, 3, 4]: 2 heads of 2, d_ff = 6, which a test then changes by path."""
    body: dict[str, Any] = {
        "x": normal(2, 3, 4),
        "attention": {
            "w_q": normal(4, 4),
            "w_k": normal(4, 4),
            "w_v": normal(4, 4),
            "w_o": normal(4, 4),
            "num_heads": 2,
        },
        "feed_forward": {"w_1": normal(4, 6), "w_2": normal(6, 4), "activation": "gelu"},
        "norm_1": {"weight": normal(4), "bias": normal(4)},
        "norm_2": {"kind": "rms", "weight": normal(4)},
    }
    for path, value in changes.items():
        part, _, name = path.partition(".")
        if name:
            body[part] = {**body[part], name: value}
        else:
            body[part] = value
    return body


def test_layer_norm_request_runs_the_kernel() -> None:
    x, weight, bias = normal(3, 5), normal(5), normal(5)
    request = LayerNormRequest(x=x, weight=weight, bias=bias, eps=1e-3)
    expected = layer_norm(x, NormOptions(weight=weight, bias=bias, eps=1e-3))
    np.testing.assert_array_equal(request.run().output, expected)  # the same call: bitwise on one machine
    assert request.run().output.dtype == np.float64
    assert LayerNormRequest(x=x, precision="float32").run().output.dtype == np.float32


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"kind": "batch"}, "kind"),
        ({"kind": "rms", "bias": np.ones(5)}, "bias"),
        ({"eps": 0}, "eps"),
        ({"eps": -1.0}, "eps"),
        ({"eps": True}, "eps"),
        ({"weight": np.ones((1, 5))}, "weight"),  # rank 1 only
        ({"weight": np.ones(4)}, "weight"),
        ({"bias": np.array([1.0, 2.0, np.nan, 0.0, 0.0])}, "bias"),
        ({"x": np.array(1.0)}, "x"),
        ({"precision": "float16"}, "precision"),
    ],
)
def test_layer_norm_rules_name_the_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(KernelError) as error:
        LayerNormRequest(**{"x": np.ones((3, 5)), **fields})
    assert error.value.field == field


def test_layer_norm_work_counts_entries_and_rows() -> None:
    work = LayerNormRequest(x=np.broadcast_to(0.0, (7, 100, 3))).work()
    assert work.compute == compute_bound(work) == 2100 * NORM_COST_PER_ENTRY + 700 * NORM_COST_PER_ROW
    assert work.answer_elements == 2100
    assert work.elements == 6300


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu"])
def test_feed_forward_request_runs_the_kernel(activation: str) -> None:
    gated = activation in ("swiglu", "geglu")
    fields: dict[str, Any] = {"w_1": normal(4, 6), "w_2": normal(6, 3), "b_1": normal(6), "b_2": normal(3)}
    if gated:
        fields.update(w_3=normal(4, 6), b_3=normal(6))
    x = normal(2, 5, 4)
    request = FeedForwardRequest(x=x, activation=activation, include=frozenset({"hidden"}), **fields)  # type: ignore[arg-type]
    expected = feed_forward(x, FeedForwardWeights(**fields, activation=activation), include={"hidden"})  # type: ignore[arg-type]
    result = request.run()
    np.testing.assert_array_equal(result.output, expected.output)
    np.testing.assert_array_equal(result.hidden, expected.hidden)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"activation": "tanh"}, "activation"),
        ({"activation": "swiglu"}, "w_3"),
        ({"w_3": np.ones((4, 6))}, "w_3"),
        ({"b_3": np.ones(6)}, "b_3"),
        ({"w_1": np.ones(4)}, "w_1"),
        ({"w_1": np.ones((5, 6))}, "w_1"),
        ({"w_2": np.ones((5, 3))}, "w_2"),
        ({"b_2": np.ones(4)}, "b_2"),
        ({"include": ["weights"]}, "include"),
        ({"x": np.ones((2, 3, 5))}, "w_1"),
    ],
)
def test_feed_forward_rules_name_the_field(fields: dict[str, Any], field: str) -> None:
    body = {"x": np.ones((2, 4)), "w_1": np.ones((4, 6)), "w_2": np.ones((6, 3)), **fields}
    with pytest.raises(KernelError) as error:
        FeedForwardRequest(**body)
    assert error.value.field == field


def test_feed_forward_work_counts_each_product_and_activation() -> None:
    # x [3, 10, 256], d_ff 512, d_out 64, gated with gelu: the rows' products are of 10 rows each.
    x = np.broadcast_to(0.0, (3, 10, 256))
    wide = np.broadcast_to(0.0, (256, 512))
    request = FeedForwardRequest(
        x=x, w_1=wide, w_3=wide, w_2=np.broadcast_to(0.0, (512, 64)), activation="geglu"
    )
    work = request.work()
    hidden = 30 * 512
    first = math.ceil(30 * 512 * 256 / 128)  # 2 units an entry; 10 rows reuse each weight row fully
    second = math.ceil(30 * 64 * 512 / 128)
    assert product_work(3, 10, 256, 512) == first
    assert work.compute == compute_bound(work) == 2 * first + second + hidden * ACTIVATION_COST["geglu"]
    assert work.elements == hidden * 4 + 30 * 64
    assert work.answer_elements == 30 * 64


def test_a_narrow_product_counts_at_least_one_per_entry_and_few_rows_count_their_slowdown() -> None:
    assert product_work(1, 1000, 1, 1000) == 1000 * 1000  # an outer product: writing it is the cost
    assert product_work(5, 1, 256, 10) == math.ceil(5 * 10 * 256 / 128 * 8)  # one row: dot-product speed


def test_the_block_request_runs_the_kernel_with_its_parts() -> None:
    body = block_body()
    request = TransformerBlockRequest(
        **body, norm_position="post", include=frozenset({"weights", "residual"})
    )
    attention = body["attention"]
    layers = TransformerBlockLayers(
        attention=MultiHeadWeights(**attention),
        feed_forward=FeedForwardWeights(**body["feed_forward"]),
        norm_1=NormOptions(**body["norm_1"]),
        norm_2=NormOptions(**body["norm_2"]),
        norm_position="post",
    )
    expected = transformer_block(body["x"], layers, AttentionOptions(), include={"weights", "residual"})
    result = request.run()
    np.testing.assert_array_equal(result.output, expected.output)
    np.testing.assert_array_equal(result.weights, expected.weights)
    np.testing.assert_array_equal(result.residual, expected.residual)


def test_the_block_passes_the_attention_options_down() -> None:
    body = block_body(**{"attention.causal": True, "attention.alibi_slopes": np.array([0.5, 0.25])})
    result = TransformerBlockRequest(**body, include=frozenset({"weights"})).run()
    assert result.weights is not None
    assert np.all(np.triu(result.weights, 1) == 0)  # no weight above the diagonal


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"feed_forward.activation": "swiglu"}, "feed_forward.w_3"),
        ({"feed_forward.w_3": np.ones((4, 6))}, "feed_forward.w_3"),
        ({"feed_forward.w_2": np.ones((6, 5))}, "feed_forward.w_2"),  # the residual needs d_model
        ({"feed_forward.w_1": np.ones((3, 6))}, "feed_forward.w_1"),
        ({"attention.w_q": np.ones((4, 3))}, "attention.w_q"),
        ({"attention.w_o": np.ones((4, 2))}, "attention.w_o"),
        ({"attention.num_heads": 0}, "attention.num_heads"),
        ({"attention.softcap": -1.0}, "attention.softcap"),
        ({"attention.rotary": {"dim": 3}}, "attention.rotary.dim"),
        ({"attention.rotary": {"bogus": 1}}, "attention.rotary.bogus"),
        ({"attention.mask": np.ones((2, 2, 3, 4), dtype=bool)}, "attention.mask"),
        ({"attention.query": np.ones((2, 3, 4))}, "attention.query"),  # the block's x is its query
        ({"attention.include": ["weights"]}, "attention.include"),
        ({"attention.bogus": 1}, "attention.bogus"),
        ({"norm_1.weight": np.ones(3)}, "norm_1.weight"),
        ({"norm_1.weight": np.array([[1.0, 1.0, 1.0, 1.0]])}, "norm_1.weight"),
        ({"norm_2.bias": np.ones(4)}, "norm_2.bias"),  # norm_2 is an RMSNorm
        ({"norm_2.eps": 0.0}, "norm_2.eps"),
        ({"norm_1.kind": "batch"}, "norm_1.kind"),
        ({"norm_1.precision": "float32"}, "norm_1.precision"),
        ({"norm_1": [1, 2]}, "norm_1"),
        ({"x": np.ones(4)}, "x"),
        ({"x": np.ones((3, 5))}, "attention.w_q"),  # the layers are for d_model = 4
        ({"x": np.array([[1.0, np.inf, 0.0, 0.0]])}, "x"),
    ],
)
def test_block_rules_name_the_field_by_its_path(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(KernelError) as error:
        TransformerBlockRequest(**block_body(**changes))
    assert error.value.field == field


def test_block_options_of_its_own_name_the_field() -> None:
    for name, value in (("norm_position", "middle"), ("include", ["hidden"]), ("precision", "float16")):
        with pytest.raises(RequestError) as error:
            TransformerBlockRequest(**block_body(), **{name: value})
        assert error.value.field == name


def test_block_work_is_its_parts_work_and_the_residual_stream() -> None:
    body = block_body(
        **{
            "x": np.broadcast_to(0.0, (8, 64, 4)),
            "feed_forward.activation": "swiglu",
            "feed_forward.w_3": normal(4, 6),
        }
    )
    request = TransformerBlockRequest(**body, include=frozenset({"weights", "residual"}))
    work = request.work()
    x = body["x"]
    attention = MultiHeadRequest(query=x, include=frozenset({"weights"}), **body["attention"]).work()
    ff = FeedForwardRequest(x=x, **body["feed_forward"]).work()
    norms = LayerNormRequest(x=x).work()
    assert (
        work.compute == compute_bound(work) == attention.compute + ff.compute + 2 * norms.compute + 2 * x.size
    )
    assert work.elements == attention.elements + ff.elements + 2 * norms.elements + 3 * x.size
    assert work.answer_elements == 2 * x.size + 8 * 2 * 64 * 64  # output, residual, per-head weights
    assert work.compute > attention.compute + ff.compute  # the block costs more than its two big parts
