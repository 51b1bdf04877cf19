"""Clients generated from the committed contract by common tools work against a live server, as generated.

openapi-python-client writes a client package whose functions are named by operationId and which calls
/v1/* with a plain ``Client`` (no key) when keys are off; datamodel-code-generator writes pydantic models
whose unset optional fields are sent as ``null``. Both tools come from the dev lock and run offline; the
server is the app on a free 127.0.0.1 port.
"""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import numpy as np
import pytest
import yaml
from scipy.special import log_softmax, softmax
from werkzeug.serving import make_server

from service import create_app
from tests.conftest import CONTRACT_PATH
from tests.references import reference_attention
from tests.tolerance import FLOAT64_RTOL

TOOLS = Path(sys.executable).parent
GENERATION_TIMEOUT = 120  # seconds; each tool takes a few


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    server = make_server("127.0.0.1", 0, create_app({"TESTING": True}), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _run(*command: str | Path) -> str:
    """The tool's output (stdout and stderr), once it has succeeded."""
    arguments = [str(part) for part in command]
    done = subprocess.run(arguments, capture_output=True, text=True, timeout=GENERATION_TIMEOUT, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def _import_from(directory: Path, name: str) -> ModuleType:
    sys.path.insert(0, str(directory))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(directory))


@pytest.fixture(scope="module")
def client_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """openapi-python-client's package for openapi.yaml (no formatter hooks: nothing else is needed)."""
    directory = tmp_path_factory.mktemp("openapi-python-client")
    config = directory / "config.yaml"
    config.write_text("post_hooks: []\n")
    package = directory / "attention_service_client"
    output = _run(
        TOOLS / "openapi-python-client", "generate", "--path", CONTRACT_PATH, "--meta", "none",
        "--output-path", package, "--config", config,
    )  # fmt: skip
    (directory / "generation.log").write_text(output)
    return directory


def test_no_schema_is_dropped_by_the_generator(client_package: Path) -> None:
    # Once, every /v2 infer request schema was dropped ("type array must have items"): its tensors' data
    # had no items. The one warning left is GET /openapi.yaml's YAML answer, which it cannot parse.
    log = (client_package / "generation.log").read_text()
    assert "Unable to process schema" not in log, log
    assert "must have items" not in log, log
    assert "Could not find reference" not in log, log


def _snake(operation_id: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation_id).lower()


def test_client_functions_are_named_by_operation_id(client_package: Path) -> None:
    spec = yaml.safe_load(CONTRACT_PATH.read_text())
    operation_ids = {
        operation["operationId"]
        for item in spec["paths"].values()
        for method, operation in item.items()
        if method != "parameters"
    }
    modules = {path.stem for path in (client_package / "attention_service_client" / "api").glob("*/*.py")}
    assert {_snake(operation_id) for operation_id in operation_ids} <= modules
    assert {"attention", "softmax", "log_likelihood"} <= modules  # as the JS client names them


# the generated function: its module (the tag)
ENDPOINTS = {"attention": "attention", "softmax": "softmax", "log_likelihood": "log_likelihood"}


def test_generated_client_calls_the_endpoints_without_a_key(client_package: Path, base_url: str) -> None:
    package = _import_from(client_package, "attention_service_client")
    models = importlib.import_module("attention_service_client.models")
    api = {
        name: importlib.import_module(f"attention_service_client.api.{tag}.{name}")
        for name, tag in ENDPOINTS.items()
    }
    for module in api.values():  # keys are optional: a plain Client will do, not only an authenticated one
        annotation = str(inspect.signature(module.sync_detailed).parameters["client"].annotation)
        assert re.search(r"\bClient\b", annotation), annotation
    client = package.Client(base_url=base_url, raise_on_unexpected_status=True)

    query, key, value = [0.0, 1.0], [[1.0, 0.0], [0.0, 1.0]], [[6.0, 0.0], [0.0, 3.0]]
    request = models.AttentionRequest(query=query, key=key, value=value)
    attention = api["attention"].sync(client=client, body=request)
    assert isinstance(attention, models.AttentionResponse), attention
    expected = reference_attention(np.array([query]), np.array(key), np.array(value))
    np.testing.assert_allclose(attention.weights, expected.weights[0], rtol=FLOAT64_RTOL)
    np.testing.assert_allclose(attention.output, expected.output[0], rtol=FLOAT64_RTOL)

    logits = [2.0, 1.0, 0.1]
    answer = api["softmax"].sync(client=client, body=models.SoftmaxRequest(logits=logits, temperature=0.5))
    assert isinstance(answer, models.SoftmaxResponse), answer
    np.testing.assert_allclose(answer.probabilities, softmax(np.array(logits) / 0.5), rtol=FLOAT64_RTOL)

    rows = [[2.0, 0.5, -1.0], [0.1, 1.5, 0.3]]
    request = models.LikelihoodRequest(logits=rows, targets=[0, 1])
    likelihood = api["log_likelihood"].sync(client=client, body=request)
    assert isinstance(likelihood, models.LikelihoodResponse), likelihood
    expected_logprobs = [log_softmax(rows[0])[0], log_softmax(rows[1])[1]]
    np.testing.assert_allclose(likelihood.token_logprobs, expected_logprobs, rtol=FLOAT64_RTOL)


def test_generated_client_infers_on_v1_and_v2_with_json_tensors(client_package: Path, base_url: str) -> None:
    package = _import_from(client_package, "attention_service_client")
    models = importlib.import_module("attention_service_client.models")
    v1_softmax = importlib.import_module("attention_service_client.api.softmax.softmax")
    v2_softmax = importlib.import_module("attention_service_client.api.v2.softmax_infer")
    # Typed on /v2 too: the body is the model's request document and the answer the protocol's.
    sync = inspect.signature(v2_softmax.sync)
    assert "SoftmaxInferenceRequest" in str(sync.parameters["body"].annotation)
    assert "InferenceResponse" in str(sync.return_annotation)
    client = package.Client(base_url=base_url, raise_on_unexpected_status=True)
    logits = [[2.0, 1.0, 0.1], [0.5, 0.5, 3.0]]
    expected = softmax(np.array(logits) / 0.5, axis=-1)

    v1 = v1_softmax.sync(client=client, body=models.SoftmaxRequest(logits=logits, temperature=0.5))
    assert isinstance(v1, models.SoftmaxResponse), v1
    np.testing.assert_allclose(v1.probabilities, expected, rtol=FLOAT64_RTOL)

    request = models.SoftmaxInferenceRequest(
        inputs=[
            models.SoftmaxInput(
                name=models.SoftmaxInputName.LOGITS,
                shape=[2, 3],
                datatype=models.SoftmaxInputDatatype.FP64,
                data=[value for row in logits for value in row],  # flat, row-major
            )
        ],
        parameters=models.SoftmaxParameters(temperature=0.5),
        outputs=[models.SoftmaxRequestedOutput(name=models.SoftmaxRequestedOutputName.PROBABILITIES)],
    )
    v2 = v2_softmax.sync(client=client, body=request)
    assert isinstance(v2, models.InferenceResponse), v2
    [probabilities] = v2.outputs
    described = (probabilities.name, probabilities.datatype, probabilities.shape)
    assert described == ("probabilities", "FP64", [2, 3])
    np.testing.assert_allclose(np.reshape(probabilities.data, (2, 3)), expected, rtol=FLOAT64_RTOL)


@pytest.fixture(scope="module")
def pydantic_models(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    directory = tmp_path_factory.mktemp("datamodel-code-generator")
    _run(
        TOOLS / "datamodel-codegen", "--input", CONTRACT_PATH, "--input-file-type", "openapi",
        "--output-model-type", "pydantic_v2.BaseModel", "--formatters", "builtin",
        "--output", directory / "attention_models.py",
    )  # fmt: skip
    return _import_from(directory, "attention_models")


def test_a_pydantic_model_with_null_optionals_is_accepted(pydantic_models: ModuleType, base_url: str) -> None:
    unset = dict.fromkeys(["temperature", "mask", "top_k", "top_p", "include", "precision"])
    request = pydantic_models.SoftmaxRequest(logits=[2.0, 1.0, 0.1], **unset)
    body: dict[str, Any] = request.model_dump(mode="json")
    assert {name: body[name] for name in unset} == unset  # what such clients send for unset fields
    headers = {"Content-Type": "application/json"}
    response = httpx.post(f"{base_url}/v1/softmax", content=request.model_dump_json(), headers=headers)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["temperature"] == 1.0  # the default applied
    np.testing.assert_allclose(answer["probabilities"], softmax([2.0, 1.0, 0.1]), rtol=FLOAT64_RTOL)
