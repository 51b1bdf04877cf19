"""Request bodies sent with Content-Encoding gzip or deflate, on /v1 and /v2: inflated to the same answers as
plain bodies, counted at their inflated size against MAX_BODY_BYTES and the memory budget, and a zip bomb
refused with a 413 after holding no more than one step of it.

The test clients here do not check the contract: openapi-core would read the compressed bytes as JSON.
"""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

from service import create_app
from service.settings import MIB
from service.web.admission import Reservation, admission_of
from service.web.encodings import INFLATE_STEP, MAX_GZIP_MEMBERS, inflate
from service.web.problems import Problem
from tests.problems import assert_problem

SOFTMAX = {"logits": [[2.0, 1.0, 0.1], [0.5, -1.0, 3.0]], "temperature": 0.7}


def _raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


# Each coding as clients write it: gzip (tritonclient, curl --compressed's counterpart), zlib for "deflate"
# (RFC 9110, tritonclient), and raw deflate, which some clients send as "deflate".
CODERS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "gzip": ("gzip", gzip.compress),
    "x-gzip": ("x-gzip", gzip.compress),
    "deflate (zlib)": ("deflate", zlib.compress),
    "deflate (raw)": ("deflate", _raw_deflate),
    "gzip, two members": ("GZip", lambda data: gzip.compress(data[:7]) + gzip.compress(data[7:])),
}


def _client(**config: Any) -> FlaskClient:
    return create_app({"TESTING": True, **config}).test_client()


@pytest.fixture(scope="module")
def plain() -> FlaskClient:
    return _client()


def _post_compressed(client: FlaskClient, path: str, body: bytes, coding: str, **headers: str) -> Any:
    content_type = headers.pop("content_type", "application/json")
    return client.post(
        path, data=body, content_type=content_type, headers={"Content-Encoding": coding, **headers}
    )


@pytest.mark.parametrize("coder", CODERS)
def test_a_compressed_v1_body_answers_as_the_plain_one(plain: FlaskClient, coder: str) -> None:
    header, compress = CODERS[coder]
    expected = plain.post("/v1/softmax", json=SOFTMAX).get_json()
    response = _post_compressed(plain, "/v1/softmax", compress(json.dumps(SOFTMAX).encode()), header)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.get_json() == expected


