"""API keys: off by default; when configured, /v1/* needs a valid bearer key and nothing else does."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask.testing import FlaskClient

from service import create_app
from service.protocols.declarations.attention import EXAMPLE as ATTENTION_EXAMPLE_REQUEST
from service.settings import Settings
from service.web.api_keys import SECURITY_SCHEME, is_protected, key_is_valid
from tests.conftest import ContractCheckingClient
from tests.problems import assert_problem

KEYS = ["first-key-0123", "second-key-4567"]
SEED = ATTENTION_EXAMPLE_REQUEST  # the course's worked example


@pytest.fixture
def keyed() -> FlaskClient:
    app = create_app({"TESTING": True, "API_KEYS": KEYS})
    app.test_client_class = ContractCheckingClient
    return app.test_client()


def test_without_keys_the_api_is_open(client: FlaskClient) -> None:
    assert client.post("/v1/attention", json=SEED).status_code == 200


@pytest.mark.parametrize("key", KEYS)
def test_every_configured_key_is_accepted(keyed: FlaskClient, key: str) -> None:
    response = keyed.post("/v1/attention", json=SEED, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200
    assert response.get_json()["weights"] == pytest.approx([0.3302384506733431, 0.6697615493266569])


@pytest.mark.parametrize(
    ("authorization", "error"),
    [
        (None, None),
        ("Bearer wrong-key", "invalid_token"),
        ("Bearer first-key-012", "invalid_token"),  # a prefix of a real key
        ("Basic Zmlyc3Qta2V5LTAxMjM=", None),
        ("Bearer ", None),
    ],
)
def test_missing_or_wrong_keys_get_401_with_a_challenge(
    keyed: FlaskClient, authorization: str | None, error: str | None
) -> None:
    headers = {"X-Request-ID": "auth-1"} | ({"Authorization": authorization} if authorization else {})
    response = keyed.post("/v1/softmax", json={"logits": [1.0]}, headers=headers)
    body = assert_problem(response, 401)
    assert body["type"] == "urn:attention-service:problem:unauthorized"
    assert body["request_id"] == "auth-1"
    challenge = response.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer ")
    assert ("invalid_token" in challenge) == (error is not None)


@pytest.mark.parametrize(
    "path", ["/livez", "/readyz", "/healthz", "/metrics", "/openapi.yaml", "/openapi.json", "/"]
)
def test_probes_metrics_and_contract_stay_open(keyed: FlaskClient, path: str) -> None:
    assert keyed.get(path).status_code == 200


def test_cors_preflight_is_not_refused(keyed: FlaskClient) -> None:
    preflight = {
        "Origin": "https://widget.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "Authorization, Content-Type",
    }
    response = keyed.options("/v1/attention", headers=preflight)
    assert response.status_code == 200
    assert "authorization" in response.headers["Access-Control-Allow-Headers"].lower()
    refused = keyed.post("/v1/attention", json=SEED, headers={"Origin": "https://widget.example"})
    assert refused.status_code == 401
    assert refused.headers["Access-Control-Allow-Origin"] == "*"  # the browser may read the 401


def test_keys_are_compared_whole() -> None:
    assert key_is_valid("abc", ["x", "abc"])
    assert not key_is_valid("ab", ["abc"])
    assert not key_is_valid("abcd", ["abc"])
    assert not key_is_valid("ünï", ["abc"])  # non-ASCII does not crash the comparison
    assert not key_is_valid("abc", [])


def test_keys_come_from_the_variable_and_the_file(tmp_path: Path) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text("# rotated 2025-01\nfile-key-1\n\n  file-key-2  \n")
    settings = Settings.from_env({"API_KEYS": "env-key, other", "API_KEYS_FILE": str(key_file)})
    assert settings.as_flask_config()["API_KEYS"] == ["env-key", "other", "file-key-1", "file-key-2"]
    assert "env-key" not in repr(settings)
    assert Settings.from_env({}).as_flask_config()["API_KEYS"] == []


def test_an_unreadable_or_empty_key_file_fails_loudly(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="API_KEYS_FILE"):
        Settings.from_env({"API_KEYS_FILE": str(tmp_path / "missing")})
    (tmp_path / "empty").write_text("# nothing\n")
    with pytest.raises(ValueError, match="API_KEYS_FILE"):
        Settings.from_env({"API_KEYS_FILE": str(tmp_path / "empty")})


@pytest.mark.parametrize("key", ["clé", "two words", 'quote"d', "a=b"])
def test_a_key_no_client_could_send_fails_at_start_up(key: str, tmp_path: Path) -> None:
    # RFC 6750's bearer tokens are ASCII: "clé" was accepted, and a client sending it (UTF-8) got a 401.
    with pytest.raises(ValueError, match="API_KEYS: key 2 is not a bearer token"):
        Settings.from_env({"API_KEYS": f"good-key, {key}"})
    (tmp_path / "keys").write_text(f"good-key\n{key}\n")
    with pytest.raises(ValueError, match="API_KEYS_FILE: key 2 is not a bearer token"):
        Settings.from_env({"API_KEYS_FILE": str(tmp_path / "keys")})
    assert Settings.from_env({"API_KEYS": "a.b_c~d+e/f-0==="}).as_flask_config()["API_KEYS"] == [
        "a.b_c~d+e/f-0==="
    ]


def test_a_blank_key_file_setting_means_none() -> None:
    # compose passes API_KEYS_FILE= when the operator sets nothing
    assert Settings.from_env({"API_KEYS_FILE": "", "API_KEYS": ""}).as_flask_config()["API_KEYS"] == []


def test_the_contract_declares_the_bearer_scheme_on_the_computations_only() -> None:
    import yaml

    from tests.conftest import CONTRACT_PATH

    spec = yaml.safe_load(CONTRACT_PATH.read_text())
    assert spec["components"]["securitySchemes"]["bearerAuth"] == SECURITY_SCHEME
    assert spec["security"] == [{}, {"bearerAuth": []}]
    assert SECURITY_SCHEME["type"] == "http"
    assert SECURITY_SCHEME["scheme"] == "bearer"
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            if method == "parameters":  # shared by the path's operations, not one of them
                continue
            if is_protected(path):
                assert "security" not in operation  # the document's: no key, or a bearer key
                assert "401" in operation["responses"]
            else:
                assert operation["security"] == []  # stated: these never need a key
