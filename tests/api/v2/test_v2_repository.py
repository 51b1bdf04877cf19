"""Triton's model configuration and repository index on /v2, in process (tritonclient calls them in
tests/deploy/test_tritonclient.py): each model's configuration states its metadata's tensors in Triton's
terms."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from service import create_app
from tests.problems import assert_problem

# Triton's names for the protocol's datatypes (model_config.proto's DataType).
TRITON_TYPES = {
    "BOOL": "TYPE_BOOL",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "FP32": "TYPE_FP32",
    "FP64": "TYPE_FP64",
}


def _models(client: FlaskClient) -> list[str]:
    index = client.post("/v2/repository/index").get_json()
    return [entry["name"] for entry in index]


def test_the_index_lists_every_model_ready_in_version_1(client: FlaskClient) -> None:
    index = client.post("/v2/repository/index").get_json()
    names = [entry["name"] for entry in index]
    assert {"attention", "softmax", "log-likelihood", "sample"} <= set(names)
    assert len(names) == len(set(names))
    assert all(entry["version"] == "1" and entry["state"] == "READY" for entry in index)
    for name in names:  # each one listed is served
        assert client.get(f"/v2/models/{name}/ready").get_json() == {"name": name, "ready": True}
    assert client.post("/v2/repository/index", json={"ready": True}).get_json() == index
    assert client.post("/v2/repository/index", json={}).get_json() == index


def test_an_index_request_over_4_kib_is_413_unparsed(client: FlaskClient) -> None:
    """It is parsed on the worker's loop, so it stays small: a 16 MiB one took the loop 3.5 s."""
    index = client.post("/v2/repository/index").get_json()
    padded = b'{"ready": true}'.ljust(4096)
    assert (
        client.post("/v2/repository/index", data=padded, content_type="application/json").get_json() == index
    )
    refused = client.post("/v2/repository/index", data=padded + b" ", content_type="application/json")
    problem = assert_problem(refused, 413, says="4,097 bytes")
    assert problem["type"].endswith(":body-too-large")


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"ready": "yes"}, 422, "ready"),
        ({"raedy": True}, 422, "raedy"),
        ([1], 400, "body"),
        (b"{not json", 400, "body"),
    ],
)
def test_a_bad_index_request_is_refused_naming_the_field(
    client: FlaskClient, body: object, status: int, field: str
) -> None:
    if isinstance(body, bytes):
        response = client.post("/v2/repository/index", data=body, content_type="application/json")
    else:
        response = client.post("/v2/repository/index", json=body)
    assert_problem(response, status, field=field)


@pytest.mark.parametrize("label", ["text/plain", "application/x-www-form-urlencoded"])
def test_an_index_request_labelled_as_text_or_a_form_is_415(client: FlaskClient, label: str) -> None:
    response = client.post("/v2/repository/index", data=b"{}", content_type=label)
    assert_problem(response, 415)
    assert response.headers["Accept-Post"] == "application/json"
    assert client.post("/v2/repository/index", data=b"").status_code == 200  # no body: tritonclient's


@pytest.mark.parametrize("prefix", ["", "/versions/1"])
def test_every_model_config_states_its_metadata_in_tritons_terms(client: FlaskClient, prefix: str) -> None:
    for name in _models(client):
        config = client.get(f"/v2/models/{name}{prefix}/config").get_json()
        metadata = client.get(f"/v2/models/{name}").get_json()
        assert config["name"] == name
        assert config["max_batch_size"] == 0
        assert config["platform"] == config["backend"] == metadata["platform"]
        assert config["version_policy"] == {"specific": {"versions": [1]}}
        for section, tensors in (("input", metadata["inputs"]), ("output", metadata["outputs"])):
            assert [(t["name"], t["data_type"], t["dims"], t["format"]) for t in config[section]] == [
                (t["name"], TRITON_TYPES[t["datatype"]], t["shape"], "FORMAT_NONE") for t in tensors
            ]


def test_a_config_says_which_inputs_are_optional(client: FlaskClient) -> None:
    config = client.get("/v2/models/attention/config").get_json()
    optional = {tensor["name"]: tensor["optional"] for tensor in config["input"]}
    assert optional["query"] is optional["key"] is optional["value"] is False
    assert optional["mask"] is optional["bias"] is True
    config = client.get("/v2/models/log-likelihood/config").get_json()
    assert {tensor["name"]: tensor["optional"] for tensor in config["input"]} == {
        "logits": False,
        "targets": False,
    }


@pytest.mark.parametrize(
    ("path", "field", "says"),
    [
        ("/v2/models/gpt/config", "model", "'gpt'; the models are attention"),
        ("/v2/models/gpt/versions/1/config", "model", "'gpt'"),
        ("/v2/models/softmax/versions/2/config", "version", "no version '2'; its only version is 1"),
    ],
)
def test_the_config_of_an_unknown_model_or_version_is_404_naming_it(
    client: FlaskClient, path: str, field: str, says: str
) -> None:
    problem = assert_problem(client.get(path), 404, field=field, says=says)
    assert problem["error"] == problem["detail"]


def test_config_and_index_need_no_key() -> None:
    client = create_app({"TESTING": True, "API_KEYS": ["secret"]}).test_client()
    assert client.get("/v2/models/softmax/config").status_code == 200
    assert client.post("/v2/repository/index").status_code == 200
    assert client.post("/v2/models/softmax/infer", json={}).status_code == 401


def test_every_input_states_the_ranks_it_takes(client: FlaskClient) -> None:
    ranks = {}
    for name in _models(client):
        for tensor in client.get(f"/v2/models/{name}").get_json()["inputs"]:
            parameters = tensor["parameters"]
            assert tensor["shape"] == [-1] * parameters["min_rank"]
            assert parameters["min_rank"] <= parameters["max_rank"] <= 4
            ranks[name, tensor["name"]] = (
                parameters["min_rank"],
                parameters["max_rank"],
                parameters.get("axes"),
            )
    assert ranks["attention", "query"] == (1, 4, "[..., n, d_k]")  # a 1-D query is one query row
    assert ranks["attention", "key"][:2] == (2, 4)
    assert ranks["multi-head-attention", "w_q"][:2] == (2, 2)  # a projection matrix, never batched
    assert ranks["positional-encoding", "positions"][:2] == (1, 1)
