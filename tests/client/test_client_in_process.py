"""The Python client against the app in process (httpx's WSGI transport): keys, errors, dtypes, framing."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from attention_client import ApiError, Client

from service import create_app


def client_for(**config: object) -> Client:
    app = create_app({"TESTING": True, **config})
    return Client("http://service.test", transport=httpx.WSGITransport(app=app), api_key=None)


def test_the_worked_example() -> None:
    with client_for() as service:
        result = service.attention([0.0, 1.0], [[1.0, 0.0], [0.0, 1.0]], [[6.0, 0.0], [0.0, 3.0]])
    assert result.weights is not None
    assert result.weights.tolist() == pytest.approx([0.3302384506733431, 0.6697615493266569], rel=1e-12)
    assert result.output.shape == (2,)
    assert result.empty_rows.shape == (0, 0)
    assert result.scale == pytest.approx(2**-0.5, rel=1e-15)


def test_float32_in_float32_out_and_precision_overrides() -> None:
    logits = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    with client_for() as service:
        assert service.softmax(logits).probabilities.dtype == np.float32
        assert service.softmax(logits, precision="float64").probabilities.dtype == np.float64
        assert service.softmax(logits.astype(np.float64)).probabilities.dtype == np.float64


def test_hidden_scores_are_minus_infinity_and_unscored_positions_nan() -> None:
    with client_for() as service:
        attention = service.attention(
            [[1.0, 0.0], [0.0, 1.0]],
            [[1.0, 0.0], [0.0, 1.0]],
            [[1.0], [2.0]],
            causal=True,
            include=["scores"],
        )
        scored = service.log_likelihood([[1.0, 2.0], [0.5, 0.5]], [0, 1], shift=True)
    assert attention.scores is not None
    assert np.isneginf(attention.scores[0, 1])
    assert np.isnan(scored.token_logprobs[0])
    assert scored.ranks[0] == 0


def test_integer_masks_must_be_zero_or_one() -> None:
    with client_for() as service:
        assert service.softmax([1.0, 2.0], mask=[1, 0]).probabilities.tolist() == [1.0, 0.0]
        with pytest.raises(ValueError, match="mask"):
            service.softmax([1.0, 2.0], mask=[2, 0])


def test_arrays_the_casts_would_change_are_refused_before_sending() -> None:
    # Once, complex logits lost their imaginary parts and uint64 targets beyond int64 wrapped to negative
    # ids, both silently.
    with client_for() as service:
        with pytest.raises(ValueError, match="logits must be real numbers, got complex128"):
            service.softmax(np.array([1 + 2j, 3 + 0j]))
        with pytest.raises(ValueError, match="logits must be real numbers, got bool"):
            service.softmax(np.array([True, False]))
        with pytest.raises(ValueError, match=f"targets holds {2**63}, beyond INT64"):
            service.log_likelihood([[1.0, 2.0]], np.array([2**63], dtype=np.uint64))
        scored = service.log_likelihood([[1.0, 2.0]], np.array([1], dtype=np.uint64))
    assert scored.token_logprobs.tolist() == pytest.approx([-np.log1p(np.exp(-1.0))], rel=1e-12)


def test_refusals_are_api_errors_with_the_fields() -> None:
    # A rule only the service knows (key and query disagree on d_k): its refusal, with the field to blame.
    with client_for() as service, pytest.raises(ApiError) as refused:
        service.attention([0.0, 1.0], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [[6.0, 0.0], [0.0, 3.0]])
    assert refused.value.status == 422
    assert list(refused.value.errors) == ["key"]
    assert refused.value.type.endswith(":validation-error")


def test_api_keys_guard_infer_and_the_client_sends_its_key() -> None:
    app = create_app({"TESTING": True, "API_KEYS": ["sesame"]})
    transport = httpx.WSGITransport(app=app)
    with Client("http://service.test", transport=transport) as anonymous, pytest.raises(ApiError) as refused:
        anonymous.softmax([1.0])
    assert refused.value.status == 401
    with Client("http://service.test", transport=transport, api_key="sesame") as keyed:
        assert keyed.softmax([1.0]).probabilities.tolist() == [1.0]
    probe = app.test_client()
    assert probe.get("/v2/health/ready").status_code == 200  # health and metadata stay open
    assert probe.get("/v2/models/softmax").status_code == 200
    assert probe.post("/v2/models/softmax/infer", json={}).get_json()["error"]  # the protocol's member too


def test_an_integer_beyond_int64_for_a_number_option_is_sent_as_a_float() -> None:
    # The service's JSON parser refuses integers beyond 64 bits; as a number, 2**64 is the float it rounds to.
    with client_for() as service:
        given = service.softmax([1.0, 2.0], temperature=2**64)
        as_float = service.softmax([1.0, 2.0], temperature=float(2**64))
    assert given.temperature == float(2**64)
    assert given.probabilities.tolist() == pytest.approx([0.5, 0.5], rel=1e-12)
    assert given.probabilities.tolist() == as_float.probabilities.tolist()
