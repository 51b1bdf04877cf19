"""/v1/layer-norm, /v1/feed-forward and /v1/transformer-block over HTTP against PyTorch (where installed),
the same answers as /v2 models, and errors named by their path inside the block on both protocols."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from service import create_app
from tests.conftest import ContractCheckingClient

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed (.ci/run installs torch==2.13.0 for its Python 3.11 run)"
)
from tests.kernels.test_block_torch import block_layers  # noqa: E402  (needs torch)

functional = torch.nn.functional
TOLERANCE = {"rtol": 1e-12, "atol": 1e-12}

app = create_app({"TESTING": True})
app.test_client_class = ContractCheckingClient


def post(path: str, body: dict[str, Any]) -> Any:
    response = app.test_client().post(path, json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def tensor(values: Any) -> Any:
    return torch.from_numpy(np.asarray(values, dtype=np.float64))


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_layer_norm_over_http_equals_torch(kind: str) -> None:
    rng = np.random.default_rng(1)
    x, weight, bias = rng.normal(size=(2, 3, 6)) * 4, rng.normal(size=6), rng.normal(size=6)
    body: dict[str, Any] = {"x": x.tolist(), "kind": kind, "weight": weight.tolist(), "eps": 1e-6}
    if kind == "layer":
        body["bias"] = bias.tolist()
        expected = functional.layer_norm(tensor(x), (6,), tensor(weight), tensor(bias), eps=1e-6)
    else:
        expected = functional.rms_norm(tensor(x), (6,), tensor(weight), eps=1e-6)
    np.testing.assert_allclose(post("/v1/layer-norm", body)["output"], expected.numpy(), **TOLERANCE)


@pytest.mark.parametrize(
    ("activation", "act"),
    [
        ("relu", functional.relu),
        ("gelu", functional.gelu),
        ("gelu_tanh", lambda z: functional.gelu(z, approximate="tanh")),
        ("silu", functional.silu),
        ("swiglu", functional.silu),
        ("geglu", functional.gelu),
    ],
)
def test_feed_forward_over_http_equals_torch_ops(activation: str, act: Any) -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 4, 5))
    w_1, w_3, w_2 = rng.normal(size=(5, 7)), rng.normal(size=(5, 7)), rng.normal(size=(7, 3))
    b_1, b_2 = rng.normal(size=7), rng.normal(size=3)
    gated = activation in ("swiglu", "geglu")
    hidden = act(tensor(x) @ tensor(w_1) + tensor(b_1))
    if gated:
        hidden = hidden * (tensor(x) @ tensor(w_3))
    body = {
        "x": x.tolist(),
        "w_1": w_1.tolist(),
        "b_1": b_1.tolist(),
        "w_2": w_2.tolist(),
        "b_2": b_2.tolist(),
        "activation": activation,
        "include": ["hidden"],
        **({"w_3": w_3.tolist()} if gated else {}),
    }
    answer = post("/v1/feed-forward", body)
    np.testing.assert_allclose(answer["hidden"], hidden.numpy(), **TOLERANCE)
    np.testing.assert_allclose(answer["output"], (hidden @ tensor(w_2) + tensor(b_2)).numpy(), **TOLERANCE)


def block_body(layers: Any) -> dict[str, Any]:
    """A /v1/transformer-block body from the kernel's layers (as test_block_torch copies them from torch)."""
    attention = layers.attention
    feed = layers.feed_forward
    listed = lambda value: None if value is None else np.asarray(value).tolist()  # noqa: E731
    parts = {
        "attention": {
            name: listed(getattr(attention, name))
            for name in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")
            if getattr(attention, name) is not None
        }
        | {"num_heads": attention.num_heads},
        "feed_forward": {
            name: listed(getattr(feed, name))
            for name in ("w_1", "w_2", "b_1", "b_2")
            if getattr(feed, name) is not None
        }
        | {"activation": feed.activation},
    }
    for name in ("norm_1", "norm_2"):
        norm = getattr(layers, name)
        parts[name] = {"weight": listed(norm.weight), "eps": norm.eps} | (
            {} if norm.bias is None else {"bias": listed(norm.bias)}
        )
    return parts


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_the_block_over_http_equals_torch_transformer_encoder_layer(
    norm_first: bool, activation: str
) -> None:
    rng = np.random.default_rng(3)
    torch.manual_seed(3)
    layer = torch.nn.TransformerEncoderLayer(
        6,
        3,
        dim_feedforward=10,
        dropout=0.0,
        activation=activation,
        batch_first=True,
        norm_first=norm_first,
        dtype=torch.float64,
    )
    layer.eval()
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.3)
    x = rng.normal(size=(2, 5, 6))
    mask = torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    with torch.no_grad():
        expected = layer(tensor(x), src_mask=mask, is_causal=True).numpy()
    layers = block_layers(layer, d_model=6, num_heads=3, activation=activation, norm_first=norm_first)
    body = {"x": x.tolist(), **block_body(layers), "norm_position": "pre" if norm_first else "post"}
    body["attention"]["causal"] = True
    answer = post("/v1/transformer-block", body | {"include": ["weights", "residual"]})
    np.testing.assert_allclose(answer["output"], expected, **TOLERANCE)
    assert np.asarray(answer["weights"]).shape == (2, 3, 5, 5)
    assert np.asarray(answer["residual"]).shape == (2, 5, 6)


