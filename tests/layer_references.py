"""Plain-loop references for attention's options, positional encodings and the multi-head layer.

Written from the definitions (Attention Is All You Need §3.2.2 and §3.5, RoFormer, FlashAttention's window
and ALiBi, Gemma 2's soft-capping, PyTorch's grouped-query semantics), one scalar at a time with math.sin,
math.cos, math.tanh and math.exp, and sharing no code with ``service.kernels``. The hypothesis strategy draws
the cases that the kernel tests and the HTTP tests check against them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

Array = NDArray[Any]


def reference_sinusoidal(positions: list[int], d_model: int, base: float = 10000.0) -> list[list[float]]:
    """PE(pos, 2i) = sin(pos / base^(2i/d_model)), PE(pos, 2i+1) = cos(pos / base^(2i/d_model))."""
    table = []
    for pos in positions:
        row = []
        for column in range(d_model):
            i = column // 2
            angle = pos / base ** (2 * i / d_model)
            row.append(math.sin(angle) if column % 2 == 0 else math.cos(angle))
        table.append(row)
    return table


def reference_rope(row: list[float], position: float, *, base: float, style: str, dim: int) -> list[float]:
    """One row rotated: pair p (of dim / 2) turns by position · base^(−2p/dim); features ≥ dim stay."""
    out = list(row)
    for p in range(dim // 2):
        angle = position * base ** (-2 * p / dim)
        a, b = (p, p + dim // 2) if style == "half" else (2 * p, 2 * p + 1)
        x, y = row[a], row[b]
        out[a] = x * math.cos(angle) - y * math.sin(angle)
        out[b] = y * math.cos(angle) + x * math.sin(angle)
    return out


@dataclass
class RopeSpec:
    base: float = 10000.0
    style: str = "half"
    dim: int | None = None
    query_offset: int | None = None
    key_offset: int | None = None


@dataclass
class OptionsReference:
    output: Array
    weights: Array
    scores: Array  # NaN where hidden
    empty: Array


def reference_attention_options(
    query: Array,
    key: Array,
    value: Array,
    *,
    gqa: bool,
    mask: Array | None = None,
    bias: Array | None = None,
    slopes: Array | None = None,
    causal: bool = False,
    alignment: str = "lower_right",
    scale: float | None = None,
    window: tuple[int | None, int | None] | None = None,
    softcap: float | None = None,
    rope: RopeSpec | None = None,
) -> OptionsReference:
    """Every array has its full leading dimensions L (the last of which is the head axis).

    ``query [*L, H_q, n, d_k]``; ``key [*L, H_kv, m, d_k]`` and ``value [*L, H_kv, m, d_v]`` (``H_kv = H_q``
    without ``gqa``); ``mask``/``bias [*L, H_q, n, m]``; ``slopes [*L, H_q]``.
    """
    lead, n, d_k = query.shape[:-2], query.shape[-2], query.shape[-1]
    m, d_v = key.shape[-2], value.shape[-1]
    heads, kv_heads = query.shape[-3], key.shape[-3]
    group = heads // kv_heads if gqa else 1
    scale = 1 / math.sqrt(d_k) if scale is None else scale
    shift = m - n if alignment == "lower_right" else 0
    output = np.zeros((*lead, n, d_v))
    weights = np.zeros((*lead, n, m))
    scores_out = np.full((*lead, n, m), math.nan)
    empty = np.zeros((*lead, n), dtype=bool)
    for index in np.ndindex(*lead):
        kv_index = (*index[:-1], index[-1] // group)
        keys = [[float(x) for x in key[(*kv_index, j)]] for j in range(m)]
        if rope is not None:
            dim = d_k if rope.dim is None else rope.dim
            key_offset = 0 if rope.key_offset is None else rope.key_offset
            keys = [
                reference_rope(keys[j], j + key_offset, base=rope.base, style=rope.style, dim=dim)
                for j in range(m)
            ]
        for i in range(n):
            position = i + shift  # the query's position in key coordinates
            row = [float(x) for x in query[(*index, i)]]
            if rope is not None:
                query_offset = shift if rope.query_offset is None else rope.query_offset
                row = reference_rope(row, i + query_offset, base=rope.base, style=rope.style, dim=dim)
            scores = {}
            for j in range(m):
                if mask is not None and not mask[(*index, i, j)]:
                    continue
                if causal and j > position:
                    continue
                if window is not None:
                    left, right = window
                    if left is not None and j < position - left:
                        continue
                    if right is not None and j > position + right:
                        continue
                s = sum(row[t] * keys[j][t] for t in range(d_k)) * scale
                if softcap is not None:
                    s = softcap * math.tanh(s / softcap)
                if bias is not None:
                    s += float(bias[(*index, i, j)])
                if slopes is not None:
                    s -= float(slopes[index]) * abs(position - j)
                scores[j] = s
                scores_out[(*index, i, j)] = s
            if not scores:
                empty[(*index, i)] = True
                continue
            top = max(scores.values())
            exps = {j: math.exp(s - top) for j, s in scores.items()}
            total = sum(exps.values())
            for j, e in exps.items():
                weights[(*index, i, j)] = e / total
            for c in range(d_v):
                output[(*index, i, c)] = sum(
                    weights[(*index, i, j)] * float(value[(*kv_index, j, c)]) for j in range(m)
                )
    return OptionsReference(output, weights, scores_out, empty)


def reference_linear(x: Array, weight: Array, bias: Array | None) -> Array:
    """``x [..., r, a] @ weight [a, b] + bias [b]`` by loops."""
    out = np.zeros((*x.shape[:-1], weight.shape[1]))
    for index in np.ndindex(*x.shape[:-1]):
        for c in range(weight.shape[1]):
            total = sum(float(x[(*index, t)]) * float(weight[t, c]) for t in range(weight.shape[0]))
            out[(*index, c)] = total + (0.0 if bias is None else float(bias[c]))
    return out


def split_heads(x: Array, heads: int) -> Array:
    """``[..., r, heads · w]`` → ``[..., heads, r, w]``: head h takes columns h·w … h·w + w − 1."""
    width = x.shape[-1] // heads
    out = np.zeros((*x.shape[:-2], heads, x.shape[-2], width))
    for index in np.ndindex(*x.shape[:-2]):
        for h in range(heads):
            for r in range(x.shape[-2]):
                for c in range(width):
                    out[(*index, h, r, c)] = x[(*index, r, h * width + c)]
    return out


def reference_multi_head(
    query: Array,
    key: Array,
    value: Array,
    weights: dict[str, Array],
    biases: dict[str, Array | None],
    *,
    num_heads: int,
    num_kv_heads: int,
    **options: Any,
) -> tuple[Array, OptionsReference, Array]:
    """The layer by loops: projections, per-head attention, concatenation, output projection.

    ``query``, ``key``, ``value`` have their full batch; ``options`` go to the attention reference with
    ``mask``/``bias`` ``[*B, H_q, n, m]`` and ``slopes`` ``[*B, H_q]``. Returns (output, per-head, heads).
    """
    q = split_heads(reference_linear(query, weights["w_q"], biases.get("b_q")), num_heads)
    k = split_heads(reference_linear(key, weights["w_k"], biases.get("b_k")), num_kv_heads)
    v = split_heads(reference_linear(value, weights["w_v"], biases.get("b_v")), num_kv_heads)
    per_head = reference_attention_options(q, k, v, gqa=True, **options)
    heads = per_head.output  # [*B, H_q, n, d_v]
    batch, n, d_v = heads.shape[:-3], heads.shape[-2], heads.shape[-1]
    concatenated = np.zeros((*batch, n, num_heads * d_v))
    for index in np.ndindex(*batch):
        for h in range(num_heads):
            for i in range(n):
                for c in range(d_v):
                    concatenated[(*index, i, h * d_v + c)] = heads[(*index, h, i, c)]
    output = reference_linear(concatenated, weights["w_o"], biases.get("b_o"))
    return output, per_head, heads


@st.composite
def option_cases(draw: st.DrawFn) -> dict[str, Any]:
    """Attention with any combination of GQA, window, ALiBi, softcap, rotary, mask, bias, causal (both
    alignments) and n ≠ m. Arrays carry their full leading dimensions ``[*B, H, ·, ·]``; ``kernel`` holds
    the same inputs as the kernel takes them (masks, biases and slopes possibly broadcast-shaped)."""
    batch = tuple(draw(st.lists(st.integers(1, 2), max_size=1)))
    kv_heads = draw(st.integers(1, 3))
    gqa = draw(st.booleans())
    heads = kv_heads * draw(st.integers(1, 3)) if gqa else kv_heads
    n, m = draw(st.integers(1, 5)), draw(st.integers(1, 6))
    use_rope = draw(st.booleans())
    d_k = draw(st.sampled_from([2, 4, 6])) if use_rope else draw(st.integers(1, 5))
    d_v = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    case: dict[str, Any] = {
        "query": rng.normal(size=(*batch, heads, n, d_k)) * draw(st.sampled_from([0.5, 1.0, 3.0])),
        "key": rng.normal(size=(*batch, kv_heads, m, d_k)),
        "value": rng.normal(size=(*batch, kv_heads, m, d_v)),
        "gqa": gqa,
        "causal": draw(st.booleans()),
        "alignment": draw(st.sampled_from(["lower_right", "upper_left"])),
        "scale": draw(st.sampled_from([None, 0.5, 2.0])),
    }
    full = (*batch, heads, n, m)
    mask_kind = draw(st.sampled_from(["none", "full", "per_key"]))
    kernel_mask = None
    if mask_kind == "full":
        kernel_mask = rng.random(full) < 0.75
    elif mask_kind == "per_key":
        kernel_mask = rng.random(m) < 0.75
    case["kernel_mask"] = kernel_mask
    case["mask"] = None if kernel_mask is None else np.broadcast_to(kernel_mask, full)
    case["bias"] = rng.normal(size=full) if draw(st.booleans()) else None
    if draw(st.booleans()):
        left = draw(st.none() | st.integers(0, 4))
        right = draw(st.none() | st.integers(0, 3))
        case["window"] = (left, right)
    else:
        case["window"] = None
    slopes_kind = draw(st.sampled_from(["none", "per_head", "shared"]))
    if slopes_kind == "per_head":
        case["kernel_slopes"] = np.round(rng.uniform(0.05, 1.0, size=heads), 3)
    elif slopes_kind == "shared":
        case["kernel_slopes"] = np.array(0.25)
    else:
        case["kernel_slopes"] = None
    case["slopes"] = (
        None if case["kernel_slopes"] is None else np.broadcast_to(case["kernel_slopes"], (*batch, heads))
    )
    case["softcap"] = draw(st.none() | st.sampled_from([0.5, 2.0, 30.0]))
    case["rope"] = None
    if use_rope:
        dim = draw(st.sampled_from([d for d in (2, 4, 6) if d <= d_k] + [None]))
        case["rope"] = RopeSpec(
            base=draw(st.sampled_from([10000.0, 100.0, 10.0])),
            style=draw(st.sampled_from(["half", "interleaved"])),
            dim=dim,
            query_offset=draw(st.none() | st.integers(-3, 20)),
            key_offset=draw(st.none() | st.integers(-3, 20)),
        )
    return case


@st.composite
def layer_cases(draw: st.DrawFn) -> dict[str, Any]:
    batch = tuple(draw(st.lists(st.integers(1, 2), max_size=1)))
    kv_heads = draw(st.integers(1, 3))
    heads = kv_heads * draw(st.integers(1, 2))
    n, m = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    use_rope = draw(st.booleans())
    d_k = draw(st.sampled_from([2, 4])) if use_rope else draw(st.integers(1, 3))
    d_v, d_model, d_out = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 4))
    self_attention = draw(st.booleans())
    d_kv_model = d_model if self_attention else draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    query = rng.normal(size=(*batch, n, d_model))
    key = query if self_attention else rng.normal(size=(*batch, m, d_kv_model))
    value = key if self_attention else rng.normal(size=(*batch, m, d_kv_model))
    weights = {
        "w_q": rng.normal(size=(d_model, heads * d_k)),
        "w_k": rng.normal(size=(d_kv_model, kv_heads * d_k)),
        "w_v": rng.normal(size=(d_kv_model, kv_heads * d_v)),
        "w_o": rng.normal(size=(heads * d_v, d_out)),
    }
    widths = {"b_q": heads * d_k, "b_k": kv_heads * d_k, "b_v": kv_heads * d_v, "b_o": d_out}
    biases = {name: rng.normal(size=width) if draw(st.booleans()) else None for name, width in widths.items()}
    m_actual = key.shape[-2]
    full = (*batch, heads, n, m_actual)
    mask = rng.random(full) < 0.8 if draw(st.booleans()) else None
    rope = None
    if use_rope:
        rope = RopeSpec(
            style=draw(st.sampled_from(["half", "interleaved"])), base=draw(st.sampled_from([10000.0, 50.0]))
        )
    return {
        "self_attention": self_attention,
        "query": query,
        "key": key,
        "value": value,
        "weights": weights,
        "biases": biases,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "mask": mask,
        "causal": draw(st.booleans()),
        "alignment": draw(st.sampled_from(["lower_right", "upper_left"])),
        "window": draw(st.none() | st.tuples(st.none() | st.integers(0, 3), st.none() | st.integers(0, 2))),
        "slopes": np.round(rng.uniform(0.1, 1.0, size=heads), 3) if draw(st.booleans()) else None,
        "softcap": draw(st.none() | st.sampled_from([1.0, 20.0])),
        "rope": rope,
    }


def reference_for_options(case: dict[str, Any]) -> OptionsReference:
    return reference_attention_options(
        case["query"],
        case["key"],
        case["value"],
        gqa=case["gqa"],
        mask=case["mask"],
        bias=case["bias"],
        slopes=case["slopes"],
        causal=case["causal"],
        alignment=case["alignment"],
        scale=case["scale"],
        window=case["window"],
        softcap=case["softcap"],
        rope=case["rope"],
    )


def reference_for_layer(case: dict[str, Any]) -> tuple[np.ndarray, Any, np.ndarray]:
    """The loop reference for a ``layer_cases`` case: (output, per-head reference, head outputs)."""
    batch = case["query"].shape[:-2]
    slopes = case["slopes"]
    return reference_multi_head(
        case["query"],
        case["key"],
        case["value"],
        case["weights"],
        case["biases"],
        num_heads=case["num_heads"],
        num_kv_heads=case["num_kv_heads"],
        mask=case["mask"],
        slopes=None if slopes is None else np.broadcast_to(slopes, (*batch, case["num_heads"])),
        causal=case["causal"],
        alignment=case["alignment"],
        window=case["window"],
        softcap=case["softcap"],
        rope=case["rope"],
    )


# --- The rest of the Transformer block: normalization, feed-forward layers, the block ----------------------
#
# From the definitions (Ba et al. 2016's LayerNorm with the population variance, Zhang and Sennrich's RMSNorm,
# Hendrycks and Gimpel's GELU and its tanh form, SiLU, Shazeer's gated variants in LLaMA's convention,
# Attention Is All You Need §3.1 for post-norm and GPT-2 for pre-norm), one row or one scalar at a time with
# math.fsum, math.sqrt, math.erfc, math.tanh and math.exp.


def reference_norm(
    x: Array,
    *,
    kind: str = "layer",
    weight: Array | None = None,
    bias: Array | None = None,
    eps: float = 1e-5,
) -> Array:
    """``x [..., d]`` normalized row by row (``layer``: centred, population variance; ``rms``: not)."""
    out = np.zeros(x.shape)
    d = x.shape[-1]
    for index in np.ndindex(*x.shape[:-1]):
        row = [float(value) for value in x[index]]
        centre = math.fsum(row) / d if kind == "layer" else 0.0
        spread = math.fsum((value - centre) ** 2 for value in row) / d
        for c, value in enumerate(row):
            normalized = (value - centre) / math.sqrt(spread + eps)
            out[(*index, c)] = normalized * (1.0 if weight is None else float(weight[c])) + (
                0.0 if bias is None else float(bias[c])
            )
    return out


def reference_activation(name: str, z: float) -> float:
    """One scalar through ``relu``, ``gelu`` (z·Φ(z)), ``gelu_tanh``, ``silu`` (z·sigmoid(z))."""
    if name == "relu":
        return max(z, 0.0)
    if name == "gelu":
        return z * 0.5 * math.erfc(-z / math.sqrt(2.0))
    if name == "gelu_tanh":
        if abs(z) > 1e100:  # the cube leaves the float range; tanh is ±1 long before
            return z if z > 0 else -0.0
        inner = math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)
        return 0.5 * z * (1.0 + math.tanh(inner))
    if name == "silu":
        return z / (1.0 + math.exp(-z)) if z > -700 else 0.0 * z
    raise ValueError(name)


def reference_feed_forward(
    x: Array, weights: dict[str, Array | None], activation: str
) -> tuple[Array, Array]:
    """(output, hidden) of the layer: gated (``swiglu``/``geglu``) multiplies by ``x @ w_3 + b_3``."""
    gate_of = {"swiglu": "silu", "geglu": "gelu"}
    w_1, w_2 = weights["w_1"], weights["w_2"]
    assert w_1 is not None
    assert w_2 is not None
    first = reference_linear(x, w_1, weights.get("b_1"))
    hidden = np.zeros(first.shape)
    for index in np.ndindex(*first.shape):
        hidden[index] = reference_activation(gate_of.get(activation, activation), float(first[index]))
    if activation in gate_of:
        w_3 = weights["w_3"]
        assert w_3 is not None
        gate = reference_linear(x, w_3, weights.get("b_3"))
        for index in np.ndindex(*first.shape):
            hidden[index] *= float(gate[index])
    return reference_linear(hidden, w_2, weights.get("b_2")), hidden


def reference_block(
    x: Array,
    attention: dict[str, Any],
    feed_forward: dict[str, Any],
    norms: tuple[dict[str, Any], dict[str, Any]],
    *,
    norm_position: str,
    **options: Any,
) -> tuple[Array, Array, OptionsReference]:
    """(output, residual h, per-head attention) of one block over ``x [*B, n, d_model]``.

    ``attention`` holds ``weights``, ``biases``, ``num_heads``, ``num_kv_heads``; ``feed_forward`` holds
    ``weights`` and ``activation``; ``norms`` the keywords of :func:`reference_norm`; ``options`` go to the
    attention reference (``slopes [*B, H]``, ``mask [*B, H, n, n]``, …).
    """

    def attend(inputs: Array) -> tuple[Array, OptionsReference]:
        output, per_head, _ = reference_multi_head(
            inputs,
            inputs,
            inputs,
            attention["weights"],
            attention["biases"],
            num_heads=attention["num_heads"],
            num_kv_heads=attention["num_kv_heads"],
            **options,
        )
        return output, per_head

    def ffn(inputs: Array) -> Array:
        return reference_feed_forward(inputs, feed_forward["weights"], feed_forward["activation"])[0]

    if norm_position == "pre":
        update, per_head = attend(reference_norm(x, **norms[0]))
        residual = x + update
        return residual + ffn(reference_norm(residual, **norms[1])), residual, per_head
    update, per_head = attend(x)
    residual = reference_norm(x + update, **norms[0])
    return reference_norm(residual + ffn(residual), **norms[1]), residual, per_head
