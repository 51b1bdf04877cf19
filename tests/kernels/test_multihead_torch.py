"""The multi-head layer and grouped-query attention against PyTorch, where PyTorch is installed.

``.ci/run`` installs ``torch==2.13.0`` (the CPU build on the CI machines' disk) for its Python 3.11 run;
no lock file pulls torch, so elsewhere these tests are skipped with that reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from service.kernels import AttentionOptions, MultiHeadWeights, attention, multi_head_attention

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed (.ci/run installs torch==2.13.0 for its Python 3.11 run)"
)
functional = torch.nn.functional

TOLERANCE = {"rtol": 1e-12, "atol": 1e-12}


def layer_weights(module: Any, embed_dim: int) -> dict[str, np.ndarray[Any, Any]]:
    """PyTorch's parameters in this service's ``x @ W`` convention: transposes, and the packed split."""
    if module._qkv_same_embed_dim:
        packed = module.in_proj_weight.detach().numpy()  # [3E, E]: rows of W_q, W_k, W_v
        w_q, w_k, w_v = (packed[i * embed_dim : (i + 1) * embed_dim].T for i in range(3))
    else:
        w_q, w_k, w_v = (getattr(module, f"{p}_proj_weight").detach().numpy().T for p in "qkv")
    weights = {"w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": module.out_proj.weight.detach().numpy().T}
    if module.in_proj_bias is not None:
        b_q, b_k, b_v = np.split(module.in_proj_bias.detach().numpy(), 3)
        weights.update(b_q=b_q, b_k=b_k, b_v=b_v, b_o=module.out_proj.bias.detach().numpy())
    return weights


@pytest.mark.parametrize("seed", range(6))
def test_the_layer_equals_torch_multihead_attention(seed: int) -> None:
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    embed_dim, num_heads = int(rng.choice([4, 6, 8])), int(rng.choice([1, 2]))
    batch, n = int(rng.integers(1, 3)), int(rng.integers(1, 5))
    cross = seed % 2 == 1
    kdim = int(rng.integers(2, 6)) if cross else embed_dim
    m = int(rng.integers(1, 6)) if cross else n
    module = torch.nn.MultiheadAttention(
        embed_dim, num_heads, bias=seed % 3 != 2, kdim=kdim, vdim=kdim, batch_first=True, dtype=torch.float64
    )
    query = rng.normal(size=(batch, n, embed_dim))
    key = rng.normal(size=(batch, m, kdim)) if cross else query
    value = rng.normal(size=(batch, m, kdim)) if cross else query
    # A padding mask (True = ignore, PyTorch's sense) that leaves key 0 visible, and a float mask (a bias).
    padding = rng.random((batch, m)) < 0.3
    padding[:, 0] = False
    additive = rng.normal(size=(n, m))
    expected, expected_weights = module(
        torch.from_numpy(query),
        torch.from_numpy(key),
        torch.from_numpy(value),
        key_padding_mask=torch.from_numpy(np.where(padding, -np.inf, 0.0)),  # float like attn_mask
        attn_mask=torch.from_numpy(additive),
        need_weights=True,
        average_attn_weights=False,
    )
    result = multi_head_attention(
        query,
        None if not cross else key,
        None if not cross else value,
        weights=MultiHeadWeights(**layer_weights(module, embed_dim), num_heads=num_heads),
        # mask [B, 1, 1, m]: true = visible
        options=AttentionOptions(mask=~padding[:, np.newaxis, np.newaxis, :], bias=additive),
        include={"weights"},
    )
    np.testing.assert_allclose(result.output, expected.detach().numpy(), **TOLERANCE)
    np.testing.assert_allclose(result.weights, expected_weights.detach().numpy(), **TOLERANCE)


def test_a_causal_layer_equals_torch_with_a_causal_mask() -> None:
    torch.manual_seed(7)
    module = torch.nn.MultiheadAttention(8, 4, batch_first=True, dtype=torch.float64)
    x = np.random.default_rng(7).normal(size=(2, 5, 8))
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    expected, _ = module(*(torch.from_numpy(x),) * 3, attn_mask=causal, is_causal=True, need_weights=False)
    result = multi_head_attention(
        x,
        weights=MultiHeadWeights(**layer_weights(module, 8), num_heads=4),
        options=AttentionOptions(causal=True),
    )
    np.testing.assert_allclose(result.output, expected.detach().numpy(), **TOLERANCE)


@pytest.mark.parametrize(("query_heads", "kv_heads", "causal"), [(4, 2, False), (6, 3, True), (4, 1, True)])
def test_grouped_query_attention_equals_torch_sdpa(query_heads: int, kv_heads: int, causal: bool) -> None:
    rng = np.random.default_rng(query_heads * 10 + kv_heads)
    q = rng.normal(size=(2, query_heads, 5, 8))
    k, v = rng.normal(size=(2, kv_heads, 5, 8)), rng.normal(size=(2, kv_heads, 5, 3))
    expected = functional.scaled_dot_product_attention(
        torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), is_causal=causal, enable_gqa=True
    )
    # PyTorch's is_causal is the upper-left alignment (n = m here, so both agree).
    result = attention(
        q, k, v, AttentionOptions(causal=causal, causal_alignment="upper_left", enable_gqa=True)
    )
    np.testing.assert_allclose(result.output, expected.numpy(), **TOLERANCE)
