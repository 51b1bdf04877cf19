"""Probes: /livez, /healthz (its alias) and /readyz, which checks a real computation."""

from __future__ import annotations

import numpy as np
import pytest
from flask.testing import FlaskClient

from service.web import readiness
from tests.problems import assert_problem


@pytest.mark.parametrize("path", ["/livez", "/healthz", "/readyz"])
def test_probes_answer_ok(client: FlaskClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok"}


def test_readiness_fails_when_the_self_check_is_wrong(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readiness, "_READY_WEIGHTS", np.array([0.5, 0.5]))
    assert_problem(client.get("/readyz"), 503, says="self-check")
    assert client.get("/livez").status_code == 200  # alive but not ready: do not restart, do not route


def test_readiness_reference_is_the_worked_example() -> None:
    # softmax([0·1 + 1·0, 0·0 + 1·1] / √2) computed by hand: e^0 : e^(1/√2)
    assert pytest.approx([0.3302384506733431, 0.6697615493266569], rel=1e-12) == readiness._READY_WEIGHTS
