"""/v1/multi-head-attention and /v1/positional-encoding over HTTP: loop references, limits, 422s."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

from service import create_app
from tests.conftest import ContractCheckingClient
from tests.layer_references import layer_cases, reference_for_layer, reference_rope, reference_sinusoidal
from tests.problems import assert_problem

TOLERANCE = {"rtol": 1e-12, "atol": 1e-12}

app = create_app({"TESTING": True})
app.test_client_class = ContractCheckingClient


def post(path: str, body: dict[str, Any]) -> Any:
    return app.test_client().post(path, json=body)


@settings(max_examples=30, deadline=None)
@given(layer_cases())
def test_the_layer_over_http_matches_the_loop_reference(case: dict[str, Any]) -> None:
    heads = case["num_heads"]
    body: dict[str, Any] = {
        "query": case["query"].tolist(),
        **{name: weight.tolist() for name, weight in case["weights"].items()},
        **{name: bias.tolist() for name, bias in case["biases"].items() if bias is not None},
        "num_heads": heads,
        "num_kv_heads": case["num_kv_heads"],
        "causal": case["causal"],
        "causal_alignment": case["alignment"],
        "empty_rows": "zero",
        "include": ["weights", "heads"],
    }
    if not case["self_attention"]:
        body.update(key=case["key"].tolist(), value=case["value"].tolist())
    optional = {
        "mask": None if case["mask"] is None else case["mask"].tolist(),
        "window": None if case["window"] is None else list(case["window"]),
        "alibi_slopes": None if case["slopes"] is None else case["slopes"].tolist(),
        "softcap": case["softcap"],
        "rotary": None
        if case["rope"] is None
        else {k: v for k, v in asdict(case["rope"]).items() if v is not None},
    }
    body.update({name: value for name, value in optional.items() if value is not None})
    response = post("/v1/multi-head-attention", body)
    assert response.status_code == 200, response.get_data(as_text=True)
    answer = response.get_json()
    output, per_head, head_outputs = reference_for_layer(case)
    np.testing.assert_allclose(answer["output"], output, **TOLERANCE)
    np.testing.assert_allclose(answer["weights"], per_head.weights, **TOLERANCE)
    np.testing.assert_allclose(answer["heads"], head_outputs, **TOLERANCE)
    assert answer["empty_rows"] == np.argwhere(per_head.empty).tolist()


LAYER = {
    "query": np.ones((3, 4)).tolist(),
    "w_q": np.ones((4, 8)).tolist(),
    "w_k": np.ones((4, 8)).tolist(),
    "w_v": np.ones((4, 8)).tolist(),
    "w_o": np.ones((8, 2)).tolist(),
    "num_heads": 2,
}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_heads": 3}, "w_q"),
        ({"num_kv_heads": 3, "num_heads": 4, "w_o": np.ones((8, 2)).tolist()}, "num_kv_heads"),
        ({"num_heads": 0}, "num_heads"),
        ({"w_o": np.ones((6, 2)).tolist()}, "w_o"),
        ({"b_q": [1.0, 2.0]}, "b_q"),
        ({"key": np.ones((5, 3)).tolist()}, "w_k"),
        ({"rotary": {"dim": 3}}, "rotary.dim"),
        ({"rotary": {"dim": 6}}, "rotary.dim"),
        ({"window": [-1, None]}, "window"),
        ({"softcap": 0}, "softcap"),
        ({"mask": np.ones((3, 3, 3), dtype=bool).tolist()}, "mask"),
        ({"alibi_slopes": [1.0, 2.0, 3.0]}, "alibi_slopes"),
        ({"include": ["attention"]}, "include"),
    ],
)
def test_bad_layers_are_422_naming_the_field(change: dict[str, Any], field: str) -> None:
    response = post("/v1/multi-head-attention", {**LAYER, **change})
    assert response.status_code == 422, response.get_data(as_text=True)
    assert field in response.get_json()["errors"]


def test_a_small_body_cannot_ask_for_a_large_layer() -> None:
    # About 40 kB of JSON: 2,000 one-feature tokens and one-row weights 4,096 wide. The projections alone
    # would hold 5 x 2,000 x 4,096 = 41 million numbers; refused before any is made.
    body = {
        "query": [[1.0]] * 2000,
        "w_q": [[1.0] * 4096],
        "w_k": [[1.0] * 4096],
        "w_v": [[1.0] * 4096],
        "w_o": [[1.0]] * 4096,
        "num_heads": 1,
    }
    response = post("/v1/multi-head-attention", body)
    assert response.status_code == 413, response.get_data(as_text=True)
    assert "multi-head layer" in response.get_json()["detail"]
    # Many heads of width 1 are counted too: the scores are H x n x m.
    many = {**body, "query": [[1.0]] * 512, "num_heads": 4096, "w_o": [[1.0]] * 4096}
    response = post("/v1/multi-head-attention", {**many, "include": ["weights"]})
    assert response.status_code == 413, response.get_data(as_text=True)


def test_sinusoidal_over_http_matches_the_reference() -> None:
    answer = post(
        "/v1/positional-encoding",
        {"kind": "sinusoidal", "positions": [0, 5, 17, 4096], "d_model": 6, "base": 100},
    )
    assert answer.status_code == 200
    np.testing.assert_allclose(
        answer.get_json()["encoding"], reference_sinusoidal([0, 5, 17, 4096], 6, 100.0), **TOLERANCE
    )
    by_length = post("/v1/positional-encoding", {"kind": "sinusoidal", "length": 3, "d_model": 4}).get_json()
    np.testing.assert_allclose(by_length["encoding"], reference_sinusoidal([0, 1, 2], 4), **TOLERANCE)


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_rotary_over_http_matches_the_reference(style: str) -> None:
    x = np.random.default_rng(5).normal(size=(2, 3, 6))
    answer = post(
        "/v1/positional-encoding",
        {
            "kind": "rotary",
            "x": x.tolist(),
            "positions": [3, 0, 9],
            "style": style,
            "dim": 4,
            "base": 50,
            "include": ["tables"],
        },
    ).get_json()
    for b in range(2):
        for i, position in enumerate([3, 0, 9]):
            expected = reference_rope(x[b, i].tolist(), position, base=50.0, style=style, dim=4)
            np.testing.assert_allclose(answer["output"][b][i], expected, **TOLERANCE)
    assert np.array(answer["cos"]).shape == (3, 2)
    np.testing.assert_allclose(answer["cos"][2][1], np.cos(9 * 50 ** (-2 / 4)), rtol=1e-12)


@pytest.mark.parametrize(
    ("body", "field", "status"),
    [
        ({"kind": "sinusoidal", "length": 4, "d_model": 5}, "d_model", 422),
        ({"kind": "sinusoidal", "length": 4}, "d_model", 422),
        ({"kind": "sinusoidal", "d_model": 4}, "length", 422),
        ({"kind": "sinusoidal", "positions": [0.5], "d_model": 4}, "positions", 422),
        # each rotary-only option refused for a sinusoidal table, not ignored
        ({"kind": "sinusoidal", "length": 3, "d_model": 4, "style": "interleaved"}, "style", 422),
        ({"kind": "sinusoidal", "length": 3, "d_model": 4, "dim": 2}, "dim", 422),
        ({"kind": "sinusoidal", "length": 3, "d_model": 4, "x": [[1.0, 2.0]]}, "x", 422),
        ({"kind": "rotary", "x": [[1.0, 2.0, 3.0]]}, "dim", 422),
        ({"kind": "rotary", "x": [[1.0, 2.0]], "dim": 4}, "dim", 422),
        ({"kind": "rotary", "x": [[1.0, 2.0]], "positions": [0, 1]}, "positions", 422),
        ({"kind": "rotary"}, "x", 422),
        ({"kind": "cosine", "length": 2, "d_model": 2}, "kind", 422),
        ({"kind": "sinusoidal", "length": 10**9, "d_model": 4096}, None, 413),
    ],
)
def test_bad_encodings_name_the_field(body: dict[str, Any], field: str | None, status: int) -> None:
    response = post("/v1/positional-encoding", body)
    assert response.status_code == status, response.get_data(as_text=True)
    if field is not None:
        assert field in response.get_json()["errors"]


# [1.7e308, 1.7e308] rotated to position 1 is [-5.1e307, 2.35e308]: the second feature is beyond float64.
ROTATED_PAST_FLOAT64 = [[1.7e308, 1.7e308]]


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "rotary", "x": ROTATED_PAST_FLOAT64, "positions": [1]},
        {"kind": "rotary", "x": ROTATED_PAST_FLOAT64, "positions": [1], "include": ["tables"]},
        {
            "kind": "rotary",
            "x": [[3e38, 3e38]],
            "positions": [1],
            "style": "interleaved",
            "precision": "float32",
        },
        {"kind": "rotary", "x": [[1.0, 1e39]], "positions": [0], "precision": "float32"},
    ],
)
def test_a_rotation_beyond_the_float_range_is_a_422_naming_x(body: dict[str, Any]) -> None:
    # It was a 200 with a wrong first feature and a null second one.
    problem = assert_problem(post("/v1/positional-encoding", body), 422, field="x", says="overflowed")
    assert problem["type"].endswith(":numerical-overflow")


@pytest.mark.parametrize("softcap", [None, 5.0])
def test_attention_and_the_layer_with_rotary_overflow_are_422s(softcap: float | None) -> None:
    # With a soft-cap the overflowed scores were capped into a 200 (weights [0.5, 0.5]).
    options: dict[str, Any] = {"rotary": {}, **({} if softcap is None else {"softcap": softcap})}
    attention = post(
        "/v1/attention",
        {
            "query": [[1.0, 1.0]],
            "key": [[1.0, 1.0], *ROTATED_PAST_FLOAT64],
            "value": [[1.0], [2.0]],
            **options,
        },
    )
    assert assert_problem(attention, 422, field="key", says="rotary")["type"].endswith(":numerical-overflow")
    eye = [[1.0, 0.0], [0.0, 1.0]]
    layer = post(
        "/v1/multi-head-attention",
        {
            "query": [[1.0, 1.0], *ROTATED_PAST_FLOAT64],
            **{name: eye for name in ("w_q", "w_k", "w_v", "w_o")},
            "num_heads": 1,
            "include": ["q", "k"],
            **options,
        },
    )
    assert assert_problem(layer, 422, field="query", says="rotary")["type"].endswith(":numerical-overflow")


_ONE_HEAD = {
    "w_q": [[1.0], [1.0]],
    "w_k": [[1.0], [1.0]],
    "w_v": [[1.0], [1.0]],
    "w_o": [[1.0]],
    "num_heads": 1,
}
_FEED_FORWARD = {"x": [[1.0, 1.0]], "w_1": [[1.0], [1.0]], "w_2": [[1.0, 1.0]]}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        # An input or a bias beyond float32's range (3.4e38) is named, not the weight it met: the weights
        # were blamed for every overflow of a projection, the inputs said to be checked when they were not.
        ("/v1/multi-head-attention", {"query": [[1e39, 1.0]], **_ONE_HEAD}, "query"),
        ("/v1/multi-head-attention", {"query": [[1.0, 1.0]], "key": [[1e39, 1.0]], **_ONE_HEAD}, "key"),
        ("/v1/multi-head-attention", {"query": [[1.0, 1.0]], "value": [[1e39, 1.0]], **_ONE_HEAD}, "value"),
        ("/v1/multi-head-attention", {"query": [[1.0, 1.0]], **_ONE_HEAD, "b_q": [1e39]}, "b_q"),
        ("/v1/multi-head-attention", {"query": [[1.0, 1.0]], **_ONE_HEAD, "b_o": [1e39]}, "b_o"),
        ("/v1/multi-head-attention", {"query": [[1.0, 1.0]], **_ONE_HEAD, "w_q": [[1e39], [1.0]]}, "w_q"),
        ("/v1/feed-forward", {**_FEED_FORWARD, "b_1": [1e39]}, "b_1"),
        ("/v1/feed-forward", {**_FEED_FORWARD, "b_2": [1.0, 1e39]}, "b_2"),
        ("/v1/feed-forward", {**_FEED_FORWARD, "w_1": [[1e39], [1.0]]}, "w_1"),
        (
            "/v1/transformer-block",
            {
                "x": [[1.0, 1.0]],
                "attention": {
                    **_ONE_HEAD,
                    "w_q": [[1.0, 0.0], [0.0, 1.0]],
                    "w_k": [[1.0, 0.0], [0.0, 1.0]],
                    "w_v": [[1.0, 0.0], [0.0, 1.0]],
                    "w_o": [[1.0, 0.0], [0.0, 1.0]],
                    "b_q": [1e39, 0.0],
                },
                "feed_forward": {"w_1": [[1.0], [1.0]], "w_2": [[1.0, 1.0]]},
            },
            "attention.b_q",
        ),
    ],
)
def test_a_float32_overflow_names_the_input_or_bias_beyond_its_range(
    path: str, body: dict[str, Any], field: str
) -> None:
    problem = assert_problem(
        post(path, {**body, "precision": "float32"}), 422, field=field, says="overflowed"
    )
    assert problem["type"].endswith(":numerical-overflow")


def test_a_base_whose_angles_overflow_is_a_422_naming_it() -> None:
    # 5e-324 ** (-62/64) overflows float64: the sinusoidal table was a 200 with NaN (null) in every row, and
    # rotary blamed the rotated input.
    ones = [[1.0] * 64, [1.0] * 64]
    tiny = 5e-324
    sinusoidal = {"kind": "sinusoidal", "length": 3, "d_model": 64, "base": tiny}
    assert_problem(post("/v1/positional-encoding", sinusoidal), 422, field="base", says="too small")
    rotary = {"kind": "rotary", "x": ones, "base": tiny}
    assert_problem(post("/v1/positional-encoding", rotary), 422, field="base", says="too small")
    attention = {"query": ones, "key": ones, "value": [[1.0], [2.0]], "rotary": {"base": tiny}}
    assert_problem(post("/v1/attention", attention), 422, field="rotary.base", says="too small")
    eye = np.eye(64).tolist()
    layer = {
        "query": ones,
        **{name: eye for name in ("w_q", "w_k", "w_v", "w_o")},
        "num_heads": 1,
        "rotary": {"base": tiny},
    }
    assert_problem(post("/v1/multi-head-attention", layer), 422, field="rotary.base", says="too small")
    # A base just large enough keeps every angle finite: a 200 with a finite table.
    table = post("/v1/positional-encoding", {**sinusoidal, "base": 1e-300}).get_json()["encoding"]
    assert all(value is not None for row in table for value in row)


_ZERO = [[0.0, 0.0], [0.0, 0.0]]
_ZERO_ATTENTION = {"w_q": _ZERO, "w_k": _ZERO, "w_v": _ZERO, "w_o": _ZERO, "num_heads": 1}
_RMS = {"norm_1": {"kind": "rms"}, "norm_2": {"kind": "rms"}}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        # the attention's bias, its w_o all zeros: the sum was blamed on w_o
        (
            {"x": [[1e308, 1e308]], "attention": {**_ZERO_ATTENTION, "b_o": [1.6e308] * 2}, **_RMS},
            "attention.b_o",
        ),
        # the feed-forward layer's bias: blamed on w_2
        (
            {
                "x": [[1e308, 1e308]],
                "feed_forward": {"w_1": _ZERO, "w_2": _ZERO, "b_2": [1.6e308] * 2},
                **_RMS,
            },
            "feed_forward.b_2",
        ),
        # feature 1 overflows through w_o (1e308 + 1.2e308) where x is larger at feature 0: blamed on x
        (
            {
                "x": [[1.7e308, 1e308]],
                "attention": {
                    "w_q": [[1], [0]],
                    "w_k": [[1], [0]],
                    "w_v": [[1], [0]],
                    "w_o": [[-8e307, 1e308]],
                },
                **_RMS,
            },
            "attention.w_o",
        ),
        # post-norm: h's feature 0 is 1.7e308 through norm_1's weight (its bias is 0 there): blamed on bias
        (
            {
                "x": [[1.0, -1.0]],
                "feed_forward": {"w_1": _ZERO, "w_2": _ZERO, "b_2": [1e307, 0.0]},
                "norm_position": "post",
                "norm_1": {"weight": [1.7e308, 1.0], "bias": [0.0, 1.5e308]},
            },
            "norm_1.weight",
        ),
    ],
)
def test_a_residual_sum_out_of_range_names_the_field_behind_it(body: dict[str, Any], field: str) -> None:
    full = {"attention": _ZERO_ATTENTION, "feed_forward": {"w_1": _ZERO, "w_2": _ZERO}, **body}
    full["attention"] = {"num_heads": 1, **full["attention"]}
    response = create_app({"TESTING": True}).test_client().post("/v1/transformer-block", json=full)
    problem = assert_problem(response, 422)
    assert list(problem["errors"]) == [field]
    assert "residual sum" in problem["errors"][field][0]
