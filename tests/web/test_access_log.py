"""The access log: exactly one JSON line per request on stdout, with the fields operators correlate on."""

from __future__ import annotations

import io
import json
import sys

import pytest
from flask.testing import FlaskClient

from service import create_app


def _lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_one_json_line_per_request(client: FlaskClient, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    body = b'{"logits": [1.0, 2.0]}'
    response = client.post(
        "/v1/softmax", data=body, content_type="application/json", headers={"X-Request-ID": "log-1"}
    )
    client.get("/nowhere", headers={"X-Request-ID": "log-2"})
    first, second = _lines(capsys.readouterr().out)
    assert first["logger"] == "service.access"
    assert first["method"] == "POST"
    assert first["path"] == "/v1/softmax"
    assert first["status"] == 200
    assert first["request_id"] == "log-1"
    assert first["bytes"] == len(response.get_data())
    assert first["request_bytes"] == len(body)
    assert isinstance(first["duration_ms"], float)
    assert first["duration_ms"] >= 0
    assert (second["path"], second["status"], second["request_id"]) == ("/nowhere", 404, "log-2")


def test_access_log_can_be_turned_off(capsys: pytest.CaptureFixture[str]) -> None:
    client = create_app({"TESTING": True, "ACCESS_LOG": False}).test_client()
    capsys.readouterr()
    assert client.get("/livez").status_code == 200
    assert capsys.readouterr().out == ""


def test_a_content_length_beyond_64_bits_is_logged_clamped_and_flagged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = create_app({"TESTING": True}).test_client()  # not the contract checker: it re-reads the body
    capsys.readouterr()
    response = client.post(
        "/v1/softmax",
        data=b"{}",
        content_type="application/json",
        headers={"X-Request-ID": "huge-claim"},
        environ_overrides={"CONTENT_LENGTH": str(2**64)},
    )
    assert response.status_code == 413
    (line,) = _lines(capsys.readouterr().out)
    assert line["request_id"] == "huge-claim"
    assert line["request_bytes"] == 0  # refused before reading: nothing was read
    assert line["declared_bytes"] == 2**63 - 1
    assert line["declared_bytes_clamped"] is True


def test_a_field_orjson_cannot_write_does_not_drop_the_line(capsys: pytest.CaptureFixture[str]) -> None:
    from service.web.access_log import write_line

    capsys.readouterr()
    write_line({"status": 200, "huge": 2**70, "text": "\ud800"})
    (line,) = _lines(capsys.readouterr().out)
    assert line["huge"] == str(2**70)
    assert line["text"] == "\\ud800"
    assert line["unencodable"] == ["huge", "text"]


def test_a_log_that_cannot_be_written_costs_the_line_not_the_answer(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class BrokenPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", BrokenPipe())
    answer = client.post(
        "/v1/attention", json={"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}
    )
    assert answer.status_code == 200
    assert answer.json is not None
    assert answer.json["weights"] == pytest.approx([0.3302384506733431, 0.6697615493266569], rel=1e-12)
    assert "could not be written" in capsys.readouterr().err


def test_a_streamed_answer_the_server_stops_sending_is_logged_cut_short(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A streamed answer's line is written when the server closes it, with the bytes the server wrote: the
    piece it failed to send (a client gone, or one that stopped reading) is not counted, and the line says
    the answer was cut short; a whole answer's line does not."""
    from service.web.answers import STREAM_ABOVE_ELEMENTS

    client = create_app({"TESTING": True}).test_client()
    body = {"logits": [0.0] * (STREAM_ABOVE_ELEMENTS + 10)}
    capsys.readouterr()
    with client.post("/v1/softmax", json=body, headers={"X-Request-ID": "whole"}) as whole:
        assert whole.status_code == 200
        whole_bytes = len(whole.get_data())
    with client.post("/v1/softmax", json=body, buffered=False, headers={"X-Request-ID": "cut"}) as cut:
        pieces = iter(cut.response)
        first = next(pieces)  # the server writes one piece; the next one fails to go out
        next(pieces)
    lines = {line["request_id"]: line for line in _lines(capsys.readouterr().out)}
    assert lines["whole"]["bytes"] == whole_bytes
    assert "cut_short" not in lines["whole"]
    assert lines["cut"]["bytes"] == len(first)
    assert lines["cut"]["cut_short"] is True
