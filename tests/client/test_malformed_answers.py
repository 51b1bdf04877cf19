"""The Python client against answers that are not the service's: every one is an ApiError, never a raw
JSONDecodeError or KeyError (a proxy's HTML page, a truncated body, a lying header length, …).

The answers are made by hand (httpx.MockTransport), sync and async alike.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest
from attention_client import ApiError, AsyncClient, Client, MalformedAnswerError, SoftmaxResult
from attention_client._client import _v1_outputs
from attention_client._models import ATTENTION, SOFTMAX
from hypothesis import given, settings
from hypothesis import strategies as st

HEADER = "Inference-Header-Content-Length"
LOGITS = [1.0, 3.0, 2.0]
PROBABILITIES = np.exp(LOGITS) / np.exp(LOGITS).sum()
DATATYPES = {"FP64": "<f8", "INT64": "<i8"}


Edit = Callable[[list[dict[str, Any]]], None]


def binary_answer(
    outputs: list[tuple[str, str, Any]], edit: Edit | None = None
) -> tuple[bytes, dict[str, str]]:
    """An infer answer framed as the protocol says: the JSON header (its outputs changed by ``edit``, to
    make a malformed one), then each output's bytes, and the header's length in the HTTP header."""
    chunks = [np.asarray(value, dtype=DATATYPES[datatype]).tobytes() for _, datatype, value in outputs]
    described = [
        {
            "name": name,
            "datatype": datatype,
            "shape": list(np.shape(value)),
            "parameters": {"binary_data_size": len(chunk)},
        }
        for (name, datatype, value), chunk in zip(outputs, chunks, strict=True)
    ]
    if edit is not None:
        edit(described)
    head = json.dumps({"model_name": "softmax", "model_version": "1", "outputs": described}).encode()
    return head + b"".join(chunks), {HEADER: str(len(head)), "Content-Type": "application/octet-stream"}


def json_answer(
    outputs: list[tuple[str, str, Any]], edit: Edit | None = None
) -> tuple[bytes, dict[str, str]]:
    """The same answer with JSON data (flat, as the service writes it)."""
    described = [
        {"name": name, "datatype": datatype, "shape": list(np.shape(value)), "data": np.ravel(value).tolist()}
        for name, datatype, value in outputs
    ]
    if edit is not None:
        edit(described)
    document = {"model_name": "softmax", "model_version": "1", "outputs": described}
    return json.dumps(document).encode(), {"Content-Type": "application/json"}


def first(member: str, value: Any) -> Edit:
    """An edit: the first output's ``member`` (``parameters.x`` for a parameter) becomes ``value``."""

    def edit(described: list[dict[str, Any]]) -> None:
        where, _, name = member.rpartition(".")
        (described[0][where] if where else described[0])[name] = value

    return edit


def output(name: str, member: str, value: Any) -> Edit:
    """An edit: output ``name``'s ``member`` becomes ``value``."""

    def edit(described: list[dict[str, Any]]) -> None:
        next(entry for entry in described if entry["name"] == name)[member] = value

    return edit


def both(*edits: Edit) -> Edit:
    def edit(described: list[dict[str, Any]]) -> None:
        for each in edits:
            each(described)

    return edit


def answered_twice(described: list[dict[str, Any]]) -> None:
    """An edit: the probabilities again at the end, other ones (read last, they would win)."""
    described.append({**described[0], "data": [1.0, 0.0, 0.0]})


SOFTMAX_OUTPUTS = [
    ("probabilities", "FP64", PROBABILITIES),
    ("entropy", "FP64", -(PROBABILITIES * np.log(PROBABILITIES)).sum()),
    ("argmax", "INT64", 1),
    ("temperature", "FP64", 1.0),
]
GOOD_BODY, GOOD_HEADERS = binary_answer(SOFTMAX_OUTPUTS)


def answering(body: bytes, headers: dict[str, str], status: int = 200) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        # A stream, not content=: httpx reads (and decodes) content at once, in the handler.
        sent = {**headers, "Content-Length": str(len(body)), "X-Request-ID": "from-the-proxy"}
        return httpx.Response(status, headers=sent, stream=httpx.ByteStream(body))

    return httpx.MockTransport(handler)


def call_sync(body: bytes, headers: dict[str, str], status: int = 200) -> SoftmaxResult:
    with Client("http://service.test", transport=answering(body, headers, status)) as service:
        return service.softmax(LOGITS)


