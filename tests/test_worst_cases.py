"""bench/worst_cases.py's bodies are the frontier of the default limits: each is accepted, and the next size
up along its limiting dimension is a 413. Their CPU time is measured by ``python -m bench --worst-cases``
(and in the full bench run), never asserted here."""

from __future__ import annotations

import orjson
import pytest

from bench.worst_cases import BUILDERS, admitted, typed_request, worst_case_requests
from service import create_app
from service.settings import Settings
from service.web.limits import admit_work
from service.web.problems import Problem

DEFAULTS = Settings()


def test_every_endpoint_has_a_worst_case_with_its_path() -> None:
    paths = {name: path for name, (path, _) in worst_case_requests().items()}
    assert paths == {
        "attention": "/v1/attention",
        "softmax": "/v1/softmax",
        "log-likelihood": "/v1/log-likelihood",
        "sample": "/v1/sample",
        "multi-head-attention": "/v1/multi-head-attention",
        "positional-encoding": "/v1/positional-encoding",
        "layer-norm": "/v1/layer-norm",
        "feed-forward": "/v1/feed-forward",
        "transformer-block": "/v1/transformer-block",
    }


@pytest.mark.parametrize("name", list(BUILDERS))
def test_the_worst_case_is_accepted_and_one_step_more_is_a_413(name: str) -> None:
    path, body = BUILDERS[name](0, 1)
    assert len(orjson.dumps(body)) <= DEFAULTS.max_body_bytes
    app = create_app()  # the default limits
    with app.test_request_context():
        assert admitted(typed_request(path, body))

        bigger_path, bigger = BUILDERS[name](1, 1)
        assert bigger_path == path
        request = typed_request(path, bigger)
        with pytest.raises(Problem) as refused:
            admit_work(request.work())
    assert refused.value.status == 413
    assert refused.value.slug in ("work-too-large", "answer-too-large")
    assert "(MAX_" in refused.value.detail  # the setting that refused it
