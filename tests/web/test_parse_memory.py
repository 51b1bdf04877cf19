"""What parsing a JSON body holds is held from the budget before the parse, from a count of the body: the peak
that bound stands for is measured (a fresh process's RSS), and a body whose bound no request may hold is
refused without being parsed, on /v1 and /v2 alike."""

from __future__ import annotations

import gzip
import random
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import orjson
import pytest
from flask import Flask

from deploy.overload import logits_of
from service import create_app
from service.protocols.v1 import parsing
from service.protocols.v2 import tensors
from service.web import parse_memory
from service.web.admission import Reservation, admission_of
from service.web.parse_memory import parse_bytes_bound
from tests.problems import assert_problem

MIB = 1024 * 1024
NESTED = b"[" * 50 + b"]" * 50


# Run in a fresh process from the repository's root: the peak RSS growth of parsing the text on stdin.
PEAK_OF_PARSING = textwrap.dedent(
    """
    import gc, os, sys, orjson
    from pathlib import Path
    from deploy.launch import memory_of
    gc.disable()  # as the service parses a large body (service/web/garbage.py)
    text = sys.stdin.buffer.read()
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from the RSS now
    before = memory_of(os.getpid()).rss
    document = orjson.loads(text)
    print(memory_of(os.getpid()).peak - before)
    """
)
ROOT = Path(__file__).resolve().parents[2]