@pytest.mark.parametrize("coder", ["gzip", "deflate (zlib)"])
def test_a_compressed_binary_v2_body_counts_its_header_length_in_inflated_bytes(
    plain: FlaskClient, coder: str
) -> None:
    # As tritonclient frames it: Inference-Header-Content-Length is the JSON header's length before the
    # whole body is compressed.
    header, compress = CODERS[coder]
    logits = np.array([[2.0, 1.0, 0.1], [0.5, -1.0, 3.0]])
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "logits",
                    "shape": [2, 3],
                    "datatype": "FP64",
                    "parameters": {"binary_data_size": 48},
                }
            ],
            "parameters": {"temperature": 0.7},
        }
    ).encode()
    response = _post_compressed(
        plain,
        "/v2/models/softmax/infer",
        compress(head + logits.astype("<f8").tobytes()),
        header,
        content_type="application/octet-stream",
        **{"Inference-Header-Content-Length": str(len(head))},
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    outputs = {output["name"]: output for output in response.get_json()["outputs"]}
    expected = plain.post("/v1/softmax", json=SOFTMAX).get_json()
    np.testing.assert_allclose(
        np.reshape(outputs["probabilities"]["data"], (2, 3)), expected["probabilities"], rtol=1e-12, atol=0
    )


def test_a_compressed_json_v2_body_and_index_request_are_read(plain: FlaskClient) -> None:
    infer = {"inputs": [{"name": "logits", "shape": [3], "datatype": "FP64", "data": [1.0, 2.0, 3.0]}]}
    response = _post_compressed(
        plain, "/v2/models/softmax/infer", gzip.compress(json.dumps(infer).encode()), "gzip"
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    probabilities = {o["name"]: o for o in response.get_json()["outputs"]}["probabilities"]["data"]
    np.testing.assert_allclose(probabilities, np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum(), rtol=1e-12)
    index = _post_compressed(plain, "/v2/repository/index", gzip.compress(b'{"ready": true}'), "gzip")
    assert index.get_json() == plain.post("/v2/repository/index").get_json()


@pytest.mark.parametrize("path", ["/v1/softmax", "/v2/models/softmax/infer"])
@pytest.mark.parametrize("coding", ["br", "zstd", "compress", "deflate, gzip", "x-made-up"])
def test_other_codings_are_415_naming_the_header(plain: FlaskClient, path: str, coding: str) -> None:
    response = _post_compressed(plain, path, b'{"logits": [1.0, 2.0]}', coding)
    problem = assert_problem(response, 415, field="Content-Encoding", says=coding)
    assert response.headers["Accept-Encoding"] == "gzip, deflate"
    assert "error" in problem if path.startswith("/v2") else "error" not in problem


@pytest.mark.parametrize(
    ("body", "coding", "says"),
    [
        (b"this is not gzip", "gzip", "not valid gzip data"),
        (gzip.compress(b'{"logits": [1.0, 2.0]}')[:-12], "gzip", "ends before the end"),
        (zlib.compress(b'{"logits": [1.0, 2.0]}') + b"tail", "deflate", "4 bytes follow"),
        (gzip.compress(b'{"logits": [1.0, 2.0]}') + b"tail", "gzip", "not valid gzip data"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/softmax", "/v2/models/softmax/infer"])
def test_bytes_that_are_not_what_the_header_says_are_400_naming_it(
    plain: FlaskClient, path: str, body: bytes, coding: str, says: str
) -> None:
    problem = assert_problem(
        _post_compressed(plain, path, body, coding), 400, field="Content-Encoding", says=says
    )
    assert problem["type"].endswith(":malformed-body")


def _padded_softmax(size: int) -> bytes:
    """A /v1/softmax body of exactly ``size`` bytes (JSON whitespace pads it)."""
    body = json.dumps(SOFTMAX).encode()
    return body + b" " * (size - len(body))


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_the_inflated_size_counts_against_the_body_limit(coding: str) -> None:
    compress = gzip.compress if coding == "gzip" else zlib.compress
    client = _client(MAX_CONTENT_LENGTH=4096)
    at_limit = compress(_padded_softmax(4096))
    assert len(at_limit) < 200  # the compressed bytes are far under the limit
    assert _post_compressed(client, "/v1/softmax", at_limit, coding).status_code == 200
    problem = assert_problem(
        _post_compressed(client, "/v1/softmax", compress(_padded_softmax(4097)), coding), 413
    )
    assert problem["type"].endswith(":body-too-large")
    assert "4,096 bytes (MAX_BODY_BYTES)" in problem["detail"]
    assert "inflated size" in problem["detail"]


def _bomb(inflated_bytes: int) -> bytes:
    """gzip of ``inflated_bytes`` zero bytes: about a thousandth of that."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(MIB)
    pieces = [compressor.compress(zeros) for _ in range(inflated_bytes // MIB)]
    return b"".join([*pieces, compressor.flush()])


@pytest.mark.parametrize("path", ["/v1/softmax", "/v2/models/softmax/infer"])
def test_a_zip_bomb_is_413_holding_no_more_than_the_limit(path: str) -> None:
    bomb = _bomb(1024 * MIB)  # 1 GiB of zeros in about 1 MB
    assert len(bomb) < 2 * MIB
    client = _client(MAX_CONTENT_LENGTH=MIB)
    tracemalloc.start()
    try:
        response = _post_compressed(client, path, bomb, "gzip")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    problem = assert_problem(response, 413)
    assert problem["type"].endswith(":body-too-large")
    # The compressed body (copied a few times by the test client and read whole, as any body) and the
    # inflated megabyte: megabytes, not the gigabyte.
    assert peak < 16 * MIB, f"{peak:,} bytes allocated at the peak"


def test_the_inflated_body_is_held_from_the_memory_budget() -> None:
    # With 7 of an 8 MiB budget held by other uploads, a plain body of 2 MiB does not fit (503 overloaded
    # before it is read); the same body compressed to a few KB gets the same answer once it is inflated past
    # what the budget can hold.
    app = create_app(
        {
            "TESTING": True,
            "MEMORY_BUDGET_BYTES": 8 * MIB,
            "MAX_CONTENT_LENGTH": 4 * MIB,
            "COMPUTE_QUEUE_SECONDS": 0.1,  # how long the plain body waits for room before its 503
        }
    )
    admission = admission_of(app)
    assert admission is not None
    others = [Reservation(admission) for _ in range(2)]
    assert all(other.take(3 * MIB, upload=True) for other in others)
    client = app.test_client()
    body = _padded_softmax(2 * MIB)
    try:
        plain = client.post("/v1/softmax", data=body, content_type="application/json")
        assert_problem(plain, 503, says="MEMORY_BUDGET_BYTES")
        compressed = _post_compressed(client, "/v1/softmax", gzip.compress(body), "gzip")
        problem = assert_problem(compressed, 503, says="MEMORY_BUDGET_BYTES")
        assert problem["type"].endswith(":overloaded")
        assert compressed.headers["Retry-After"]
        small = _post_compressed(client, "/v1/softmax", gzip.compress(_padded_softmax(1000)), "gzip")
        assert small.status_code == 200  # what the refused request held was given back
    finally:
        for other in others:
            other.release()


def test_inflate_holds_each_step_before_inflating_it() -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    held: list[int] = []
    assert inflate(gzip.compress(data), "gzip", limit=None, hold=held.append) == data
    assert sum(held) <= len(data) + INFLATE_STEP
    assert max(held) <= INFLATE_STEP

    def refuse(size: int) -> None:
        raise RuntimeError("no room")

    with pytest.raises(RuntimeError):
        inflate(gzip.compress(data), "gzip", limit=None, hold=refuse)


def test_a_body_that_inflates_to_a_large_one_schedules_a_memory_release_after_its_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from service.web import memory

    released: list[bool] = []
    monkeypatch.setattr(memory, "large_request_done", lambda: released.append(True))
    client = _client()
    small = _post_compressed(client, "/v1/softmax", gzip.compress(_padded_softmax(1000)), "gzip")
    assert small.status_code == 200
    small.close()
    assert released == []
    body = gzip.compress(_padded_softmax(2 * MIB))
    assert len(body) < 64 * 1024
    large = _post_compressed(client, "/v1/softmax", body, "gzip")
    assert large.status_code == 200
    large.close()
    assert released == [True]


def test_gzip_members_are_read_across_steps_and_counted() -> None:
    """Members of every size, some spanning several steps of compressed input, one after another; past
    MAX_GZIP_MEMBERS the body is a 400, and it is found without copying the rest of the body per member (as
    it was: 240,000 empty members, 4.8 MB, held the worker's loop until gunicorn killed the worker)."""
    rng = np.random.default_rng(7)
    parts = [rng.bytes(size) for size in (0, 1, 70_000, 300_000, 5, 200_000)]
    body = b"".join(gzip.compress(part) for part in parts)
    assert inflate(body, "gzip", limit=None, hold=lambda size: None) == b"".join(parts)
    just_enough = gzip.compress(b"") * MAX_GZIP_MEMBERS
    assert inflate(just_enough, "gzip", limit=None, hold=lambda size: None) == b""
    with pytest.raises(Problem) as refused:
        inflate(just_enough + gzip.compress(b"x"), "gzip", limit=None, hold=lambda size: None)
    assert refused.value.status == 400
    assert f"more than {MAX_GZIP_MEMBERS:,} gzip members" in refused.value.detail


@pytest.mark.parametrize("path", ["/v1/softmax", "/v2/models/softmax/infer"])
def test_a_body_of_very_many_gzip_members_is_400_naming_the_header(plain: FlaskClient, path: str) -> None:
    body = gzip.compress(b"") * 240_000  # 4.8 MB
    problem = assert_problem(
        _post_compressed(plain, path, body, "gzip"), 400, field="Content-Encoding", says="gzip members"
    )
    assert problem["type"].endswith(":malformed-body")
