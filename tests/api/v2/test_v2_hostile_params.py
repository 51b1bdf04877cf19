"""/v2 parameters, outputs and tensors as a hostile or careless client sends them: every refusal names the
field the client wrote, with /v1's message for /v1's rule, and nothing the client did not ask for changes the
computation. References are NumPy's own arithmetic or /v1's answer to the same request.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from tests.problems import assert_problem

HEADER = "Inference-Header-Content-Length"
QUERY = np.array([[1.0, 0.0], [0.0, 1.0]])
KEY = np.array([[1.0, 0.0], [0.0, 1.0]])
VALUE = np.array([[6.0, 0.0], [0.0, 3.0]])
ROTARY_PATHS = ("rotary.base", "rotary.style", "rotary.dim", "rotary.query_offset", "rotary.key_offset")


def tensor(name: str, array: Any, datatype: str = "FP64") -> dict[str, Any]:
    values = np.asarray(array)
    return {
        "name": name,
        "shape": list(values.shape),
        "datatype": datatype,
        "data": values.reshape(-1).tolist(),
    }


ATTENTION_INPUTS = [tensor("query", QUERY), tensor("key", KEY), tensor("value", VALUE)]


def infer(client: FlaskClient, model: str, body: dict[str, Any]) -> TestResponse:
    return client.post(f"/v2/models/{model}/infer", json=body)


def outputs_of(response: TestResponse) -> dict[str, np.ndarray]:
    assert response.status_code == 200, response.get_data(as_text=True)
    answer = response.get_json()
    return {
        output["name"]: np.array(
            [np.nan if value is None else value for value in output["data"]], dtype=np.float64
        ).reshape(output["shape"])
        for output in answer["outputs"]
    }


def reference_attention(query: np.ndarray, key: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, ...]:
    """Scores [n, m], weights [n, m] and output [n, d_v] of plain scaled dot-product attention."""
    scores = query @ key.T / np.sqrt(query.shape[-1])
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return scores, weights, weights @ value


def test_null_rotary_parameters_are_absent_and_leave_rotary_off(client: FlaskClient) -> None:
    """The contract documents each rotary.* parameter as nullable and null as absent (a client generated from
    it sends null for every option left unset); a null must not make the rotary object and turn rotary on."""
    _, weights, output = reference_attention(QUERY, KEY, VALUE)
    parameters = dict.fromkeys(ROTARY_PATHS)
    answer = outputs_of(infer(client, "attention", {"inputs": ATTENTION_INPUTS, "parameters": parameters}))
    np.testing.assert_allclose(answer["weights"], weights, rtol=1e-12, atol=0)
    np.testing.assert_allclose(answer["output"], output, rtol=1e-12, atol=0)


def test_include_null_with_listed_outputs_answers_them(client: FlaskClient) -> None:
    """include: null is include absent; the outputs listed are answered, not silently dropped."""
    scores, _, _ = reference_attention(QUERY, KEY, VALUE)
    response = infer(
        client,
        "attention",
        {"inputs": ATTENTION_INPUTS, "parameters": {"include": None}, "outputs": [{"name": "scores"}]},
    )
    answer = outputs_of(response)
    assert list(answer) == ["scores"]
    np.testing.assert_allclose(answer["scores"], scores, rtol=1e-12, atol=0)


@pytest.mark.parametrize("listed", [["cos"], ["cos", "encoding"]])
def test_a_table_output_of_a_sinusoidal_encoding_is_refused_naming_outputs(
    client: FlaskClient, listed: list[str]
) -> None:
    """The client listed the output cos and sent no include: the refusal names outputs and why, not an
    include the client never wrote."""
    body = {
        "inputs": [],
        "parameters": {"kind": "sinusoidal", "length": 3, "d_model": 4},
        "outputs": [{"name": name} for name in listed],
    }
    problem = assert_problem(infer(client, "positional-encoding", body), 422, field="outputs")
    assert "include" not in problem["errors"], problem
    assert problem["errors"]["outputs"] == ["output 'cos' is answered for kind rotary only."]


@pytest.mark.parametrize("top_logprobs", [None, 0])
@pytest.mark.parametrize("listed", ["top_logprobs", "top_tokens"])
def test_a_top_output_without_top_logprobs_says_why(
    client: FlaskClient, listed: str, top_logprobs: int | None
) -> None:
    body = {
        "inputs": [tensor("logits", [[0.1, 0.2, 0.3]]), tensor("targets", [2], "INT64")],
        "parameters": {"top_logprobs": top_logprobs},
        "outputs": [{"name": listed}],
    }
    problem = assert_problem(infer(client, "log-likelihood", body), 422, field="outputs")
    assert problem["errors"]["outputs"] == [
        f"output {listed!r} needs the top_logprobs parameter to be at least 1."
    ]


def _v1_errors(client: FlaskClient, body: dict[str, Any]) -> dict[str, list[str]]:
    problem = assert_problem(client.post("/v1/attention", json=body), 422)
    errors: dict[str, list[str]] = problem["errors"]
    return errors


def _binary(tensors: list[tuple[str, np.ndarray]]) -> tuple[bytes, dict[str, str]]:
    chunks = [np.ascontiguousarray(array, dtype="<f8").tobytes() for _, array in tensors]
    inputs = [
        {
            "name": name,
            "shape": list(array.shape),
            "datatype": "FP64",
            "parameters": {"binary_data_size": len(c)},
        }
        for (name, array), c in zip(tensors, chunks, strict=True)
    ]
    head = json.dumps({"inputs": inputs}).encode()
    return head + b"".join(chunks), {HEADER: str(len(head)), "Content-Type": "application/octet-stream"}


@pytest.mark.parametrize("framing", ["json", "binary"])
def test_a_query_of_rank_five_gets_the_v1_rank_message(client: FlaskClient, framing: str) -> None:
    """Rank 5 breaks the same rule on both protocols (query takes rank 1 to 4): the same 422 and message,
    not a /v2-only 400 about the shape list."""
    query = np.ones((1, 1, 1, 2, 2))
    expected = _v1_errors(client, {"query": query.tolist(), "key": KEY.tolist(), "value": VALUE.tolist()})
    problem = assert_problem(_infer_with_query(client, framing, query), 422, field="query")
    assert problem["errors"] == expected


@pytest.mark.parametrize("framing", ["json", "binary"])
def test_an_empty_dimension_gets_the_v1_message(client: FlaskClient, framing: str) -> None:
    expected = _v1_errors(client, {"query": [[]], "key": KEY.tolist(), "value": VALUE.tolist()})
    query = np.ones((2, 0))
    problem = assert_problem(_infer_with_query(client, framing, query), 422, field="query")
    assert problem["errors"] == expected


def _infer_with_query(client: FlaskClient, framing: str, query: np.ndarray) -> TestResponse:
    """An attention infer of ``query`` with the worked example's key and value, as JSON or binary tensors."""
    if framing == "json":
        return infer(client, "attention", {"inputs": [tensor("query", query), *ATTENTION_INPUTS[1:]]})
    body, headers = _binary([("query", query), ("key", KEY), ("value", VALUE)])
    return client.post("/v2/models/attention/infer", data=body, headers=headers)