def test_long_tokens_are_counted_as_a_regular_expression_finds_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The count of runs of 3 or more non-punctuation bytes, across the blocks it is counted in."""
    monkeypatch.setattr(parse_memory, "_BLOCK", 7)  # so that runs cross blocks
    rng = random.Random(5)
    alphabet = b',:[]{}" \t\r\n0123456789.-eE'
    for length in [0, 1, 2, 3, 4, 7, 8, 13, 14, 15, 64, 1000]:
        for _ in range(20):
            text = bytes(rng.choice(alphabet) for _ in range(length))
            expected = len(re.findall(rb'[^,:\[\]{}" \t\r\n]{3,}', text))
            assert parse_memory._long_tokens(text, len(text)) == expected, text


# Texts whose parse is measured against the bound: ``{"logits": [row, row, ...]}`` of 8 MiB for a short row,
# or around one long one.
SHAPES = {
    "floats": b"0.5",
    "negative-ints": b"-7",
    "float-rows": b"[0.5]",
    "int-rows": b"[0]",
    "negative-int-rows": b"[-7]",
    "empty-rows": b"[]",
    "nested-empty": b"[[]]",
    "nested-50": NESTED,
    "strings": b'"a"',
    "objects": b'{"a":0}',
    "objects-with-numbers": b'{"k123456":123456}',
    "objects-of-lists": b'{"":[]}',
    "pairs": b"[0.5,0.25]",
    "digit-rows": b"[1,0,1,0]",
    # one string of 8 MiB whose last character is beyond the Basic Multilingual Plane: 4 bytes each
    "wide-string": b'"' + b"a" * (8 * MIB) + "\U0001f600".encode() + b'"',
    "wide-string-escaped": b'"' + b"a" * (8 * MIB) + b'\\ud83d\\ude00"',
    # one dict of 4-byte keys whose table has just grown (copied: both tables alive for a moment)
    "dict-just-grown": b"{" + b",".join(b'"%s":0' % chr(0x10000 + i).encode() for i in range(699_051)) + b"}",
}


@pytest.mark.parametrize("row", list(SHAPES.values()), ids=list(SHAPES))
def test_the_bound_holds_the_measured_peak_of_parsing(row: bytes) -> None:
    """Measured in a fresh process: peak RSS growth while orjson parses about 8 MiB (the bound is 8 % or
    more above the peaks of service/web/parse_memory.py; a parse of another shape above it fails here)."""
    text = logits_of(row, 8 * MIB) if len(row) < 1000 else b'{"logits":[' + row + b"]}"
    measured = subprocess.run(
        [sys.executable, "-c", PEAK_OF_PARSING],
        input=text,
        capture_output=True,
        check=True,
        timeout=60,
        cwd=ROOT,
    )
    peak = int(measured.stdout)
    assert peak > len(text)  # the measurement saw the parse (the document alone is more than that)
    # within=0: the bound with its numbers counted one by one, the tighter of its two (the service counts
    # them so when the first does not fit)
    bound = parse_bytes_bound(text, within=0)
    assert peak <= bound <= parse_bytes_bound(text), (peak / len(text), bound / len(text))


def test_the_bound_of_a_prefix_is_the_bound_of_that_prefix_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parse_memory, "_BLOCK", 7)  # the prefix ends inside a block
    text = b'{"inputs":[{"name":"x","data":[[1,2],[3,4]]}]}' + bytes(range(256)) * 4
    header = text.index(b"]}]}") + 4
    for within in (None, 0):
        assert parse_bytes_bound(text, header, within=within) == parse_bytes_bound(
            text[:header], within=within
        )
        assert parse_bytes_bound(text, header, within=within) < parse_bytes_bound(text, within=within)


def test_small_integers_are_counted_one_by_one_only_when_the_first_bound_is_over() -> None:
    """[1,0,1,0] rows: the first bound takes a number per 3 digits, the second none (all cached)."""
    text = b'{"x":[' + b",".join([b"[1,0,1,0]"] * 1000) + b"]}"
    first = parse_bytes_bound(text)
    counted = parse_bytes_bound(text, within=0)
    assert counted < first
    assert parse_bytes_bound(text, within=first) == first
    assert parse_bytes_bound(text, within=first - 1) == counted


@pytest.fixture
def app() -> Flask:
    # 8 MiB of budget: 7.5 MiB of it for a large request.
    return create_app({"TESTING": True, "MEMORY_BUDGET_BYTES": 8 * MIB, "MAX_CONTENT_LENGTH": 2 * MIB})


@pytest.fixture
def parsed_lengths(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The lengths of the texts orjson was asked to parse, by /v1 and /v2."""
    parsed: list[int] = []
    loads = orjson.loads

    def counting_loads(text: bytes | memoryview) -> object:
        parsed.append(len(text))  # the test client's reading of answers among them
        return loads(text)

    # the module both codecs parse with (parsing.orjson is tensors.orjson)
    assert parsing.orjson is tensors.orjson
    monkeypatch.setattr(parsing.orjson, "loads", counting_loads)
    return parsed


def test_a_body_whose_parse_no_request_may_hold_is_413_before_it_is_parsed(
    app: Flask, parsed_lengths: list[int]
) -> None:
    body = logits_of(NESTED, 300 * 1024)  # 300 KiB: 17 MiB to parse, bounded
    client = app.test_client()
    with client.post("/v1/softmax", data=body, content_type="application/json") as answer:
        problem = assert_problem(answer, 413, says="Parsing this 307,")
    assert problem["type"].endswith(":body-too-large")
    assert "MEMORY_BUDGET_BYTES" in problem["detail"]
    # Gzip sends it in 2 KB; it counts as it is inflated.
    with client.post(
        "/v1/softmax",
        data=gzip.compress(body),
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    ) as answer:
        assert_problem(answer, 413, says="Parsing this 307,")
    header = orjson.dumps(
        {"inputs": [{"name": "logits", "shape": [1], "datatype": "FP64", "data": [[]] * 60_000}]}
    )
    with client.post("/v2/models/softmax/infer", data=header, content_type="application/json") as answer:
        assert_problem(answer, 413, says="Parsing this")
    assert not any(length > 64 * 1024 for length in parsed_lengths)  # the answers are smaller
    admission = admission_of(app)
    assert admission is not None
    assert admission.held_bytes == 0


