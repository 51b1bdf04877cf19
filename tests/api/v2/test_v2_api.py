"""/v2, the Open Inference Protocol, in process: the same answers as /v1, binary framing, and refusals.

The binary bodies here are framed by hand from the extension's text (JSON header, then each tensor's
little-endian bytes), not with the service's own code.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from service import create_app
from tests.problems import assert_problem

HEADER = "Inference-Header-Content-Length"
DATATYPES = {"FP64": "<f8", "FP32": "<f4", "INT64": "<i8", "INT32": "<i4", "BOOL": "|b1"}
RNG = np.random.default_rng(20261130)


def json_tensor(name: str, array: np.ndarray, datatype: str) -> dict[str, Any]:
    return {
        "name": name,
        "shape": list(array.shape),
        "datatype": datatype,
        "data": array.reshape(-1).tolist(),
    }


def binary_body(tensors: list[tuple[str, np.ndarray, str]], **header: Any) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a binary infer request, framed by hand."""
    chunks = [
        np.ascontiguousarray(array, dtype=DATATYPES[datatype]).tobytes() for _, array, datatype in tensors
    ]
    inputs = [
        {
            "name": name,
            "shape": list(array.shape),
            "datatype": datatype,
            "parameters": {"binary_data_size": len(chunk)},
        }
        for (name, array, datatype), chunk in zip(tensors, chunks, strict=True)
    ]
    head = json.dumps({"inputs": inputs, **header}).encode()
    return head + b"".join(chunks), {HEADER: str(len(head)), "Content-Type": "application/octet-stream"}


def read_answer(response: TestResponse) -> dict[str, np.ndarray]:
    """Every output as an array: binary ones read from after the header, JSON ones with null as NaN."""
    assert response.status_code == 200, response.get_data(as_text=True)
    body = response.get_data()
    length = response.headers.get(HEADER)
    head = json.loads(body if length is None else body[: int(length)])
    offset = 0 if length is None else int(length)
    arrays = {}
    for output in head["outputs"]:
        dtype = np.dtype(DATATYPES[output["datatype"]])
        size = (output.get("parameters") or {}).get("binary_data_size")
        if size is None:
            data = [np.nan if value is None else value for value in output["data"]]
            arrays[output["name"]] = np.array(data, dtype=dtype).reshape(output["shape"])
        else:
            arrays[output["name"]] = np.frombuffer(
                body, dtype=dtype, count=size // dtype.itemsize, offset=offset
            )
            arrays[output["name"]] = arrays[output["name"]].reshape(output["shape"])
            offset += size
    assert offset in (0, len(body))
    return arrays


def as_v1(value: Any, dtype: Any = np.float64) -> np.ndarray:
    """A /v1 JSON value as an array, null as NaN."""
    return np.array(_nulls_as_nan(value), dtype=dtype)


def _nulls_as_nan(value: Any) -> Any:
    if isinstance(value, list):
        return [_nulls_as_nan(item) for item in value]
    return np.nan if value is None else value


def assert_same(v2: np.ndarray, v1: np.ndarray, *, rtol: float = 1e-12) -> None:
    """Equal to ``rtol``, with NaN where /v1 has null; -inf in /v2 binary where /v1 has null."""
    assert v2.shape == v1.shape
    np.testing.assert_allclose(np.where(np.isneginf(v2), np.nan, v2), v1, rtol=rtol, atol=0, equal_nan=True)


ATTENTION_ARRAYS = {
    "query": RNG.normal(size=(2, 3, 4)),
    "key": RNG.normal(size=(2, 5, 4)),
    "value": RNG.normal(size=(2, 5, 3)),
    "mask": RNG.random((3, 5)) > 0.3,
    "bias": RNG.normal(size=(3, 5)),
}
ATTENTION_ARRAYS["mask"][:, 0] = True  # no empty row