def call_async(body: bytes, headers: dict[str, str], status: int = 200) -> SoftmaxResult:
    async def call() -> SoftmaxResult:
        async with AsyncClient("http://service.test", transport=answering(body, headers, status)) as service:
            return await service.softmax(LOGITS)

    # On a thread of its own: a session-wide fixture (Playwright's, in tests/browser) may leave an event loop
    # running on this one, and asyncio.run refuses to start inside it.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(lambda: asyncio.run(call())).result(timeout=60)


CALLS = pytest.mark.parametrize("call", [call_sync, call_async], ids=["sync", "async"])


@CALLS
def test_the_hand_made_answer_is_read(call: Callable[..., SoftmaxResult]) -> None:
    # The reference the malformed answers below are cut from: read right, it is the softmax of LOGITS.
    result = call(GOOD_BODY, GOOD_HEADERS)
    np.testing.assert_allclose(result.probabilities, PROBABILITIES, rtol=1e-15)
    assert int(result.argmax) == 1
    assert result.temperature == 1.0


def _json(document: Any) -> tuple[bytes, dict[str, str]]:
    return json.dumps(document).encode(), {"Content-Type": "application/json"}


def _with_header_length(length: str) -> tuple[bytes, dict[str, str]]:
    return GOOD_BODY, {**GOOD_HEADERS, HEADER: length}


def _without(name: str) -> tuple[bytes, dict[str, str]]:
    return binary_answer([output for output in SOFTMAX_OUTPUTS if output[0] != name])


HEAD_LENGTH = int(GOOD_HEADERS[HEADER])
JSON_ANSWER, JSON_HEADERS = json_answer(SOFTMAX_OUTPUTS)

