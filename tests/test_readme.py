"""The README's API examples are real: each ``curl`` call is replayed against the app and must get the
answer printed under it, numbers within FLOAT64_RTOL (the README shows one machine's last digits).

A ``$ NAME=value make run`` line before the calls in the same block sets that environment for them (the
API-key examples). Random request ids are not compared; one the example sends is.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from flask import Flask

from service import create_app
from tests.conftest import ContractCheckingClient
from tests.tolerance import FLOAT64_RTOL, assert_json_close

README = Path(__file__).resolve().parent.parent / "README.md"
# Headers that differ by server, time or request, not by what the service answers.
UNCOMPARED_HEADERS = {"server", "date", "connection", "content-length", "x-request-id"}


@dataclass
class CurlExample:
    line: int
    command: list[str]
    environment: dict[str, str]
    output: list[str] = field(default_factory=list)

    @property
    def path(self) -> str:
        url = next(arg for arg in self.command if arg.startswith("localhost:8000"))
        return url.removeprefix("localhost:8000")

    def option_values(self, option: str) -> list[str]:
        return [self.command[i + 1] for i, arg in enumerate(self.command[:-1]) if arg == option]


def _examples() -> list[CurlExample]:
    """Every ``$ curl`` call in an indented block of the README, with the output printed under it."""
    found: list[CurlExample] = []
    environment: dict[str, str] = {}
    current: CurlExample | None = None
    lines = README.read_text().splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line and not line.startswith("    "):  # prose: a new block starts afresh
            environment, current = {}, None
        elif line.startswith("    $ "):
            text, start = line[6:], index
            while text.endswith("\\"):
                index += 1
                text = text[:-1] + lines[index].strip()
            words = shlex.split(text)
            current = None
            if words[-2:] == ["make", "run"]:
                environment = dict(word.split("=", 1) for word in words[:-2])
            elif words[0] == "curl" and "|" not in words:
                current = CurlExample(start + 1, words, dict(environment))
                found.append(current)
        elif current is not None:
            current.output.append(line[4:])
        index += 1
    return found


def _api_calls() -> list[CurlExample]:
    return [example for example in _examples() if "POST" in example.command]


def test_the_readme_has_api_examples() -> None:
    paths = {example.path for example in _api_calls()}
    assert {"/v1/attention", "/v1/softmax", "/v1/log-likelihood"} <= paths


@pytest.mark.parametrize("example", _api_calls(), ids=lambda example: f"README.md:{example.line}")
def test_readme_example_is_what_the_service_answers(
    example: CurlExample, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in example.environment.items():
        monkeypatch.setenv(name, value)
    app: Flask = create_app({"TESTING": True})
    app.test_client_class = ContractCheckingClient
    headers = dict(header.split(": ", 1) for header in example.option_values("-H"))
    (body,) = example.option_values("-d")
    response = app.test_client().post(example.path, data=body.encode(), headers=headers)

    output = [line for line in example.output if line.strip()]
    expected_body = json.loads(output[-1])
    if "-i" in example.command:  # the status line and headers are shown: compare them too
        protocol, status = output[0].split(" ", 1)
        assert protocol == "HTTP/1.1"
        assert response.status == status
        for shown in output[1:-1]:
            if shown == "...":
                continue
            name, value = shown.split(": ", 1)
            sent_id = name.lower() == "x-request-id" and "X-Request-ID" in headers
            if name.lower() not in UNCOMPARED_HEADERS or sent_id:
                assert response.headers.get(name) == value, name
    else:
        assert response.status_code == expected_body.get("status", 200)
    answer = response.get_json(force=True)
    if "X-Request-ID" not in headers:  # a fresh random id each time
        expected_body.pop("request_id", None)
        answer.pop("request_id", None)
    assert_json_close(answer, expected_body, rel=FLOAT64_RTOL)
