"""The contract: valid OpenAPI 3.1, generated from the schemas, served byte for byte, and honoured.

schemathesis generates requests from the committed ``openapi.yaml`` (valid and invalid ones) and
sends them to the app in-process; no response may be a server error or break the contract.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
import yaml
from flask.testing import FlaskClient
from hypothesis import HealthCheck, settings
from openapi_spec_validator import validate

from service import create_app
from service.contract import render_contract
from tests.conftest import CONTRACT_PATH


def test_contract_is_valid_openapi_3_1() -> None:
    spec = yaml.safe_load(CONTRACT_PATH.read_text())
    assert spec["openapi"] == "3.1.0"
    validate(spec)


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
    for path in ("/v1/attention", "/v1/softmax", "/v1/log-likelihood"):
        responses = spec["paths"][path]["post"]["responses"]
        assert {"200", "400", "413", "415", "422", "default"} <= set(responses)
    problem = spec["components"]["responses"]["UNPROCESSABLE_ENTITY"]["content"]
    assert list(problem) == ["application/problem+json"]


@pytest.mark.parametrize("path", ["/v1/attention", "/v1/softmax", "/v1/log-likelihood"])
def test_documented_examples_are_what_the_endpoints_answer(client: FlaskClient, path: str) -> None:
    operation = yaml.safe_load(CONTRACT_PATH.read_text())["paths"][path]["post"]
    request = operation["requestBody"]["content"]["application/json"]["example"]
    response = operation["responses"]["200"]["content"]["application/json"]["example"]
    assert client.post(path, json=request).get_json() == response


schema = schemathesis.openapi.from_path(CONTRACT_PATH)
schema.app = create_app({"TESTING": False})


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_generated_requests_get_no_server_error_and_honour_the_contract(case: Any) -> None:
    # Schema-valid is not always acceptable here: that the shapes of query, key and value fit
    # together is beyond JSON Schema, so a 422 for a generated shape mismatch is correct.
    case.call_and_validate(excluded_checks=[schemathesis.checks.positive_data_acceptance])