MALFORMED: dict[str, tuple[tuple[bytes, dict[str, str]], type[BaseException] | None]] = {
    "an HTML page from a proxy": (
        (b"<html><body><h1>Welcome to nginx!</h1></body></html>", {"Content-Type": "text/html"}),
        json.JSONDecodeError,
    ),
    "an empty body": ((b"", {}), json.JSONDecodeError),
    "truncated JSON": (
        (JSON_ANSWER[: len(JSON_ANSWER) // 2], {"Content-Type": "application/json"}),
        ValueError,
    ),
    "JSON that is not an object": (_json([1, 2, 3]), None),
    "an object without outputs": (_json({"model_name": "softmax"}), None),
    "outputs that are not a list": (_json({"outputs": {"probabilities": [1.0]}}), None),
    "an output that is not an object": (_json({"outputs": ["probabilities"]}), None),
    "a header length beyond the body": (_with_header_length(str(len(GOOD_BODY) + 10)), None),
    "a header length inside the JSON": (_with_header_length(str(HEAD_LENGTH - 5)), ValueError),
    "a header length inside the binary data": (_with_header_length(str(HEAD_LENGTH + 8)), None),
    "a header length that is not a number": (_with_header_length("12a"), None),
    "a negative header length": (_with_header_length("-4"), None),
    "binary data cut short": ((GOOD_BODY[:-8], GOOD_HEADERS), None),
    "bytes after the binary data": ((GOOD_BODY + b"\0" * 8, GOOD_HEADERS), None),
    "a body that does not decode as its Content-Encoding says": (
        (b"this is not gzip", {**GOOD_HEADERS, "Content-Encoding": "gzip"}),
        httpx.DecodingError,
    ),
    "a negative shape": (json_answer(SOFTMAX_OUTPUTS, first("shape", [-1])), None),
    "a fractional shape": (json_answer(SOFTMAX_OUTPUTS, first("shape", [3.0])), None),
    "a boolean shape": (json_answer(SOFTMAX_OUTPUTS, first("shape", [True, 3])), None),
    "a binary_data_size that is not an integer": (
        binary_answer(SOFTMAX_OUTPUTS, first("parameters.binary_data_size", 24.0)),
        None,
    ),
    "a binary_data_size that does not fit the shape": (
        binary_answer(SOFTMAX_OUTPUTS, first("parameters.binary_data_size", 16)),
        None,
    ),
    "a missing output": (_without("argmax"), KeyError),
    "an unknown datatype": (binary_answer(SOFTMAX_OUTPUTS, first("datatype", "FP16")), KeyError),
    "a shape that does not hold the data": (json_answer(SOFTMAX_OUTPUTS, first("shape", [2])), ValueError),
    "text in the data": (json_answer(SOFTMAX_OUTPUTS, first("data", ["one", "two", "three"])), ValueError),
    # Once read by NumPy's casts, each of these became numbers (or the last output of a name won).
    "an output answered twice": (json_answer(SOFTMAX_OUTPUTS, answered_twice), None),
    "numbers as strings": (json_answer(SOFTMAX_OUTPUTS, first("data", ["0.1", "0.2", "0.7"])), ValueError),
    "a boolean as an FP64 number": (
        json_answer(SOFTMAX_OUTPUTS, first("data", [True, 0.5, 0.5])),
        ValueError,
    ),
    "a boolean as an INT64": (json_answer(SOFTMAX_OUTPUTS, output("argmax", "data", [True])), ValueError),
    "a float as an INT64": (json_answer(SOFTMAX_OUTPUTS, output("argmax", "data", [1.0])), ValueError),
    "a null as an INT64": (json_answer(SOFTMAX_OUTPUTS, output("argmax", "data", [None])), ValueError),
    "an INT64 beyond its range": (
        json_answer(SOFTMAX_OUTPUTS, output("argmax", "data", [2**64])),
        OverflowError,
    ),
    "NaN, which JSON does not have": (
        json_answer(SOFTMAX_OUTPUTS, first("data", [float("nan"), 0.5, 0.5])),
        ValueError,
    ),
    "a null nested where the shape is flat": (
        json_answer(SOFTMAX_OUTPUTS, both(first("shape", [2]), first("data", [[0.5, None]]))),
        ValueError,
    ),
    "data nested otherwise than the shape": (
        json_answer(SOFTMAX_OUTPUTS, first("data", [[0.1], [0.2], [0.7]])),
        ValueError,
    ),
    "ragged data": (
        json_answer(SOFTMAX_OUTPUTS, both(first("shape", [1, 3]), first("data", [[0.1, 0.2], [0.7]]))),
        ValueError,
    ),
    "lists beside numbers": (json_answer(SOFTMAX_OUTPUTS, first("data", [[0.1, 0.2], 0.7])), ValueError),
    "data that is not a list": (json_answer(SOFTMAX_OUTPUTS, first("data", 0.5)), ValueError),
}


@CALLS
@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_200_is_an_api_error_with_the_cause_and_the_status(
    call: Callable[..., SoftmaxResult], case: str
) -> None:
    (body, headers), cause = MALFORMED[case]
    with pytest.raises(MalformedAnswerError) as raised:
        call(body, headers)
    error = raised.value
    assert isinstance(error, ApiError)
    assert error.status == 200
    assert error.title == "Malformed answer"
    assert error.detail
    assert error.request_id == "from-the-proxy"
    if cause is not None:
        assert isinstance(error.__cause__, cause), repr(error.__cause__)


@CALLS
def test_json_data_flat_or_nested_as_the_shape_is_read_and_null_is_nan(
    call: Callable[..., SoftmaxResult],
) -> None:
    # As the service's decoder reads a request's data: flat (as the service writes it) or nested as the shape;
    # the service writes a non-finite number as null.
    nested = both(first("shape", [1, 3]), first("data", [[0.25, None, 0.5]]))
    result = call(*json_answer(SOFTMAX_OUTPUTS, nested))
    assert result.probabilities.shape == (1, 3)
    assert result.probabilities[0, [0, 2]].tolist() == [0.25, 0.5]
    assert np.isnan(result.probabilities[0, 1])
    flat = call(JSON_ANSWER, JSON_HEADERS)
    np.testing.assert_allclose(flat.probabilities, PROBABILITIES, rtol=1e-15)
    assert int(flat.argmax) == 1


V1_ANSWER = {"output": [2.0, 3.0], "weights": [0.5, 0.5], "scale": 0.5, "empty_rows": []}


@pytest.mark.parametrize(
    ("member", "value"),
    [("output", ["2.0", "3.0"]), ("weights", [True, 0.5]), ("scale", "0.5"), ("empty_rows", [[0.5]])],
)
def test_a_v1_answer_is_read_as_strictly(member: str, value: Any) -> None:
    # A call /v2 cannot carry goes to /v1, as JSON (every call the contract describes travels on /v2 today, so
    # its reader is called directly); its answer's numbers are checked as a /v2 answer's are.
    outputs = _v1_outputs(ATTENTION, json.dumps(V1_ANSWER).encode(), None)
    assert outputs["output"].tolist() == [2.0, 3.0]
    with pytest.raises(ValueError, match=r"data holds .* where (numbers|integers) go"):
        _v1_outputs(ATTENTION, json.dumps({**V1_ANSWER, member: value}).encode(), None)


PROBE_ANSWERS = [{"live": "false"}, {"live": 0}, {"live": None}, {}, {"ready": "true"}, {"ready": 1}]


@pytest.mark.parametrize("answer", PROBE_ANSWERS, ids=[json.dumps(a) for a in PROBE_ANSWERS])
def test_a_probe_whose_flag_is_no_json_boolean_is_malformed(answer: dict[str, Any]) -> None:
    probe = "ready" if "ready" in answer else "health"
    body, headers = _json(answer)
    transport = answering(body, headers)
    with (
        Client("http://service.test", transport=transport) as service,
        pytest.raises(MalformedAnswerError) as raised,
    ):
        getattr(service, probe)()
    assert raised.value.status == 200

    async def call() -> None:
        async with AsyncClient("http://service.test", transport=answering(body, headers)) as service:
            await getattr(service, probe)()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as thread, pytest.raises(MalformedAnswerError):
        thread.submit(lambda: asyncio.run(call())).result(timeout=60)


@pytest.mark.parametrize("flag", [True, False])
def test_a_probe_answers_its_json_boolean(flag: bool) -> None:
    for probe, member in (("health", "live"), ("ready", "ready")):
        body, headers = _json({member: flag})
        with Client("http://service.test", transport=answering(body, headers)) as service:
            assert getattr(service, probe)() is flag


@CALLS
@pytest.mark.parametrize("status", [401, 502, 503])
def test_an_error_status_without_a_problem_document_is_malformed_with_its_status(
    call: Callable[..., SoftmaxResult], status: int
) -> None:
    # A proxy's own error page: still the status it came with, and the page's text to read.
    with pytest.raises(MalformedAnswerError) as raised:
        call(b"<html><h1>Bad Gateway</h1></html>", {"Content-Type": "text/html"}, status=status)
    assert raised.value.status == status
    assert "Bad Gateway" in raised.value.detail
    assert isinstance(raised.value.__cause__, json.JSONDecodeError)


@CALLS
def test_the_service_s_own_problem_stays_a_plain_api_error(call: Callable[..., SoftmaxResult]) -> None:
    problem = {"type": "urn:x:validation-error", "title": "Invalid request", "status": 422, "detail": "no"}
    with pytest.raises(ApiError) as raised:
        call(json.dumps(problem).encode(), {"Content-Type": "application/problem+json"}, status=422)
    assert type(raised.value) is ApiError
    assert (raised.value.status, raised.value.title, raised.value.detail) == (422, "Invalid request", "no")


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_corruption_of_an_answer_is_a_result_or_an_api_error(data: st.DataObject) -> None:
    body = bytearray(GOOD_BODY)
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.integers(0, len(body) - 1))
        body[where] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(body)))
    length = data.draw(
        st.sampled_from([GOOD_HEADERS[HEADER], str(data.draw(st.integers(-2, len(body) + 2)))])
    )
    outcome = _outcome(lambda: call_sync(bytes(body[:cut]), {**GOOD_HEADERS, HEADER: length}))
    assert outcome in ("a result", "ApiError 200"), outcome


def _outcome(call: Callable[[], SoftmaxResult]) -> str:
    """What a call gave: a result of the right shape, an ApiError and its status, or what else it raised."""
    try:
        result = call()
    except ApiError as error:
        return f"ApiError {error.status}"
    except Exception as error:  # the test's point: nothing else may escape
        return repr(error)
    return (
        "a result"
        if result.probabilities.shape == (3,)
        else f"a result of shape {result.probabilities.shape}"
    )


def test_a_v1_null_is_read_as_v2_answers_the_same_value() -> None:
    # /v1 writes an empty row's log-sum-exp and a zero probability's log as null; /v2's binary answers hold
    # -inf there, and the client read NaN from /v1 (a review found the two routes disagreeing).
    attention = _v1_outputs(ATTENTION, json.dumps({**V1_ANSWER, "logsumexp": [None, 1.5]}).encode(), None)
    assert attention["logsumexp"].tolist() == [-np.inf, 1.5]
    softmax = {"probabilities": [0.0, 1.0], "log_probabilities": [None, 0.0], "argmax": 1, "entropy": 0.0}
    answer = _v1_outputs(SOFTMAX, json.dumps(softmax).encode(), None)
    assert answer["log_probabilities"].tolist() == [-np.inf, 0.0]