def test_a_body_of_the_same_size_whose_parse_fits_is_answered(app: Flask, parsed_lengths: list[int]) -> None:
    body = logits_of(b"0.5", 300 * 1024)  # 5.4 MiB to parse, bounded: it fits in 7.5 MiB with its body
    with app.test_client().post("/v1/softmax", data=body, content_type="application/json") as answer:
        assert answer.status_code == 200, answer.get_data()[:300]
        assert answer.json is not None
        assert answer.json["probabilities"][0] == pytest.approx(1 / 76_800, rel=1e-12)
    assert parsed_lengths.count(len(body)) == 1


@pytest.mark.parametrize("comes_back", [True, False], ids=["room-comes-back", "room-does-not"])
def test_a_body_whose_parse_does_not_fit_now_waits_for_room(
    comes_back: bool, parsed_lengths: list[int]
) -> None:
    """As a body waits for room to be read: answered once the room comes back within COMPUTE_QUEUE_SECONDS,
    else a 503 with Retry-After, unparsed."""
    app = create_app(
        {
            "TESTING": True,
            "MEMORY_BUDGET_BYTES": 8 * MIB,
            "MAX_CONTENT_LENGTH": 2 * MIB,
            "COMPUTE_QUEUE_SECONDS": 1,
        }
    )
    admission = admission_of(app)
    assert admission is not None
    other = Reservation(admission)
    assert other.take(4 * MIB, large=True)  # another request's computation
    giving_back = threading.Timer(0.2, other.release)
    if comes_back:
        giving_back.start()
    try:
        body = logits_of(b"0.5", 300 * 1024)
        with app.test_client().post("/v1/softmax", data=body, content_type="application/json") as answer:
            if comes_back:
                assert answer.status_code == 200, answer.get_data()[:300]
            else:
                problem = assert_problem(answer, 503, says="parsing this body may need")
                assert problem["type"].endswith(":overloaded")
                assert answer.headers["Retry-After"] == "1"
    finally:
        giving_back.cancel()  # (a no-op once it has run)
        other.release()
    assert parsed_lengths.count(len(body)) == (1 if comes_back else 0)
    assert admission.held_bytes == 0


def test_a_large_body_with_nan_is_a_400_that_names_the_place_without_a_second_parse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The standard library, which takes NaN, reads again only bodies up to 1 MiB (its parse holds the
    loop 3.5 times as long as orjson's)."""
    monkeypatch.setattr(parsing.json, "loads", lambda text: pytest.fail("parsed again"))
    body = b'{"logits":[0.5,NaN,' + b"0.5," * (parsing.STANDARD_PARSE_BYTES // 4) + b"0.5]}"
    with (
        create_app({"TESTING": True})
        .test_client()
        .post("/v1/softmax", data=body, content_type="application/json") as answer
    ):
        problem = assert_problem(answer, 400, says="line 1 column 16 (char 15). JSON has no NaN or Infinity.")
    assert problem["type"].endswith(":malformed-json")


def test_a_small_body_with_nan_still_names_its_field(app: Flask) -> None:
    with app.test_client().post(
        "/v1/softmax", data=b'{"logits":[0.5,NaN]}', content_type="application/json"
    ) as answer:
        assert_problem(answer, 422, field="logits")


def test_the_nan_hint_finds_the_literal_after_text_beyond_ascii(monkeypatch: pytest.MonkeyPatch) -> None:
    """orjson's position counts characters, not bytes."""
    numbers = b"0.5," * (parsing.STANDARD_PARSE_BYTES // 4) + b"0.5]}"
    body = '{"café":1,"logits":[0.5,NaN,'.encode() + numbers
    monkeypatch.setattr(parsing.json, "loads", lambda text: pytest.fail("parsed again"))
    with (
        create_app({"TESTING": True})
        .test_client()
        .post("/v1/softmax", data=body, content_type="application/json") as answer
    ):
        assert_problem(answer, 400, says="JSON has no NaN or Infinity.")