LONG_NAME = "rotary." + "x" * 1_000_000


@pytest.mark.parametrize("protocol", ["v1", "v2"])
def test_a_megabyte_parameter_name_is_not_echoed_whole(client: FlaskClient, protocol: str) -> None:
    """Input tensor names are cut to 60 characters in messages so a megabyte of name is not echoed three
    times; an unknown parameter (or /v1 field) must be too: the refusal stays small whatever the name."""
    if protocol == "v2":
        response = infer(client, "attention", {"inputs": ATTENTION_INPUTS, "parameters": {LONG_NAME: 1}})
    else:
        body = {"query": QUERY.tolist(), "key": KEY.tolist(), "value": VALUE.tolist(), LONG_NAME: 1}
        response = client.post("/v1/attention", json=body)
    assert_problem(response, 422)
    assert len(response.get_data()) < 16_384


@pytest.mark.parametrize("protocol", ["v1", "v2"])
def test_a_long_window_is_refused_by_its_length_before_its_entries(
    client: FlaskClient, protocol: str
) -> None:
    """window takes two entries; a list of a million is refused for its length without a message built per
    entry (each entry's check is what makes a 16 MiB window list cost tens of seconds of CPU)."""
    window = [-1, -1, -1]
    if protocol == "v2":
        response = infer(client, "attention", {"inputs": ATTENTION_INPUTS, "parameters": {"window": window}})
    else:
        body = {"query": QUERY.tolist(), "key": KEY.tolist(), "value": VALUE.tolist(), "window": window}
        response = client.post("/v1/attention", json=body)
    problem = assert_problem(response, 422, field="window")
    assert problem["errors"]["window"] == ["Length must be 2."]


@pytest.mark.parametrize("parameters", ["binary", ["binary_data"], 7])
def test_output_parameters_that_are_not_an_object_are_refused_saying_so(
    client: FlaskClient, parameters: Any
) -> None:
    body = {"inputs": ATTENTION_INPUTS, "outputs": [{"name": "output", "parameters": parameters}]}
    problem = assert_problem(infer(client, "attention", body), 400, field="outputs")
    assert problem["errors"]["outputs"] == ["outputs[0].parameters must be an object."]


@pytest.mark.parametrize("protocol", ["v1", "v2"])
def test_a_large_body_is_decoded_off_the_workers_loop(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch, protocol: str
) -> None:
    """/v1 parses and loads a body over DECODE_ON_THREAD_BYTES on the decoding thread, so the gevent loop
    keeps answering /livez; /v2's JSON tensors (and a million-entry window parameter, 5.9 s of CPU) are
    decoded on the loop. Under gevent both must hand the decoding to the thread."""
    import service.web.admission as admission_module

    handed: list[bool] = []

    def on_decode_thread(self: admission_module.Admission, decode: Any) -> Any:
        handed.append(True)
        return decode()

    monkeypatch.setattr(admission_module, "under_gevent", lambda: True)
    monkeypatch.setattr(admission_module.Admission, "on_decode_thread", on_decode_thread)
    logits = np.random.default_rng(7).normal(size=(64, 2048))
    assert logits.size * 18 > admission_module.DECODE_ON_THREAD_BYTES  # the JSON text is over the threshold
    if protocol == "v2":
        response = infer(client, "softmax", {"inputs": [tensor("logits", logits)]})
    else:
        response = client.post("/v1/softmax", json={"logits": logits.tolist()})
    assert response.status_code == 200, response.get_data(as_text=True)[:300]
    assert handed == [True]


@pytest.mark.parametrize("include", [[{}], [[1]], [None], ["scores", {"a": 1}]])
def test_an_include_of_objects_or_lists_with_listed_outputs_is_422_naming_include(
    client: FlaskClient, include: list[Any]
) -> None:
    """With outputs listed, the include the client sent is merged with what they need: an object or a list
    in it made that a 500 (unhashable), where /v1, and /v2 without outputs, refuse it naming include."""
    response = infer(
        client,
        "attention",
        {"inputs": ATTENTION_INPUTS, "parameters": {"include": include}, "outputs": [{"name": "scores"}]},
    )
    assert_problem(response, 422, field="include")
