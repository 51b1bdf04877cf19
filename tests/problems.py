"""Assertions shared by the HTTP tests."""

from __future__ import annotations

from typing import Any

from werkzeug.test import TestResponse


def assert_problem(
    response: TestResponse, status: int, *, field: str | None = None, says: str = ""
) -> dict[str, Any]:
    """The response is RFC 9457 problem+json with ``status``, naming ``field`` when given."""
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/problem+json"
    body: dict[str, Any] = response.get_json(force=True)
    assert body["status"] == status
    assert {"type", "title", "status", "detail"} <= set(body)
    assert body["title"]
    assert body["detail"]
    if field is not None:
        assert field in body["errors"], body
        assert all(isinstance(message, str) and message for message in body["errors"][field])
    if says:
        text = " ".join([body["detail"], *(m for ms in body.get("errors", {}).values() for m in ms)])
        assert says.lower() in text.lower(), body
    return body
