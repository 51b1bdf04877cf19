"""The contract: valid OpenAPI 3.1, generated from the schemas, served byte for byte, and honoured.

schemathesis generates requests from the committed ``openapi.yaml`` (valid and invalid ones) and
sends them to the app in-process; no response may be a server error or break the contract.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import schemathesis
import yaml
from flask.testing import FlaskClient
from hypothesis import HealthCheck, settings
from openapi_spec_validator import validate
from scipy.special import log_softmax as scipy_log_softmax
from scipy.special import softmax as scipy_softmax

from service import create_app
from service.contract import render_contract
from service.protocols.declarations.model import ModelDeclaration, declared_models
from service.protocols.v1 import examples
from service.web.statuses import STATUSES
from tests.conftest import CONTRACT_PATH
from tests.references import reference_attention, reference_sample, reference_sequence
from tests.tolerance import EXAMPLE_RTOL, assert_json_close


def test_contract_is_valid_openapi_3_1() -> None:
    spec = yaml.safe_load(CONTRACT_PATH.read_text())
    assert spec["openapi"] == "3.1.0"
    validate(spec)


COMPUTE_PATHS = (
    "/v1/attention",
    "/v1/softmax",
    "/v1/log-likelihood",
    "/v1/multi-head-attention",
    "/v1/positional-encoding",
    "/v1/sample",
)


def test_committed_contract_is_not_stale() -> None:
    assert CONTRACT_PATH.read_text() == render_contract(), "openapi.yaml is stale: run `make openapi`"


def test_served_yaml_is_byte_identical_to_the_committed_file(client: FlaskClient) -> None:
    response = client.get("/openapi.yaml")
    assert response.status_code == 200
    assert response.mimetype == "application/yaml"
    assert response.get_data() == CONTRACT_PATH.read_bytes()


def test_served_json_is_the_same_document(client: FlaskClient) -> None:
    response = client.get("/openapi.json")
    assert response.get_json() == yaml.safe_load(CONTRACT_PATH.read_text())


def test_every_operation_documents_its_errors() -> None:
    spec = yaml.safe_load(CONTRACT_PATH.read_text())
    for path in COMPUTE_PATHS:
        responses = spec["paths"][path]["post"]["responses"]
        assert {"200", "400", "413", "415", "422", "default"} <= set(responses)
    problem = spec["components"]["responses"]["UNPROCESSABLE_CONTENT"]["content"]
    assert list(problem) == ["application/problem+json"]


def test_response_names_do_not_depend_on_the_python_version() -> None:
    # http.HTTPStatus renamed 413 and 422 in Python 3.13; the contract names its responses from
    # service.web.statuses, in RFC 9110's words, whichever Python generates it.
    spec = yaml.safe_load(CONTRACT_PATH.read_text())
    names = set(spec["components"]["responses"])
    assert {"CONTENT_TOO_LARGE", "UNPROCESSABLE_CONTENT"} <= names
    assert not names & {"REQUEST_ENTITY_TOO_LARGE", "UNPROCESSABLE_ENTITY"}
    assert names <= {name for name, _ in STATUSES.values()} | {"DEFAULT_ERROR"}
    assert spec["components"]["responses"]["CONTENT_TOO_LARGE"]["description"] == "Content Too Large"


def _example(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    operation = yaml.safe_load(CONTRACT_PATH.read_text())["paths"][path]["post"]
    request = operation["requestBody"]["content"]["application/json"]["example"]
    return request, operation["responses"]["200"]["content"]["application/json"]["example"]


@pytest.mark.parametrize("path", COMPUTE_PATHS)
def test_documented_examples_are_what_the_endpoints_answer(client: FlaskClient, path: str) -> None:
    request, response = _example(path)
    assert_json_close(client.post(path, json=request).get_json(), response, rel=EXAMPLE_RTOL)


@pytest.mark.parametrize("model", list(declared_models().values()), ids=list(declared_models()))
def test_example_digits_are_the_same_on_any_machine(model: ModelDeclaration) -> None:
    # Another CPU's arithmetic path may move a result by a few units in the last place (~1e-16). No
    # example may sit so close to a rounding boundary that such a move changes its printed digits: here
    # a move of 1e-14 relative (about 50 units in the last place) keeps every rounded digit.
    for value in _floats(examples.computed_example_response(model)):
        rounded = examples.round_floats(value)
        for moved in (value * (1 - 1e-14), value * (1 + 1e-14)):
            assert examples.round_floats(moved) == rounded, f"{value!r} is too close to a rounding boundary"


def _floats(value: Any) -> list[float]:
    if isinstance(value, float):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [number for item in items for number in _floats(item)]


def test_documented_examples_agree_with_the_references() -> None:
    # The examples are computed by the kernels when the contract is generated, and rounded to
    # EXAMPLE_DIGITS significant digits; check them independently.
    request, response = _example("/v1/attention")
    expected = reference_attention(
        np.array([request["query"]], dtype=float),
        np.array(request["key"], dtype=float),
        np.array(request["value"], dtype=float),
    )
    np.testing.assert_allclose(response["weights"], expected.weights[0], rtol=EXAMPLE_RTOL)
    np.testing.assert_allclose(response["output"], expected.output[0], rtol=EXAMPLE_RTOL)
    assert response["weights"] == pytest.approx([0.3302, 0.6698], abs=5e-5)  # the course's worked example

    request, response = _example("/v1/softmax")
    logits = np.array(request["logits"]) / request["temperature"]
    np.testing.assert_allclose(response["probabilities"], scipy_softmax(logits), rtol=EXAMPLE_RTOL)

    request, response = _example("/v1/log-likelihood")
    sequence = reference_sequence(
        np.array(request["logits"]),
        np.array(request["targets"]),
        shift=request["shift"],
        temperature=1.0,
        top_k=0,
    )
    assert response["log_likelihood"] == pytest.approx(sequence["log_likelihood"], rel=EXAMPLE_RTOL)
    assert response["token_logprobs"][1:] == pytest.approx(sequence["logprobs"][1:], rel=EXAMPLE_RTOL)

    # Identity projections, two heads of one feature each, causal: worked by hand. Head 0 sees feature 0:
    # token 1's query (0) scores both keys 0, weights [1/2, 1/2]; head 1 sees feature 1: scores [0, 1].
    request, response = _example("/v1/multi-head-attention")
    sigmoid = 1 / (1 + math.exp(-1))
    expected_weights = [[[1, 0], [0.5, 0.5]], [[1, 0], [1 - sigmoid, sigmoid]]]
    np.testing.assert_allclose(response["weights"], expected_weights, rtol=EXAMPLE_RTOL)
    np.testing.assert_allclose(response["output"], [[1, 0], [0.5, sigmoid]], rtol=EXAMPLE_RTOL)

    request, response = _example("/v1/positional-encoding")
    assert response["encoding"][1] == pytest.approx(
        [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)], rel=EXAMPLE_RTOL
    )

    request, response = _example("/v1/sample")
    assert (
        response["tokens"]
        == reference_sample([request["logits"]], num_samples=request["num_samples"], seed=request["seed"])[0]
    )
    expected_logprobs = scipy_log_softmax(request["logits"])[response["tokens"]]
    np.testing.assert_allclose(response["logprobs"], expected_logprobs, rtol=EXAMPLE_RTOL)
    assert response["seed"] == request["seed"]


schema = schemathesis.openapi.from_path(CONTRACT_PATH)
schema.app = create_app({"TESTING": False})


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_generated_requests_get_no_server_error_and_honour_the_contract(case: Any) -> None:
    # Schema-valid is not always acceptable here: that the shapes of query, key and value fit
    # together is beyond JSON Schema, so a 422 for a generated shape mismatch is correct.
    case.call_and_validate(excluded_checks=[schemathesis.checks.positive_data_acceptance])
