"""Normalization, the feed-forward activations and the Transformer block against PyTorch, where installed.

``.ci/run`` installs ``torch==2.13.0`` (the CPU build on the CI machines' disk) for its Python 3.11 run;
no lock file pulls torch, so elsewhere these tests are skipped with that reason. Weights are copied into
PyTorch's modules from this service's ``x @ W`` convention (PyTorch computes ``x @ W.T``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from service.kernels import (
    AttentionOptions,
    FeedForwardWeights,
    MultiHeadWeights,
    NormOptions,
    TransformerBlockLayers,
    feed_forward,
    layer_norm,
    transformer_block,
)

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed (.ci/run installs torch==2.13.0 for its Python 3.11 run)"
)
functional = torch.nn.functional

TOLERANCE = {"rtol": 1e-12, "atol": 1e-12}


def tensor(array: Any) -> Any:
    return torch.from_numpy(np.asarray(array, dtype=np.float64))


@pytest.mark.parametrize("seed", range(4))
def test_layer_norm_equals_torch_layer_norm(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 9))
    x = rng.normal(size=(2, 3, d)) * 10 + 3
    weight, bias = rng.normal(size=d), rng.normal(size=d)
    eps = [1e-5, 1e-6, 1e-3, 0.5][seed]
    expected = functional.layer_norm(tensor(x), (d,), tensor(weight), tensor(bias), eps=eps).numpy()
    actual = layer_norm(x, NormOptions(weight=weight, bias=bias, eps=eps))
    np.testing.assert_allclose(actual, expected, **TOLERANCE)
    plain = functional.layer_norm(tensor(x), (d,), eps=eps).numpy()  # no affine map: ones and zeros
    np.testing.assert_allclose(layer_norm(x, NormOptions(eps=eps)), plain, **TOLERANCE)


@pytest.mark.parametrize("seed", range(4))
def test_rms_norm_equals_torch_rms_norm(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 9))
    x = rng.normal(size=(3, d)) * 5
    eps = [1e-5, 1e-6, 1e-3, 0.5][seed]
    module = torch.nn.RMSNorm(d, eps=eps, dtype=torch.float64)
    with torch.no_grad():
        module.weight.copy_(tensor(rng.normal(size=d)))
        expected = module(tensor(x)).numpy()
    actual = layer_norm(x, NormOptions(kind="rms", weight=module.weight.detach().numpy(), eps=eps))
    np.testing.assert_allclose(actual, expected, **TOLERANCE)


@pytest.mark.parametrize(
    ("activation", "reference"),
    [
        ("relu", lambda z: functional.relu(z)),
        ("gelu", lambda z: functional.gelu(z)),
        ("gelu_tanh", lambda z: functional.gelu(z, approximate="tanh")),
        ("silu", lambda z: functional.silu(z)),
    ],
)
def test_each_feed_forward_equals_torch_ops(activation: str, reference: Any) -> None:
    rng = np.random.default_rng(11)
    x = rng.normal(size=(2, 5, 6)) * 2
    w_1, b_1, w_2, b_2 = (
        rng.normal(size=(6, 16)),
        rng.normal(size=16),
        rng.normal(size=(16, 6)),
        rng.normal(size=6),
    )
    expected = reference(tensor(x) @ tensor(w_1) + tensor(b_1)) @ tensor(w_2) + tensor(b_2)
    weights = FeedForwardWeights(w_1=w_1, b_1=b_1, w_2=w_2, b_2=b_2, activation=activation)  # type: ignore[arg-type]
    np.testing.assert_allclose(feed_forward(x, weights).output, expected.numpy(), **TOLERANCE)


@pytest.mark.parametrize(("activation", "gate"), [("swiglu", "silu"), ("geglu", "gelu")])
def test_gated_feed_forward_equals_llama_style_torch_ops(activation: str, gate: str) -> None:
    # LLaMA's MLP: down_proj(act(gate_proj(x)) * up_proj(x)), bias-free; gate_proj is w_1, up_proj w_3.
    rng = np.random.default_rng(12)
    x = rng.normal(size=(3, 4, 8))
    gate_proj = torch.nn.Linear(8, 24, bias=False, dtype=torch.float64)
    up_proj = torch.nn.Linear(8, 24, bias=False, dtype=torch.float64)
    down_proj = torch.nn.Linear(24, 8, bias=False, dtype=torch.float64)
    act = functional.silu if gate == "silu" else functional.gelu
    with torch.no_grad():
        expected = down_proj(act(gate_proj(tensor(x))) * up_proj(tensor(x))).numpy()
    weights = FeedForwardWeights(
        w_1=gate_proj.weight.detach().numpy().T,
        w_3=up_proj.weight.detach().numpy().T,
        w_2=down_proj.weight.detach().numpy().T,
        activation=activation,  # type: ignore[arg-type]
    )
    np.testing.assert_allclose(feed_forward(x, weights).output, expected, **TOLERANCE)


def block_layers(
    layer: Any, *, d_model: int, num_heads: int, activation: str, norm_first: bool
) -> TransformerBlockLayers:
    """An ``nn.TransformerEncoderLayer``'s parameters in this service's convention: the packed
    ``in_proj_weight [3E, E]`` split into W_q, W_k, W_v and every matrix transposed."""
    attention = layer.self_attn
    packed = attention.in_proj_weight.detach().numpy()
    w_q, w_k, w_v = (packed[i * d_model : (i + 1) * d_model].T for i in range(3))
    biases: dict[str, Any] = {}
    if attention.in_proj_bias is not None:
        b_q, b_k, b_v = np.split(attention.in_proj_bias.detach().numpy(), 3)
        biases = {"b_q": b_q, "b_k": b_k, "b_v": b_v, "b_o": attention.out_proj.bias.detach().numpy()}
    ff_biases: dict[str, Any] = {}
    if layer.linear1.bias is not None:
        ff_biases = {"b_1": layer.linear1.bias.detach().numpy(), "b_2": layer.linear2.bias.detach().numpy()}

    def norm(module: Any) -> NormOptions:
        return NormOptions(
            weight=module.weight.detach().numpy(),
            bias=None if module.bias is None else module.bias.detach().numpy(),
            eps=module.eps,
        )

    return TransformerBlockLayers(
        attention=MultiHeadWeights(
            w_q=w_q,
            w_k=w_k,
            w_v=w_v,
            w_o=attention.out_proj.weight.detach().numpy().T,
            num_heads=num_heads,
            **biases,
        ),
        feed_forward=FeedForwardWeights(
            w_1=layer.linear1.weight.detach().numpy().T,
            w_2=layer.linear2.weight.detach().numpy().T,
            activation=activation,  # type: ignore[arg-type]
            **ff_biases,
        ),
        norm_1=norm(layer.norm1),
        norm_2=norm(layer.norm2),
        norm_position="pre" if norm_first else "post",
    )


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("seed", range(3))
def test_the_block_equals_torch_transformer_encoder_layer(
    norm_first: bool, activation: str, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    num_heads = int(rng.choice([1, 2, 4]))
    d_model = num_heads * int(rng.integers(1, 4))
    batch, n = int(rng.integers(1, 3)), int(rng.integers(1, 6))
    layer = torch.nn.TransformerEncoderLayer(
        d_model,
        num_heads,
        dim_feedforward=int(rng.integers(1, 12)),
        dropout=0.0,
        activation=activation,
        layer_norm_eps=[1e-5, 1e-6, 1e-3][seed],
        batch_first=True,
        norm_first=norm_first,
        bias=seed != 2,
        dtype=torch.float64,
    )
    layer.eval()
    with torch.no_grad():
        for parameter in layer.parameters():  # the defaults start LayerNorm at ones and zeros: move them
            parameter.add_(torch.randn_like(parameter) * 0.3)
    x = rng.normal(size=(batch, n, d_model))
    causal = seed == 1
    mask = torch.nn.Transformer.generate_square_subsequent_mask(n, dtype=torch.float64) if causal else None
    with torch.no_grad():
        expected = layer(tensor(x), src_mask=mask, is_causal=causal).numpy()
    layers = block_layers(
        layer, d_model=d_model, num_heads=num_heads, activation=activation, norm_first=norm_first
    )
    actual = transformer_block(x, layers, AttentionOptions(causal=causal))
    np.testing.assert_allclose(actual.output, expected, **TOLERANCE)
