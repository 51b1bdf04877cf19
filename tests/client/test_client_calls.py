"""The Python client reaches every option of every model, and says why a call got no answer.

Options are checked against the loop references of tests/layer_references.py; the route each call takes
(/v2 binary tensors, or /v1 JSON for what the /v2 model does not take yet) is recorded. Transport failures
run against loopback sockets: a closed port (refused) and a listener that never answers (timeout), each
bounded by the client's own timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import httpx
import numpy as np
import pytest
from attention_client import (
    ApiError,
    AsyncClient,
    Client,
    ConnectionFailed,
    InvalidInput,
    Timeout,
    TransportError,
)
from werkzeug.serving import make_server

from service import create_app
from tests.layer_references import (
    RopeSpec,
    reference_attention_options,
    reference_multi_head,
    reference_sinusoidal,
)
from tests.sockets import refusing_url
from tests.tolerance import FLOAT64_RTOL

T = TypeVar("T")
CALL_TIMEOUT = 0.5  # seconds: the client's own bound on the calls that cannot be answered
# A refusal comes at once, so its calls get a bound no loaded machine reaches: with CALL_TIMEOUT, one CI run's
# async connect was still waiting for its refusal after 0.5 s and raised Timeout instead.
REFUSAL_TIMEOUT = 30.0


class Recording(httpx.WSGITransport):
    """The app in process, remembering the path of each request."""

    def __init__(self) -> None:
        super().__init__(app=create_app({"TESTING": True}))
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return super().handle_request(request)


@pytest.fixture
def recording() -> Recording:
    return Recording()


@pytest.fixture
def service(recording: Recording) -> Iterator[Client]:
    with Client("http://service.test", transport=recording) as client:
        yield client


def run_async(call: Callable[[], Awaitable[T]]) -> T:
    # On a thread of its own: a session-wide fixture (Playwright's) may leave an event loop on this one.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(lambda: asyncio.run(call())).result(timeout=60)  # type: ignore[arg-type]


RNG = np.random.default_rng(20)
HEADS_Q = RNG.normal(size=(4, 3, 4))  # [H_q, n, d_k]
HEADS_K = RNG.normal(size=(2, 5, 4))  # [H_kv, m, d_k]
HEADS_V = RNG.normal(size=(2, 5, 3))
SLOPES = np.array([0.5, 0.25, 0.125, 0.0625])


def test_attention_options_the_v2_model_takes_travel_as_binary_tensors(
    service: Client, recording: Recording
) -> None:
    result = service.attention(
        HEADS_Q, HEADS_K, HEADS_V, enable_gqa=True, softcap=2.0, alibi_slopes=SLOPES, causal=True
    )
    expected = reference_attention_options(
        HEADS_Q, HEADS_K, HEADS_V, gqa=True, slopes=SLOPES, softcap=2.0, causal=True
    )
    assert recording.paths == ["/v2/models/attention/infer"]
    np.testing.assert_allclose(result.output, expected.output, rtol=FLOAT64_RTOL)
    assert result.weights is not None
    np.testing.assert_allclose(result.weights, expected.weights, rtol=FLOAT64_RTOL, atol=1e-300)


def test_window_and_rotary_reach_the_service(service: Client, recording: Recording) -> None:
    rope = RopeSpec(base=100.0, style="interleaved")
    result = service.attention(
        HEADS_Q,
        HEADS_K,
        HEADS_V,
        enable_gqa=True,
        window=(1, 0),
        rotary={"base": 100.0, "style": "interleaved"},
        include=["weights", "scores", "logsumexp"],
    )
    expected = reference_attention_options(HEADS_Q, HEADS_K, HEADS_V, gqa=True, window=(1, 0), rope=rope)
    assert recording.paths == ["/v2/models/attention/infer"]  # window and rotary.* are /v2 parameters
    np.testing.assert_allclose(result.output, expected.output, rtol=FLOAT64_RTOL)
    assert result.weights is not None
    assert result.scores is not None
    assert result.logsumexp is not None
    np.testing.assert_allclose(result.weights, expected.weights, rtol=FLOAT64_RTOL, atol=1e-300)
    hidden = np.isnan(expected.scores)
    assert np.isneginf(result.scores[hidden]).all()  # null on /v1, -inf in the client as on /v2
    np.testing.assert_allclose(result.scores[~hidden], expected.scores[~hidden], rtol=FLOAT64_RTOL)
    assert result.scale == pytest.approx(0.5, rel=1e-15)
    assert result.empty_rows.ndim == 2  # index lists, as many as rows that saw no key: none
    assert result.empty_rows.size == 0


@pytest.mark.parametrize("rotary", [{}, {"base": None}], ids=["empty", "only-none"])
def test_an_empty_rotary_object_turns_rotary_on_with_its_defaults(
    service: Client, recording: Recording, rotary: dict[str, Any]
) -> None:
    # /v1 reads "rotary": {} as rotary on with its defaults; on /v2 no rotary.* is no rotary, so the call
    # sends the contract's default base. Once it went to /v2 with nothing and came back without rotary; then
    # to /v1, whose JSON is several times the size (a 413 where the binary call passed).
    result = service.attention(HEADS_Q, HEADS_K, HEADS_V, enable_gqa=True, rotary=rotary)
    expected = reference_attention_options(HEADS_Q, HEADS_K, HEADS_V, gqa=True, rope=RopeSpec())
    plain = reference_attention_options(HEADS_Q, HEADS_K, HEADS_V, gqa=True)
    np.testing.assert_allclose(result.output, expected.output, rtol=FLOAT64_RTOL)
    assert np.abs(result.output - plain.output).max() > 1e-3  # rotary changes these outputs
    assert recording.paths == ["/v2/models/attention/infer"]


def test_an_empty_rotary_object_turns_rotary_on_in_the_layers(service: Client, recording: Recording) -> None:
    x = RNG.normal(size=(3, 4))  # [n, d_model]
    weights = {name: RNG.normal(size=(4, 4)) for name in ("w_q", "w_k", "w_v", "w_o")}
    expected, _, _ = reference_multi_head(x, x, x, weights, {}, num_heads=2, num_kv_heads=2, rope=RopeSpec())
    result = service.multi_head_attention(x, *weights.values(), num_heads=2, rotary={})
    np.testing.assert_allclose(result.output, expected, rtol=FLOAT64_RTOL)
    assert recording.paths == ["/v2/models/multi-head-attention/infer"]

    attention = {"num_heads": 2, **{name: w.tolist() for name, w in weights.items()}}
    feed_forward = {"w_1": RNG.normal(size=(4, 6)).tolist(), "w_2": RNG.normal(size=(6, 4)).tolist()}
    block = service.transformer_block(x, attention={**attention, "rotary": {}}, feed_forward=feed_forward)
    body = {"x": x.tolist(), "attention": {**attention, "rotary": {}}, "feed_forward": feed_forward}
    answer = create_app({"TESTING": True}).test_client().post("/v1/transformer-block", json=body)
    assert answer.status_code == 200, answer.get_json()
    np.testing.assert_allclose(block.output, answer.get_json()["output"], rtol=FLOAT64_RTOL)
    plain = service.transformer_block(x, attention=attention, feed_forward=feed_forward)
    assert np.abs(block.output - plain.output).max() > 1e-3  # rotary changes these outputs
    assert recording.paths[1:] == ["/v2/models/transformer-block/infer"] * 2


def test_multi_head_attention_sync_and_async(service: Client, recording: Recording) -> None:
    x = RNG.normal(size=(3, 6))  # [n, d_model]
    weights = {
        "w_q": RNG.normal(size=(6, 4 * 2)),
        "w_k": RNG.normal(size=(6, 2 * 2)),
        "w_v": RNG.normal(size=(6, 2 * 3)),
        "w_o": RNG.normal(size=(4 * 3, 5)),
    }
    b_q = RNG.normal(size=8)
    expected, per_head, heads = reference_multi_head(
        x, x, x, weights, {"b_q": b_q}, num_heads=4, num_kv_heads=2, causal=True, slopes=SLOPES
    )
    arguments: dict[str, Any] = {
        "num_heads": 4,
        "num_kv_heads": 2,
        "b_q": b_q,
        "causal": True,
        "alibi_slopes": SLOPES,
        "include": ["weights", "heads"],
    }
    result = service.multi_head_attention(x, *weights.values(), **arguments)
    assert recording.paths == ["/v2/models/multi-head-attention/infer"]
    np.testing.assert_allclose(result.output, expected, rtol=FLOAT64_RTOL)
    assert result.weights is not None
    assert result.heads is not None
    assert result.q is None
    np.testing.assert_allclose(result.weights, per_head.weights, rtol=FLOAT64_RTOL, atol=1e-300)
    np.testing.assert_allclose(result.heads, heads, rtol=FLOAT64_RTOL)

    with live_server() as base_url:

        async def call() -> Any:
            async with AsyncClient(base_url) as client:
                return await client.multi_head_attention(x, *weights.values(), **arguments)

        answered = run_async(call)
    np.testing.assert_allclose(answered.output, expected, rtol=FLOAT64_RTOL)


def test_positional_encoding_both_kinds(service: Client, recording: Recording) -> None:
    table = service.positional_encoding(kind="sinusoidal", length=5, d_model=6)
    np.testing.assert_allclose(table.encoding, reference_sinusoidal(list(range(5)), 6), rtol=FLOAT64_RTOL)
    assert table.output is None
    rows = RNG.normal(size=(3, 4))
    rotated = service.positional_encoding(kind="rotary", x=rows, positions=[2, 5, 7], include=["tables"])
    assert recording.paths == ["/v2/models/positional-encoding/infer"] * 2  # include is a /v2 parameter
    angle = 2 * 1.0  # position 2, frequency base^0 = 1 for the first pair (half style: features 0 and 2)
    assert rotated.output is not None
    assert rotated.cos is not None
    assert rotated.output[0, 0] == pytest.approx(
        rows[0, 0] * math.cos(angle) - rows[0, 2] * math.sin(angle), rel=FLOAT64_RTOL
    )
    assert rotated.cos[0, 0] == pytest.approx(math.cos(angle), rel=FLOAT64_RTOL)


def test_float32_in_float32_out_on_the_json_route_too(service: Client) -> None:
    table = service.positional_encoding(kind="rotary", x=np.ones((2, 4), dtype=np.float32))
    assert table.output is not None
    assert table.output.dtype == np.float32
    table = service.positional_encoding(kind="sinusoidal", length=2, d_model=2)
    assert table.encoding is not None
    assert table.encoding.dtype == np.float64


def test_health_ready_and_metadata(service: Client) -> None:
    assert service.health() is True
    assert service.ready() is True
    assert service.metadata()["extensions"]
    attention = service.metadata("attention")
    assert attention["name"] == "attention"
    assert {tensor["name"] for tensor in attention["inputs"]} >= {"query", "key", "value"}


def test_metadata_of_an_unknown_model_is_the_service_s_404(service: Client) -> None:
    with pytest.raises(ApiError) as refused:
        service.metadata("attentoin")
    assert refused.value.status == 404


@pytest.mark.parametrize(
    "name", ["..", ".", "stats", "softmax%2Fversions%2F1", "soft max", "softmax/versions/1", "", "Attention"]
)
def test_metadata_refuses_a_name_that_is_no_model_s_before_sending(
    service: Client, recording: Recording, name: str
) -> None:
    # Once "..", "stats" and "softmax%2Fversions%2F1" answered the server's metadata, the statistics and
    # softmax's version document as if they were the model's.
    with pytest.raises(InvalidInput) as refused:
        service.metadata(name)
    assert refused.value.argument == "model"
    assert recording.paths == []


# --- no answer ---


@pytest.fixture
def refused_url() -> Iterator[str]:
    with refusing_url() as url:
        yield url


def test_a_refused_connection_is_connection_failed_sync_and_async(refused_url: str) -> None:
    url = refused_url
    with Client(url, timeout=REFUSAL_TIMEOUT, retries=0) as client, pytest.raises(ConnectionFailed) as failed:
        client.softmax([1.0, 2.0])
    assert isinstance(failed.value.__cause__, httpx.ConnectError)
    assert isinstance(failed.value, ConnectionError)
    assert isinstance(failed.value, TransportError)
    assert failed.value.status == 0
    assert url in failed.value.detail

    async def call() -> None:
        async with AsyncClient(url, timeout=REFUSAL_TIMEOUT, retries=0) as client:
            await client.health()

    with pytest.raises(ConnectionFailed) as failed_async:
        run_async(call)
    assert isinstance(failed_async.value.__cause__, httpx.ConnectError)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback listener that takes connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def test_an_answer_that_never_comes_is_timeout_sync_and_async(silent_port: int) -> None:
    url = f"http://127.0.0.1:{silent_port}"
    with Client(url, timeout=CALL_TIMEOUT, retries=0) as client, pytest.raises(Timeout) as timed_out:
        client.attention([0.0, 1.0], [[1.0, 0.0], [0.0, 1.0]], [[6.0, 0.0], [0.0, 3.0]])
    assert isinstance(timed_out.value.__cause__, httpx.TimeoutException)
    assert isinstance(timed_out.value, TimeoutError)

    async def call() -> None:
        async with AsyncClient(url, timeout=CALL_TIMEOUT, retries=0) as client:
            await client.softmax([1.0, 2.0])

    with pytest.raises(Timeout) as timed_out_async:
        run_async(call)
    assert isinstance(timed_out_async.value.__cause__, httpx.TimeoutException)


class live_server:  # a context manager, named as a function would be
    """The app on a free 127.0.0.1 port, for the async client (httpx has no async WSGI transport)."""

    def __enter__(self) -> str:
        self.server = make_server("127.0.0.1", 0, create_app({"TESTING": True}), threaded=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_port}"

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
