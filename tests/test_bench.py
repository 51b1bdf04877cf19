"""The benchmark's floor does the same work as the service, so that the ratios compare like with like."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from flask.testing import FlaskClient

from bench.cases import Case, all_cases, floor_bytes


def small(case: Case) -> Case:
    """The case cut to 8 rows or tokens (and the vocabulary to 8), so that the test stays fast."""
    body = dict(case.body)
    if case.path == "/v1/attention":
        for name in ("query", "key", "value"):
            body[name] = body[name][:8]
    elif case.path == "/v1/multi-head-attention":
        body["query"] = body["query"][:8]  # 8 tokens; the layer's weights stay whole
    else:
        body["logits"] = [row[:8] for row in body["logits"][:8]]
        body["targets"] = [token % 8 for token in body["targets"][:8]]
    return Case(case.name, case.path, body, case.floor)


@pytest.mark.parametrize("case", [small(case) for case in all_cases()], ids=lambda case: case.name)
@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_floor_answers_what_the_service_answers(client: FlaskClient, case: Case, precision: str) -> None:
    variant = case.with_precision(precision)
    response = client.post(variant.path, data=variant.raw, content_type="application/json")
    assert response.status_code == 200, response.data
    served = orjson.loads(response.data)
    floor = orjson.loads(floor_bytes(variant))
    assert set(floor) <= set(served)
    for name, value in floor.items():
        if isinstance(value, list) and name != "empty_rows":
            np.testing.assert_array_equal(
                np.asarray(value, dtype=float), np.asarray(served[name], dtype=float)
            )
        else:
            assert value == served[name], name


def test_overhead_mode_times_each_seed_request_and_the_bare_app() -> None:
    from bench import overhead

    rows = overhead.measure(requests=3, rounds=1)
    assert [row.name for row in rows] == [*overhead.SEEDS, "bare Flask app"]
    assert all(row.microseconds > 0 for row in rows)
    text = overhead.table(rows)
    assert text.count("\n") == len(rows) + 1  # header, rule and one line per row


def test_every_case_has_a_warm_up_body_that_the_service_accepts(client: FlaskClient) -> None:
    # The memory measurement warms each endpoint up first; a case on an endpoint without a warm-up body
    # failed `make bench-smoke` (CI) with a KeyError after every timing had been taken.
    from bench.run import WARMUP_BODIES

    for path in {case.path for case in all_cases()}:
        assert path in WARMUP_BODIES, path
        response = client.post(path, data=WARMUP_BODIES[path], content_type="application/json")
        assert response.status_code == 200, response.data


def test_worst_case_mode_times_every_endpoint() -> None:
    from bench import worst_cases

    rows = worst_cases.measure(repeats=1, shrink=256)
    assert [row.name for row in rows] == list(worst_cases.BUILDERS)
    assert all(row.cpu_seconds >= 0 and row.compute > 0 for row in rows)
    text = worst_cases.table(rows)
    assert text.count("\n") == len(rows) + 1  # header, rule and one line per row