def _v1(client: FlaskClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    answer: dict[str, Any] = response.get_json()
    return answer


# ---- metadata and health ----


def test_server_metadata_names_the_extensions(client: FlaskClient) -> None:
    answer = client.get("/v2").get_json()
    assert answer["name"] == "attention-service"
    extensions = {"binary_tensor_data", "parameters", "model_configuration", "statistics"}
    assert extensions <= set(answer["extensions"])
    assert client.get("/v2/health/live").get_json() == {"live": True}
    assert client.get("/v2/health/ready").get_json() == {"ready": True}


MULTI_HEAD_INPUTS = ["query", "key", "value", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"]
MULTI_HEAD_INPUTS += ["mask", "bias", "alibi_slopes"]


@pytest.mark.parametrize("prefix", ["", "/versions/1"])
@pytest.mark.parametrize(
    ("model", "inputs", "outputs"),
    [
        (
            "attention",
            ["query", "key", "value", "mask", "bias", "alibi_slopes"],
            ["output", "weights", "scores", "logsumexp"],
        ),
        ("softmax", ["logits", "mask"], ["probabilities", "log_probabilities", "entropy", "argmax"]),
        ("log-likelihood", ["logits", "targets"], ["token_logprobs", "ranks", "top_logprobs", "top_tokens"]),
        (
            "multi-head-attention",
            MULTI_HEAD_INPUTS,
            ["output", "weights", "scores", "heads", "q", "k", "v", "scale", "empty_rows"],
        ),
        ("positional-encoding", ["positions", "x"], ["encoding", "output", "cos", "sin"]),
        ("sample", ["logits", "mask"], ["tokens", "logprobs", "seed"]),
    ],
)
def test_model_metadata_and_readiness(
    client: FlaskClient, model: str, inputs: list[str], outputs: list[str], prefix: str
) -> None:
    metadata = client.get(f"/v2/models/{model}{prefix}").get_json()
    assert metadata["name"] == model
    assert metadata["versions"] == ["1"]
    assert [tensor["name"] for tensor in metadata["inputs"]] == inputs
    assert set(outputs) <= {tensor["name"] for tensor in metadata["outputs"]}
    # Honest about rank: the least rank each input takes, every dimension variable (leading dimensions
    # broadcast, as the metadata's parameters say).
    assert all(set(tensor["shape"]) <= {-1} for tensor in metadata["inputs"])
    assert "broadcast" in metadata["parameters"]["leading_dimensions"]
    assert client.get(f"/v2/models/{model}{prefix}/ready").get_json() == {"name": model, "ready": True}


@pytest.mark.parametrize(
    ("path", "field", "says"),
    [
        (
            "/v2/models/gpt",
            "model",
            "'gpt'; the models are attention, feed-forward, layer-norm, log-likelihood, multi-head-attention",
        ),
        ("/v2/models/gpt/infer", "model", "'gpt'"),
        ("/v2/models/soft%20max/ready", "model", "'soft max'"),
        ("/v2/models/attention/versions/2", "version", "no version '2'; its only version is 1"),
        ("/v2/models/softmax/versions/2/infer", "version", "'2'"),
        ("/v2/models/softmax/nothing", None, "not found"),
    ],
)
def test_unknown_models_and_versions_are_404_naming_them_with_the_error_member(
    client: FlaskClient, path: str, field: str | None, says: str
) -> None:
    response = client.post(path, json={}) if path.endswith("infer") else client.get(path)
    problem = assert_problem(response, 404, field=field, says=says)
    assert problem["error"] == problem["detail"]


def test_a_404_outside_v2_is_unchanged(client: FlaskClient) -> None:
    problem = assert_problem(client.get("/v1/models/gpt"), 404)
    assert "error" not in problem
    assert "errors" not in problem


# ---- the same answers as /v1 ----


def test_multi_head_attention_with_nested_and_list_options_equals_v1(client: FlaskClient) -> None:
    """Every /v1 option reaches /v2: ``rotary`` by its members' paths, ``window`` as a list, binary tensors
    for the weights, and the include list as the requested outputs."""
    x = RNG.standard_normal((2, 5, 8))
    columns = {"w_q": 8, "w_k": 4, "w_v": 4, "w_o": 8}  # 4 query heads of d_k 2, sharing 2 key/value heads
    weights = {name: RNG.standard_normal((8, width)) for name, width in columns.items()}
    parameters = {"num_heads": 4, "num_kv_heads": 2, "causal": True, "window": [2, 0], "softcap": 3.0}
    rotary = {"base": 500.0, "style": "interleaved"}
    tensors = [("query", x, "FP64"), *((name, w, "FP64") for name, w in weights.items())]
    body, headers = binary_body(
        tensors,
        parameters={**parameters, **{f"rotary.{key}": value for key, value in rotary.items()}},
        outputs=[{"name": name, "parameters": {"binary_data": True}} for name in ("output", "weights", "q")],
    )
    v2 = read_answer(client.post("/v2/models/multi-head-attention/infer", data=body, headers=headers))
    v1 = _v1(
        client,
        "/v1/multi-head-attention",
        {
            "query": x.tolist(),
            **{name: w.tolist() for name, w in weights.items()},
            **parameters,
            "rotary": rotary,
            "include": ["weights", "q"],
        },
    )
    assert set(v2) == {"output", "weights", "q"}
    for name in v2:
        assert_same(v2[name], as_v1(v1[name]))
    assert v2["weights"].shape == (2, 4, 5, 5)


def test_positional_encoding_without_input_tensors_and_with_tables_equals_v1(client: FlaskClient) -> None:
    sinusoidal = read_answer(
        client.post(
            "/v2/models/positional-encoding/infer",
            json={"inputs": [], "parameters": {"kind": "sinusoidal", "length": 3, "d_model": 4}},
        )
    )
    v1 = _v1(client, "/v1/positional-encoding", {"kind": "sinusoidal", "length": 3, "d_model": 4})
    assert set(sinusoidal) == {"encoding"}
    assert_same(sinusoidal["encoding"], as_v1(v1["encoding"]))

    x = RNG.standard_normal((3, 4))
    rotary = read_answer(
        client.post(
            "/v2/models/positional-encoding/infer",
            json={
                "inputs": [json_tensor("x", x, "FP64")],
                "parameters": {"kind": "rotary", "base": 100.0},
                "outputs": [{"name": "output"}, {"name": "cos"}, {"name": "sin"}],
            },
        )
    )
    v1 = _v1(
        client,
        "/v1/positional-encoding",
        {"kind": "rotary", "x": x.tolist(), "base": 100.0, "include": ["tables"]},
    )
    for name in ("output", "cos", "sin"):
        assert_same(rotary[name], as_v1(v1[name]))


def test_a_parameter_that_is_a_tensor_or_unknown_is_refused_naming_it(client: FlaskClient) -> None:
    inputs = [json_tensor("logits", np.array([1.0, 2.0]), "FP64")]
    response = client.post(
        "/v2/models/softmax/infer", json={"inputs": inputs, "parameters": {"mask": [True, False]}}
    )
    assert_problem(response, 422, field="mask", says="input tensor")
    response = client.post(
        "/v2/models/softmax/infer", json={"inputs": inputs, "parameters": {"temprature": 2.0}}
    )
    assert_problem(response, 422, field="temprature", says="Did you mean 'temperature'?")
    response = client.post(
        "/v2/models/attention/infer",
        json={
            "inputs": [json_tensor(n, np.eye(2), "FP64") for n in ("query", "key", "value")],
            "parameters": {"rotary.bas": 2.0},
        },
    )
    assert_problem(response, 422, field="rotary.bas", says="Did you mean 'rotary.base'?")


def test_attention_json_tensors_equal_v1(client: FlaskClient) -> None:
    arrays = ATTENTION_ARRAYS
    inputs = [
        json_tensor(name, array, "BOOL" if name == "mask" else "FP64") for name, array in arrays.items()
    ]
    v2 = read_answer(
        client.post(
            "/v2/models/attention/infer",
            json={
                "inputs": inputs,
                "parameters": {"causal": True, "scale": 0.7},
                "outputs": [{"name": n} for n in ("output", "weights", "scores", "logsumexp")],
            },
        )
    )
    v1 = _v1(
        client,
        "/v1/attention",
        {
            **{name: array.tolist() for name, array in arrays.items()},
            "causal": True,
            "scale": 0.7,
            "include": ["weights", "scores", "logsumexp"],
        },
    )
    assert set(v2) == {"output", "weights", "scores", "logsumexp"}  # only what was asked for
    for name in v2:
        assert_same(v2[name], as_v1(v1[name]))
    assert np.isnan(v2["scores"]).any()  # hidden scores: null in JSON, as in /v1


def test_attention_binary_fp64_and_fp32_equal_v1(client: FlaskClient) -> None:
    arrays = ATTENTION_ARRAYS
    v1 = _v1(
        client,
        "/v1/attention",
        {**{n: a.tolist() for n, a in arrays.items()}, "include": ["weights", "scores"]},
    )
    v1_32 = _v1(
        client,
        "/v1/attention",
        {
            **{n: a.tolist() for n, a in arrays.items()},
            "include": ["weights", "scores"],
            "precision": "float32",
        },
    )
    answers = {}
    for datatype in ("FP64", "FP32"):
        tensors = [(n, a, "BOOL" if n == "mask" else datatype) for n, a in arrays.items()]
        body, headers = binary_body(
            tensors,
            parameters={"binary_data_output": True},
            outputs=[{"name": "output"}, {"name": "weights"}, {"name": "scores"}],
        )
        response = client.post("/v2/models/attention/infer", data=body, headers=headers)
        assert response.mimetype == "application/octet-stream"
        answers[datatype] = read_answer(response)
    assert answers["FP64"]["output"].dtype == np.float64
    assert answers["FP32"]["output"].dtype == np.float32
    for name in ("output", "weights", "scores"):
        assert_same(answers["FP64"][name], as_v1(v1[name]))
        # FP32 inputs answer in float32, as /v1's precision=float32 does (the inputs rounded the same way)
        assert_same(answers["FP32"][name].astype(np.float64), as_v1(v1_32[name]), rtol=1e-6)
    assert np.isneginf(answers["FP64"]["scores"]).any()  # a hidden score is -inf in binary


def test_fp32_binary_answers_are_half_the_bytes_of_fp64(client: FlaskClient) -> None:
    sizes = {}
    for datatype in ("FP64", "FP32"):
        body, headers = binary_body(
            [(n, ATTENTION_ARRAYS[n], datatype) for n in ("query", "key", "value")],
            outputs=[{"name": "output", "parameters": {"binary_data": True}}],
        )
        response = client.post("/v2/models/attention/infer", data=body, headers=headers)
        sizes[datatype] = len(response.get_data()) - int(response.headers[HEADER])
    assert sizes["FP64"] == 2 * sizes["FP32"] == 2 * 4 * 2 * 3 * 3


def test_softmax_json_and_binary_equal_v1(client: FlaskClient) -> None:
    logits = RNG.normal(size=(4, 6)) * 3
    mask = RNG.random((4, 6)) > 0.2
    mask[:, 0] = True
    parameters = {"temperature": 0.8, "top_k": 4, "top_p": 0.9}
    v1 = _v1(
        client,
        "/v1/softmax",
        {"logits": logits.tolist(), "mask": mask.tolist(), **parameters, "include": ["log_probabilities"]},
    )
    outputs = ["probabilities", "log_probabilities", "entropy", "argmax", "temperature"]
    as_json = read_answer(
        client.post(
            "/v2/models/softmax/infer",
            json={
                "inputs": [json_tensor("logits", logits, "FP64"), json_tensor("mask", mask, "BOOL")],
                "parameters": parameters,
                "outputs": [{"name": name} for name in outputs],
            },
        )
    )
    body, headers = binary_body(
        [("logits", logits, "FP64"), ("mask", mask, "BOOL")],
        parameters={**parameters, "binary_data_output": True},
        outputs=[{"name": name} for name in outputs],
    )
    as_binary = read_answer(client.post("/v2/models/softmax/infer", data=body, headers=headers))
    for answer in (as_json, as_binary):
        for name in ("probabilities", "log_probabilities", "entropy"):
            assert_same(answer[name], as_v1(v1[name]))
        np.testing.assert_array_equal(answer["argmax"], v1["argmax"])
        assert answer["argmax"].dtype == np.int64
        assert float(answer["temperature"]) == v1["temperature"]


def test_log_likelihood_int64_and_int32_targets_equal_v1(client: FlaskClient) -> None:
    logits = RNG.normal(size=(2, 5, 7))
    targets = RNG.integers(0, 7, size=(2, 5))
    targets[1, 3] = -100  # padding: not scored
    parameters = {"shift": True, "temperature": 1.3, "top_logprobs": 2}
    v1 = _v1(
        client, "/v1/log-likelihood", {"logits": logits.tolist(), "targets": targets.tolist(), **parameters}
    )
    for targets_type in ("INT64", "INT32"):
        body, headers = binary_body(
            [("logits", logits, "FP64"), ("targets", targets, targets_type)],
            parameters={**parameters, "binary_data_output": True},
        )
        answer = read_answer(client.post("/v2/models/log-likelihood/infer", data=body, headers=headers))
        for name in ("token_logprobs", "log_likelihood", "mean_nll", "perplexity"):
            assert_same(answer[name], as_v1(v1[name]))
        # ranks of unscored positions are 0 (null in /v1)
        np.testing.assert_array_equal(answer["ranks"], np.array(_nulls_as_zero(v1["ranks"])))
        np.testing.assert_array_equal(answer["num_tokens"], v1["num_tokens"])
        np.testing.assert_array_equal(answer["is_greedy"], v1["is_greedy"])
        assert answer["is_greedy"].dtype == np.bool_
        # top_logprobs: the /v1 {token, logprob} lists as two tensors; unscored rows -1 and NaN
        for b in range(2):
            for t in range(5):
                listed = v1["top_logprobs"][b][t]
                if listed is None:
                    assert (answer["top_tokens"][b, t] == -1).all()
                    assert np.isnan(answer["top_logprobs"][b, t]).all()
                else:
                    assert answer["top_tokens"][b, t].tolist() == [entry["token"] for entry in listed]
                    assert_same(answer["top_logprobs"][b, t], as_v1([entry["logprob"] for entry in listed]))


def _nulls_as_zero(value: Any) -> Any:
    if isinstance(value, list):
        return [_nulls_as_zero(item) for item in value]
    return 0 if value is None else value


def test_default_outputs_are_what_v1_answers_by_default(client: FlaskClient) -> None:
    inputs = [json_tensor(n, ATTENTION_ARRAYS[n], "FP64") for n in ("query", "key", "value")]
    answer = read_answer(client.post("/v2/models/attention/infer", json={"inputs": inputs}))
    assert set(answer) == {"output", "weights", "scale", "empty_rows"}
    logits = json_tensor("logits", np.array([[1.0, 2.0]]), "FP64")
    targets = json_tensor("targets", np.array([1]), "INT64")
    scored = read_answer(client.post("/v2/models/log-likelihood/infer", json={"inputs": [logits, targets]}))
    assert "top_tokens" not in scored
    assert "token_logprobs" in scored


def test_an_empty_outputs_list_answers_the_default_outputs(client: FlaskClient) -> None:
    """``"outputs": []`` names no output, so the answer holds the default outputs, as without the member
    (Triton answers every output when none is named; tritonclient leaves an empty list out), not none."""
    worked_example = {"query": [[0, 1]], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}
    inputs = [json_tensor(name, np.array(array, float), "FP64") for name, array in worked_example.items()]
    for binary in (False, True):
        request = {"inputs": inputs, "parameters": {"binary_data_output": binary}}
        without = client.post("/v2/models/attention/infer", json=request)
        empty = client.post("/v2/models/attention/infer", json={**request, "outputs": []})
        assert empty.get_data() == without.get_data()
        assert empty.headers.get(HEADER) == without.headers.get(HEADER)
        answer = read_answer(empty)
        assert set(answer) == {"output", "weights", "scale", "empty_rows"}
        np.testing.assert_allclose(answer["weights"], [[0.3302, 0.6698]], atol=1e-4)
        np.testing.assert_allclose(answer["output"], [[1.9814, 2.0093]], atol=1e-4)


def test_an_id_is_echoed(client: FlaskClient) -> None:
    inputs = [json_tensor("logits", np.array([1.0, 2.0]), "FP64")]
    response = client.post("/v2/models/softmax/infer", json={"id": "call-7", "inputs": inputs})
    assert response.get_json()["id"] == "call-7"


# ---- refusals ----


def _good_binary() -> tuple[bytes, dict[str, str]]:
    return binary_body([(n, ATTENTION_ARRAYS[n], "FP64") for n in ("query", "key", "value")])


def _lie(binary_data_size: int) -> tuple[bytes, dict[str, str]]:
    body, headers = _good_binary()
    head = json.loads(body[: int(headers[HEADER])])
    head["inputs"][1]["parameters"]["binary_data_size"] = binary_data_size
    new_head = json.dumps(head).encode()
    return new_head + body[int(headers[HEADER]) :], {**headers, HEADER: str(len(new_head))}


@pytest.mark.parametrize(
    ("make", "field", "says"),
    [
        (lambda b, h: (b[:-8], h), "value", "runs past"),  # short
        (lambda b, h: (b + b"\0" * 8, h), "body", "8 bytes after"),  # long
        (lambda b, h: _lie(2**40), "key", "binary_data_size"),  # a lying size
        (lambda b, h: _lie(8 * 5 * 4 * 2 - 1), "key", "bytes"),  # not shape × datatype size
        (lambda b, h: (b, {**h, HEADER: str(len(b) + 1)}), HEADER, "inside the body"),  # header past the body
        (lambda b, h: (b, {**h, HEADER: "-5"}), HEADER, "byte count"),
        (lambda b, h: (b, {**h, HEADER: "12abc"}), HEADER, "byte count"),
        (lambda b, h: (b"{not json" + b[int(h[HEADER]) :], {**h, HEADER: "9"}), "body", "not valid JSON"),
        (lambda b, h: (b"[]", {**h, HEADER: "2"}), "body", "JSON object"),
    ],
)
def test_bad_binary_bodies_are_400_naming_the_culprit(
    client: FlaskClient, make: Any, field: str, says: str
) -> None:
    body, headers = make(*_good_binary())
    response = client.post("/v2/models/attention/infer", data=body, headers=headers)
    problem = assert_problem(response, 400, field=field, says=says)
    assert problem["error"] == problem["detail"]
    assert field in problem["error"]  # tritonclient shows only the error text: it names the culprit


@pytest.mark.parametrize(
    ("path", "name", "datatype", "shape"),
    [
        ("/v2/models/softmax/infer", "logits", "FP64", [0, 2**60]),
        ("/v2/models/softmax/infer", "logits", "FP32", [2**61, 0]),
        ("/v2/models/softmax/infer", "logits", "FP64", [0, 2**63]),
        ("/v2/models/layer-norm/versions/1/infer", "x", "FP64", [2**32, 2**32, 0]),
    ],
)
@pytest.mark.parametrize("binary", [False, True])
def test_an_empty_tensor_too_large_for_an_array_is_refused_naming_it(
    client: FlaskClient, path: str, name: str, datatype: str, shape: list[int], binary: bool
) -> None:
    """A shape with a 0 holds no element, so no size check refused it, but NumPy makes no array (not even an
    empty one) whose other dimensions multiply past the bytes it can address: these were 500s."""
    tensor: dict[str, Any] = {"name": name, "datatype": datatype, "shape": shape}
    if binary:
        head = json.dumps({"inputs": [{**tensor, "parameters": {"binary_data_size": 0}}]}).encode()
        response = client.post(
            path, data=head, headers={HEADER: str(len(head)), "Content-Type": "application/octet-stream"}
        )
    else:
        response = client.post(path, json={"inputs": [{**tensor, "data": []}]})
    assert_problem(response, 422, field=name, says="larger than any array")


def test_a_huge_shape_with_elements_is_still_refused_for_its_data(client: FlaskClient) -> None:
    """Without a 0 the element count, checked against the data sent, refuses a huge shape first (a 400)."""
    response = client.post(
        "/v2/models/softmax/infer",
        json={"inputs": [{"name": "logits", "datatype": "FP64", "shape": [2**40, 2**40], "data": [1, 2]}]},
    )
    assert_problem(response, 400, field="logits", says="but data has 2")


def test_an_empty_tensor_within_numpys_reach_is_answered_as_before(client: FlaskClient) -> None:
    """Just below NumPy's limit the shape is decoded, and the model's own rule answers it, as for [0, 5]."""
    for shape in ([0, 2**60 - 1], [0, 5]):
        response = client.post(
            "/v2/models/softmax/infer",
            json={"inputs": [{"name": "logits", "datatype": "FP64", "shape": shape, "data": []}]},
        )
        assert_problem(response, 422, field="logits", says="must not have an empty dimension")


def test_bool_bytes_other_than_0_and_1_are_refused(client: FlaskClient) -> None:
    body, headers = binary_body(
        [("logits", np.array([1.0, 2.0]), "FP64"), ("mask", np.array([1, 2]), "INT32")]
    )
    head_length = int(headers[HEADER])
    head = json.loads(body[:head_length])
    head["inputs"][1].update(datatype="BOOL", parameters={"binary_data_size": 2})
    new_head = json.dumps(head).encode()
    response = client.post(
        "/v2/models/softmax/infer",
        data=new_head + body[head_length:-8] + b"\x01\x02",
        headers={HEADER: str(len(new_head))},
    )
    assert_problem(response, 400, field="mask", says="0 (false) and 1 (true)")


@pytest.mark.parametrize(
    ("request_body", "status", "field", "says"),
    [
        ({"inputs": {}}, 400, "inputs", "must be a list"),
        ({"inputs": []}, 422, "logits", "required input tensor is missing"),
        (
            {"inputs": [{"name": "logit", "shape": [1], "datatype": "FP64", "data": [1]}]},
            422,
            "logit",
            "logits",
        ),
        (
            {"inputs": [{"name": "logits", "shape": [1], "datatype": "FP16", "data": [1]}]},
            422,
            "logits",
            "FP64",
        ),
        (
            {"inputs": [{"name": "logits", "shape": [1], "datatype": "COMPLEX", "data": [1]}]},
            400,
            "logits",
            "datatype",
        ),
        (
            {"inputs": [{"name": "logits", "shape": [3], "datatype": "FP64", "data": [1, 2]}]},
            400,
            "logits",
            "3",
        ),
        (
            {"inputs": [{"name": "logits", "shape": [2], "datatype": "FP64", "data": [1, "2"]}]},
            422,
            "logits",
            "string",
        ),
        (
            # A rank the model does not take: its rule and /v1's message (a 422), not a malformed shape.
            {"inputs": [{"name": "logits", "shape": [1, 1, 1, 1, 1], "datatype": "FP64", "data": [1]}]},
            422,
            "logits",
            "rank 1 to 4",
        ),
        (
            {"inputs": [{"name": "logits", "shape": [1] * 33, "datatype": "FP64", "data": [1]}]},
            400,
            "logits",
            "at most 32",
        ),
        (
            {"inputs": [{"name": "logits", "shape": [-1], "datatype": "FP64", "data": [1]}]},
            400,
            "logits",
            "shape",
        ),
        ({"inputs": [{"name": "logits", "shape": [1], "datatype": "FP64"}]}, 400, "logits", "data"),
        (
            {"inputs": [{"name": "mask", "shape": [1], "datatype": "BOOL", "data": [True]}]},
            422,
            "logits",
            "missing",
        ),
        (
            {
                "inputs": [{"name": "logits", "shape": [2], "datatype": "FP64", "data": [1, 2]}],
                "parameters": {"top_k": 0},
            },
            422,
            "top_k",
            "",
        ),
        (
            {
                "inputs": [{"name": "logits", "shape": [2], "datatype": "FP64", "data": [1, 2]}],
                "parameters": {"tmp": 1},
            },
            422,
            "tmp",
            "temperature",
        ),
        (
            {
                "inputs": [{"name": "logits", "shape": [2], "datatype": "FP64", "data": [1, 2]}],
                "outputs": [{"name": "x"}],
            },
            422,
            "outputs",
            "probabilities",
        ),
        (
            {"inputs": [{"name": "logits", "shape": [2, 0], "datatype": "FP64", "data": []}]},
            422,
            "logits",
            "empty",
        ),
        (
            {
                "inputs": [
                    {"name": "logits", "shape": [2], "datatype": "FP64", "data": [1, 2]},
                    {"name": "mask", "shape": [3], "datatype": "BOOL", "data": [True, True, False]},
                ]
            },
            422,
            "mask",
            "[3]",
        ),
    ],
)
def test_bad_json_requests_name_the_tensor_or_parameter(
    client: FlaskClient, request_body: dict[str, Any], status: int, field: str, says: str
) -> None:
    problem = assert_problem(
        client.post("/v2/models/softmax/infer", json=request_body), status, field=field, says=says
    )
    assert problem["error"] == problem["detail"]


@pytest.mark.parametrize("target", [2**32, 2**31, -(2**31) - 1])
def test_int32_json_targets_outside_int32_are_refused_not_wrapped(client: FlaskClient, target: int) -> None:
    # 2**32 wrapped to int32 is 0, a valid token id: it was once scored as token 0 with a 200.
    inputs = [
        json_tensor("logits", np.zeros((2, 3)), "FP64"),
        {"name": "targets", "shape": [2], "datatype": "INT32", "data": [1, target]},
    ]
    response = client.post("/v2/models/log-likelihood/infer", json={"inputs": inputs})
    assert_problem(response, 422, field="targets", says=f"{target}, outside the range of INT32")


def test_misspelt_inputs_and_outputs_get_a_suggestion_and_a_long_name_is_cut_short(
    client: FlaskClient,
) -> None:
    logits = json_tensor("logits", np.array([1.0, 2.0]), "FP64")
    response = client.post(
        "/v2/models/softmax/infer", json={"inputs": [logits], "outputs": [{"name": "probabilites"}]}
    )
    assert_problem(response, 422, field="outputs", says="Did you mean 'probabilities'?")
    response = client.post("/v2/models/softmax/infer", json={"inputs": [{**logits, "name": "logit"}]})
    says = "Did you mean 'logits'? This model's inputs are: logits"
    assert_problem(response, 422, field="logit", says=says)
    long_name = "x" * 100_000
    response = client.post("/v2/models/softmax/infer", json={"inputs": [{**logits, "name": long_name}]})
    assert_problem(response, 422, field="x" * 60)
    assert len(response.get_data()) < 2_000


def test_top_outputs_need_top_logprobs(client: FlaskClient) -> None:
    inputs = [
        json_tensor("logits", np.array([[1.0, 2.0]]), "FP64"),
        json_tensor("targets", np.array([1]), "INT64"),
    ]
    response = client.post(
        "/v2/models/log-likelihood/infer", json={"inputs": inputs, "outputs": [{"name": "top_tokens"}]}
    )
    assert_problem(response, 422, field="outputs", says="top_logprobs")


def test_the_work_limit_and_the_body_limit_hold_on_v2() -> None:
    app: Flask = create_app({"TESTING": True, "MAX_WORK_ELEMENTS": 1000})
    client = app.test_client()
    body, headers = binary_body([("logits", np.zeros((20, 50)), "FP32")])  # 1,000 probabilities
    assert client.post("/v2/models/softmax/infer", data=body, headers=headers).status_code == 200
    body, headers = binary_body([("logits", np.zeros((20, 51)), "FP32")])  # 1,020
    assert_problem(client.post("/v2/models/softmax/infer", data=body, headers=headers), 413, says="1,020")
    client = create_app({"TESTING": True, "MAX_CONTENT_LENGTH": 4096}).test_client()
    body, headers = binary_body([("logits", np.zeros((10, 60)), "FP64")])  # 4,800 bytes of data
    assert_problem(client.post("/v2/models/softmax/infer", data=body, headers=headers), 413, says="4,096")


def test_bodies_in_codings_other_than_gzip_and_deflate_are_refused(client: FlaskClient) -> None:
    # gzip and deflate are inflated: tests/web/test_request_compression.py
    response = client.post("/v2/models/softmax/infer", data=b"\x1f\x8b", headers={"Content-Encoding": "br"})
    assert_problem(response, 415, field="Content-Encoding")


def test_grouped_heads_alibi_and_softcap_on_v2_equal_v1(client: FlaskClient) -> None:
    rng = np.random.default_rng(12)
    arrays = {
        "query": rng.normal(size=(4, 3, 2)),
        "key": rng.normal(size=(2, 5, 2)),
        "value": rng.normal(size=(2, 5, 3)),
        "alibi_slopes": np.array([0.5, 0.25, 0.125, 0.0625]),
    }
    options = {"enable_gqa": True, "softcap": 2.0, "causal": True}
    v2 = read_answer(
        client.post(
            "/v2/models/attention/infer",
            json={
                "inputs": [json_tensor(name, array, "FP64") for name, array in arrays.items()],
                "parameters": options,
                "outputs": [{"name": "output"}, {"name": "weights"}],
            },
        )
    )
    v1 = _v1(client, "/v1/attention", {**{name: a.tolist() for name, a in arrays.items()}, **options})
    for name in ("output", "weights"):
        assert_same(v2[name], as_v1(v1[name]))


def test_a_softcap_past_float32_is_a_422_naming_softcap_on_v2(client: FlaskClient) -> None:
    # FP32 inputs compute in float32, where 1e39 is inf: refused by name, as a scale would be (it was a
    # 422 blaming alibi_slopes, which the request never sent).
    arrays = {"query": np.array([0.0, 1.0]), "key": np.eye(2), "value": np.array([[6.0, 0.0], [0.0, 3.0]])}
    response = client.post(
        "/v2/models/attention/infer",
        json={
            "inputs": [json_tensor(name, array, "FP32") for name, array in arrays.items()],
            "parameters": {"softcap": 1e39},
        },
    )
    problem = assert_problem(response, 422, field="softcap")
    assert problem["error"] == problem["detail"]


def test_an_overflow_is_the_same_problem_on_v2_as_on_v1(client: FlaskClient) -> None:
    # /v2 has no rotary (an object, not a scalar parameter): it is refused by name; an overflow of the
    # scores is /v1's numerical-overflow problem, member for member, plus the protocol's error.
    arrays = {
        "query": np.array([[1.7e308, 1.7e308]]),
        "key": np.ones((2, 2)),
        "value": np.array([[1.0], [2.0]]),
    }
    v1 = assert_problem(client.post("/v1/attention", json={k: a.tolist() for k, a in arrays.items()}), 422)
    body, headers = binary_body([(name, array, "FP64") for name, array in arrays.items()])
    v2 = assert_problem(client.post("/v2/models/attention/infer", data=body, headers=headers), 422)
    assert v1["type"].endswith(":numerical-overflow")
    assert {k: v2[k] for k in ("type", "title", "status", "detail", "errors")} == {
        k: v1[k] for k in ("type", "title", "status", "detail", "errors")
    }
    assert v2["error"] == v2["detail"]
    body, headers = binary_body(
        [(name, array, "FP64") for name, array in arrays.items()], parameters={"rotary": {}}
    )
    assert_problem(client.post("/v2/models/attention/infer", data=body, headers=headers), 422, field="rotary")


def test_nested_json_data_must_have_the_declared_shape(client: FlaskClient) -> None:
    logits = np.array([[2.0, 1.0, 0.1], [0.0, 3.0, 0.5]])
    expected = as_v1(_v1(client, "/v1/softmax", {"logits": logits.tolist()})["probabilities"])

    def infer(data: Any, shape: list[int]) -> TestResponse:
        tensor = {"name": "logits", "shape": shape, "datatype": "FP64", "data": data}
        return client.post(
            "/v2/models/softmax/infer", json={"inputs": [tensor], "outputs": [{"name": "probabilities"}]}
        )

    # Flat (row-major, as the protocol sends it) and nested as declared: the same answer as /v1.
    for data in (logits.reshape(-1).tolist(), logits.tolist()):
        assert_same(read_answer(infer(data, [2, 3]))["probabilities"], expected)
    # Six numbers nested as [3, 2] for a tensor declared [2, 3] were once read as [2, 3] with a 200.
    for data, nested in (
        (logits.reshape(3, 2).tolist(), "[3, 2]"),
        ([logits.reshape(-1).tolist()], "[1, 6]"),
    ):
        problem = assert_problem(infer(data, [2, 3]), 400, field="logits", says=f"nested as {nested}")
        assert "[2, 3]" in problem["errors"]["logits"][0]
        assert problem["error"] == problem["detail"]
    # Nested deeper than the shape's rank is the same structural fault: it was a 422 ("rank 2 or more")
    for data, shape in (([[2.0, 1.0, 0.1], [0.0, 3.0, 0.5]], [6]), ([logits.tolist()], [2, 3])):
        problem = assert_problem(infer(data, shape), 400, field="logits", says="nested deeper than shape")
        assert str(shape) in problem["errors"]["logits"][0]


@pytest.mark.parametrize(
    "parameters", [{"shared_memory_region": "r", "shared_memory_byte_size": 24}, {"shared_memory_offset": 0}]
)
def test_a_shared_memory_input_is_refused_by_name(client: FlaskClient, parameters: dict[str, Any]) -> None:
    # An input naming a shared-memory region beside its JSON data was answered from the data (a 200), and
    # tritonclient's shared-memory input (no data) was told it had neither data nor binary_data_size.
    named = sorted(parameters)[0]
    for tensor in (
        {
            "name": "logits",
            "shape": [3],
            "datatype": "FP64",
            "data": [1.0, 3.0, 2.0],
            "parameters": parameters,
        },
        {"name": "logits", "shape": [3], "datatype": "FP64", "parameters": parameters},
    ):
        response = client.post("/v2/models/softmax/infer", json={"inputs": [tensor]})
        problem = assert_problem(response, 422, field="logits", says=named)
        assert "no shared memory" in problem["errors"]["logits"][0]


def test_other_input_parameters_are_read_past_as_mlserver_sends_them(client: FlaskClient) -> None:
    # MLServer's NumpyCodec labels every input {"content_type": "np"}; the protocol lets a server ignore what
    # it does not use (a review found the first version of the shared-memory refusal refused these too).
    tensor = {
        "name": "logits",
        "shape": [2],
        "datatype": "FP64",
        "data": [1.0, 2.0],
        "parameters": {"content_type": "np", "binary_data": False},
    }
    answer = read_answer(client.post("/v2/models/softmax/infer", json={"inputs": [tensor]}))
    assert answer["probabilities"].tolist() == pytest.approx(
        [0.2689414213699951, 0.7310585786300049], rel=1e-12
    )


@pytest.mark.parametrize(
    ("parameters", "named"),
    [({"classification": 2}, "classification"), ({"binary_data": False, "shared_memory_region": "r"}, None)],
)
def test_output_parameters_other_than_binary_data_are_refused_by_name(
    client: FlaskClient, parameters: dict[str, Any], named: str | None
) -> None:
    # classification (Triton's extension, not among this server's) was ignored: raw scores with a 200.
    named = named or next(iter(set(parameters) - {"binary_data"}))
    logits = json_tensor("logits", np.array([[1.0, 3.0, 2.0]]), "FP64")
    outputs = [{"name": "probabilities"}, {"name": "argmax", "parameters": parameters}]
    response = client.post("/v2/models/softmax/infer", json={"inputs": [logits], "outputs": outputs})
    problem = assert_problem(response, 422, field="outputs", says=f"'{named}'")
    message = problem["errors"]["outputs"][0]
    assert "'argmax'" in message
    assert "binary_data" in message
    assert problem["error"] == problem["detail"]


def test_binary_data_stays_the_output_parameter_it_was(client: FlaskClient) -> None:
    # The contract's BinaryData schema (additionalProperties: false) is what the views now enforce.
    logits = json_tensor("logits", np.array([[1.0, 3.0, 2.0]]), "FP64")
    outputs = [
        {"name": "argmax", "parameters": {"binary_data": True}},
        {"name": "entropy", "parameters": {"binary_data": False}},
        {"name": "temperature", "parameters": {}},
        {"name": "probabilities"},
    ]
    response = client.post("/v2/models/softmax/infer", json={"inputs": [logits], "outputs": outputs})
    answer = read_answer(response)
    assert answer["argmax"].tolist() == [1]
    head = json.loads(response.get_data()[: int(response.headers[HEADER])])
    binary = {output["name"]: "parameters" in output for output in head["outputs"]}
    assert binary == {"argmax": True, "entropy": False, "temperature": False, "probabilities": False}


@pytest.mark.parametrize("value", [1e39, -3.5e38, 3.4028236e38])  # the last just past FP32's largest
def test_fp32_json_data_beyond_fp32_is_named_as_such(client: FlaskClient, value: float) -> None:
    # It became inf in the cast and was refused as "a non-finite number (NaN or Infinity)", which it is not.
    inputs = [{"name": "logits", "shape": [2], "datatype": "FP32", "data": [1.0, value]}]
    response = client.post("/v2/models/softmax/infer", json={"inputs": inputs})
    problem = assert_problem(response, 422, field="logits", says=f"{value:.9g}, beyond the range of FP32")
    assert "(±3.40282347e+38)" in problem["detail"]