def _v2_infer(model: str, tensors: dict[str, Any], parameters: dict[str, Any]) -> Any:
    inputs = []
    for name, values in tensors.items():
        array = np.asarray(values, dtype=np.float64)
        inputs.append(
            {"name": name, "shape": list(array.shape), "datatype": "FP64", "data": array.ravel().tolist()}
        )
    return app.test_client().post(
        f"/v2/models/{model}/infer", json={"inputs": inputs, "parameters": parameters}
    )


IDENTITY = [[1.0, 0.0], [0.0, 1.0]]


def test_the_block_answers_alike_on_v2_with_its_parts_by_path() -> None:
    body = {
        "x": [[1.0, 0.0], [0.0, 1.0]],
        "attention": {
            "w_q": IDENTITY,
            "w_k": IDENTITY,
            "w_v": IDENTITY,
            "w_o": IDENTITY,
            "num_heads": 1,
            "causal": True,
        },
        "feed_forward": {"w_1": IDENTITY, "w_2": IDENTITY, "activation": "gelu"},
        "norm_position": "post",
        "include": ["residual"],
    }
    v1 = post("/v1/transformer-block", body)
    tensors = {"x": body["x"]}
    tensors |= {f"attention.{name}": IDENTITY for name in ("w_q", "w_k", "w_v", "w_o")}
    tensors |= {"feed_forward.w_1": IDENTITY, "feed_forward.w_2": IDENTITY}
    parameters = {
        "attention.num_heads": 1,
        "attention.causal": True,
        "feed_forward.activation": "gelu",
        "norm_position": "post",
        "include": ["residual"],
    }
    v2 = _v2_infer("transformer-block", tensors, parameters)
    assert v2.status_code == 200, v2.get_data(as_text=True)
    outputs = {output["name"]: output for output in v2.get_json()["outputs"]}
    assert set(outputs) == {"output", "residual"}
    np.testing.assert_allclose(np.reshape(outputs["output"]["data"], (2, 2)), v1["output"], rtol=1e-15)
    np.testing.assert_allclose(np.reshape(outputs["residual"]["data"], (2, 2)), v1["residual"], rtol=1e-15)

    tensors["feed_forward.w_2"] = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]  # 3 columns: not d_model
    refused = _v2_infer("transformer-block", tensors, parameters)
    assert refused.status_code == 422
    assert list(refused.get_json()["errors"]) == ["feed_forward.w_2"]


@pytest.mark.parametrize(
    ("part", "changes", "field"),
    [
        ("feed_forward", {"activation": "swiglu"}, "feed_forward.w_3"),
        ("feed_forward", {"w_3": IDENTITY}, "feed_forward.w_3"),
        ("feed_forward", {"w_1": [1.0, 2.0]}, "feed_forward.w_1"),
        ("attention", {"w_q": [[1.0, 0.0]] * 3}, "attention.w_q"),  # 3 rows: d_model is 2
        ("attention", {"rotary": {"style": "sideways"}}, "attention.rotary.style"),
        ("attention", {"query": IDENTITY}, "attention.query"),
        ("norm_1", {"kind": "rms", "bias": [0.0, 0.0]}, "norm_1.bias"),
        ("norm_2", {"eps": 0}, "norm_2.eps"),
        ("norm_2", {"weight": [1.0, 2.0, 3.0]}, "norm_2.weight"),
    ],
)
def test_an_error_inside_a_part_names_its_path(part: str, changes: dict[str, Any], field: str) -> None:
    body: dict[str, Any] = {
        "x": [[1.0, 0.0], [0.0, 1.0]],
        "attention": {"w_q": IDENTITY, "w_k": IDENTITY, "w_v": IDENTITY, "w_o": IDENTITY, "num_heads": 1},
        "feed_forward": {"w_1": IDENTITY, "w_2": IDENTITY},
    }
    body[part] = {**body.get(part, {}), **changes}
    response = app.test_client().post("/v1/transformer-block", json=body)
    assert response.status_code == 422, response.get_data(as_text=True)
    assert list(response.get_json()["errors"]) == [field]
