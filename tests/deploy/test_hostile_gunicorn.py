"""Hostile clients against gunicorn with gunicorn_settings.py: bounded series, recycled workers, lying bodies.

Loopback only; every flood is bounded in count.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from deploy.attack import parse_answer
from deploy.launch import Server, start
from deploy.slow_clients import SEED_BODY
from service.server.worker import MAX_HEAD_BYTES

pytestmark = pytest.mark.gunicorn

BODY_LIMIT = 4096  # a small MAX_BODY_BYTES, so the limit can be reached with a few KiB
FLOOD = 500  # requests per flood round
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    metrics_dir = tmp_path_factory.mktemp("hostile-metrics")
    running = start(
        env={"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), "MAX_BODY_BYTES": str(BODY_LIMIT)}, workers=2
    )
    yield running
    assert running.terminate() == 0, running.log()


def raw_answer(server: Server, raw: bytes, *, half_close: bool = False) -> bytes:
    """Send ``raw`` on a fresh connection and read the answer to the end (``half_close``: then end the
    sending side, as a client whose body stops short of what it declared does).

    ``Connection: close`` is added to the head so the server closes after its answer: a gevent worker
    (the default) would otherwise keep the connection alive for the next request.
    """
    request_line, _, rest = raw.partition(b"\r\n")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request_line + b"\r\nConnection: close\r\n" + rest)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def exchange(server: Server, raw: bytes, *, half_close: bool = False) -> tuple[int, dict[str, str], bytes]:
    """:func:`raw_answer`'s status, headers (lower-case names) and body."""
    answer = parse_answer(raw_answer(server, raw, half_close=half_close))
    return answer.status, answer.headers, answer.body


def _series(server: Server) -> list[dict[str, str]]:
    text = httpx.get(server.url("/metrics"), timeout=30).text
    return [
        sample.labels
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("attention_http_")
    ]


def _access_lines(server: Server) -> list[dict[str, object]]:
    return [json.loads(line) for line in list(server.stdout) if line.startswith("{")]


def test_a_flood_of_made_up_methods_and_paths_adds_no_series(server: Server) -> None:
    _series(server)
    _series(server)  # both workers may have served a scrape by now
    counts = []
    for round_ in (1, 2):
        for n in range(FLOOD):
            token = f"R{round_}N{n}"
            status, _, _ = exchange(
                server,
                f"M{token} /{token}?{token} HTTP/1.1\r\nHost: x\r\nX-Request-ID: {token}\r\n\r\n".encode(),
            )
            assert status in (404, 405)
        series = _series(server)
        assert not any("R1N" in json.dumps(labels) or "R2N" in json.dumps(labels) for labels in series)
        counts.append(len(series))
    assert counts[0] == counts[1]
    assert len(httpx.get(server.url("/metrics"), timeout=30).content) < 100_000
    files = list(server.metrics_dir.glob("*.db"))
    assert sum(path.stat().st_blocks * 512 for path in files) < 2 * 1024 * 1024, files  # on-disk size
    assert {labels.get("method") for labels in series} <= {"GET", "HEAD", "POST", "OPTIONS", "other", None}


def test_content_length_beyond_64_bits_still_gets_its_log_line(server: Server) -> None:
    raw = (
        b"POST /v1/softmax HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"X-Request-ID: huge-claim\r\nContent-Length: 18446744073709551616\r\n\r\n{}"
    )
    status, _, _ = exchange(server, raw)
    assert status in (400, 413)
    server.wait_for(
        lambda: any(line["request_id"] == "huge-claim" for line in _access_lines(server)), "log line"
    )
    (line,) = [line for line in _access_lines(server) if line["request_id"] == "huge-claim"]
    assert line["request_bytes"] == 0  # the claim was refused before a byte was read
    assert line["declared_bytes"] == 2**63 - 1
    assert line["declared_bytes_clamped"] is True


def _chunked(body: bytes, chunk: int = 1000) -> bytes:
    pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)]
    return b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces) + b"0\r\n\r\n"


def _softmax_body(size: int) -> bytes:
    """A valid softmax body of exactly ``size`` bytes (padded with spaces, which JSON ignores)."""
    body = b'{"logits": [1.0, 2.0]}'
    return body + b" " * (size - len(body))


CHUNKED_HEAD = (
    b"POST /v1/softmax HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\nX-Request-ID: %s\r\n\r\n"
)


def test_chunked_body_of_exactly_the_limit_is_accepted_like_a_content_length(server: Server) -> None:
    body = _softmax_body(BODY_LIMIT)
    with_length = (
        b"POST /v1/softmax HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    assert exchange(server, with_length)[0] == 200
    status, _, answer = exchange(server, CHUNKED_HEAD % b"chunked-at-limit" + _chunked(body))
    assert status == 200, answer
    assert json.loads(answer)["probabilities"] == pytest.approx(
        [0.2689414213699951, 0.7310585786300049], rel=1e-12
    )
    over = exchange(server, CHUNKED_HEAD % b"chunked-over" + _chunked(_softmax_body(BODY_LIMIT + 1)))
    assert over[0] == 413
    server.wait_for(
        lambda: any(line["request_id"] == "chunked-at-limit" for line in _access_lines(server)), "log line"
    )
    (line,) = [line for line in _access_lines(server) if line["request_id"] == "chunked-at-limit"]
    assert line["request_bytes"] == BODY_LIMIT


@pytest.mark.parametrize(
    "chunks",
    [b"zz\r\n{}\r\n0\r\n\r\n", b"2\r\n{}XX0\r\n\r\n", b"-2\r\n{}\r\n0\r\n\r\n"],
    ids=["size-not-hex", "missing-terminator", "negative-size"],
)
def test_malformed_chunked_body_is_a_400_not_a_500(server: Server, chunks: bytes) -> None:
    status, headers, body = exchange(server, CHUNKED_HEAD % b"bad-chunks" + chunks)
    assert status == 400, body
    assert headers["content-type"] == "application/problem+json"
    assert not server.stderr_contains("unhandled error")


WORKED_EXAMPLE = SEED_BODY


def _attention_head(extra: bytes) -> bytes:
    return b"POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra + b"\r\n"


@pytest.mark.parametrize("missing", [1, 1000])
def test_a_body_shorter_than_its_content_length_is_a_400_not_computed(server: Server, missing: int) -> None:
    # The client ends its side after fewer bytes than it declared: the message is incomplete (RFC 9112
    # section 8), but its bytes were a whole JSON document, and it was computed (a 200).
    declared = b"Content-Length: %d\r\n" % (len(WORKED_EXAMPLE) + missing)
    status, headers, body = exchange(server, _attention_head(declared) + WORKED_EXAMPLE, half_close=True)
    assert status == 400, body
    assert headers["content-type"] == "application/problem+json"
    problem = json.loads(body)
    assert list(problem["errors"]) == ["Content-Length"]
    assert f"{len(WORKED_EXAMPLE)} of the {len(WORKED_EXAMPLE) + missing:,}" in problem["detail"]


def test_a_compressed_body_shorter_than_its_content_length_is_a_400(server: Server) -> None:
    compressed = gzip.compress(WORKED_EXAMPLE)
    declared = b"Content-Encoding: gzip\r\nContent-Length: %d\r\n" % (len(compressed) + 50)
    status, _, body = exchange(server, _attention_head(declared) + compressed, half_close=True)
    assert status == 400, body
    assert list(json.loads(body)["errors"]) == ["Content-Length"]


def test_a_chunked_body_cut_off_is_a_400_naming_transfer_encoding(server: Server) -> None:
    chunks = _chunked(WORKED_EXAMPLE, chunk=20)[: -len(b"0\r\n\r\n")]  # no last chunk
    head = _attention_head(b"Transfer-Encoding: chunked\r\n")
    status, _, body = exchange(server, head + chunks, half_close=True)
    assert status == 400, body
    assert list(json.loads(body)["errors"]) == ["Transfer-Encoding"]


@pytest.mark.parametrize("coding", [b"gzip", b"deflate", b"compress"])
def test_a_transfer_coding_the_service_does_not_undo_is_a_501(server: Server, coding: bytes) -> None:
    # gunicorn passes gzip, deflate and compress before chunked to the app, which read the body as if it
    # were plain: an uncompressed body so labelled was computed (a 200).
    head = _attention_head(b"Transfer-Encoding: %s, chunked\r\n" % coding)
    status, _, body = exchange(server, head + _chunked(WORKED_EXAMPLE))
    assert status == 501, body
    assert list(json.loads(body)["errors"]) == ["Transfer-Encoding"]


def test_a_script_name_header_is_not_trusted(server: Server) -> None:
    # gunicorn took SCRIPT_NAME from any loopback client (its default forwarded_allow_ips), and a path
    # outside it was a 500.
    status, _, body = exchange(server, b"GET /livez HTTP/1.1\r\nHost: x\r\nSCRIPT_NAME: /nope\r\n\r\n")
    assert status == 200, body


def test_gunicorns_errors_carry_the_phrase_of_their_status(server: Server) -> None:
    # gunicorn passes "Bad Request" as the reason of its 501 (and of its 500).
    head = _attention_head(b"Transfer-Encoding: br, chunked\r\n")
    answer = raw_answer(server, head + _chunked(WORKED_EXAMPLE))
    assert answer.startswith(b"HTTP/1.1 501 Not Implemented\r\n"), answer[:200]
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["title"] == "Not Implemented"
    # In RFC 9110's words whatever the Python (3.11's http.HTTPStatus says "Request-URI Too Long").
    answer = raw_answer(server, b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 414 URI Too Long\r\n"), answer[:200]


def _head_of(size: int) -> bytes:
    """A complete GET /livez head of ``size`` bytes, in fields of at most 8,000 bytes (gunicorn's limit for
    one is 8,190)."""
    start, end = b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n", b"\r\n"
    fields, left, number = [], size - len(start) - len(end), 0
    while left > 0:
        prefix = b"X-%d: " % number
        value = min(8000, left - len(prefix) - 2)
        fields.append(prefix + b"a" * value + b"\r\n")
        left -= len(fields[-1])
        number += 1
    head = start + b"".join(fields) + end
    assert len(head) == size
    return head


def test_a_request_head_unended_after_32_kib_is_a_431_and_one_within_it_is_served(server: Server) -> None:
    # gunicorn's own limits allow 100 fields of 8,190 bytes (800 KB), which its parser scans again after every
    # 8 KiB read: 60 such heads held a worker's loop 1.8 s and 45 MB outside the memory budget.
    # (raw_answer adds a "Connection: close" line of 19 bytes.) A head that ends in the read crossing the
    # bound is served, whatever the reads: so the refused one is longer than the bound and one read of 8 KiB.
    assert parse_answer(raw_answer(server, _head_of(MAX_HEAD_BYTES - 19))).status == 200
    answer = raw_answer(server, _head_of(MAX_HEAD_BYTES + 8192))
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answer[:200]
    refused = parse_answer(answer)
    assert refused.headers["content-type"] == "application/problem+json"
    problem = json.loads(refused.body)
    assert f"not ended after {MAX_HEAD_BYTES:,} bytes" in problem["detail"]
    assert problem["error"] == problem["detail"]  # the worker writes it, on any path: /v2's member too


def test_a_huge_unfinished_request_head_is_answered_431_without_waiting_for_its_end(server: Server) -> None:
    """A 785 KB head that never ends (98 fields, within gunicorn's 100): the server answers once 32 KiB have
    come, where it had read on and waited for the head's end until HEADER_TIMEOUT_SECONDS closed it."""
    head = _head_of(785_000)[:-2]
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(head)  # the server reads and discards what follows its answer (a lingering close)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answer[:200]


def test_later_heads_on_a_kept_alive_connection_have_the_same_bound(server: Server) -> None:
    small = b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        for _ in range(3):  # the bound is per head, not per connection: 3 × 30 KB pass
            sock.sendall(_head_of(30_000).replace(b"Connection: close", b"Connection: keep-alive"))
            assert _read_answer(sock).startswith(b"HTTP/1.1 200 ")
        sock.sendall(small)
        assert _read_answer(sock).startswith(b"HTTP/1.1 200 ")
        sock.sendall(_head_of(MAX_HEAD_BYTES + 8192 + 100))
        assert _read_answer(sock).startswith(b"HTTP/1.1 431 ")


@pytest.mark.parametrize("after", ["body", "pipelined"])
def test_what_follows_a_head_in_the_read_that_ends_it_is_not_counted_as_head(
    server: Server, after: str
) -> None:
    # A 30 KB head and a body (or a request pipelined after it), sent in two parts so that gunicorn's reads do
    # not fall on 8 KiB: the read ending the head held what follows it too, and that was refused as head.
    # (The last request of each says "Connection: close", so the answers are read to the connection's end.)
    if after == "body":
        body = json.dumps({"logits": [1.0] * 400}).encode()  # within this server's MAX_BODY_BYTES
        framing = b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        request = _head_of(30_000).replace(b"GET /livez", b"POST /v1/softmax", 1)[:-2] + framing + body
    else:
        request = _head_of(30_000).replace(b"Connection: close", b"X-Kept: alive") + _head_of(9_000)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request[:1000])
        time.sleep(0.3)  # (the first read takes these 1,000 bytes alone)
        sock.sendall(request[1000:])
        answers = b""
        while chunk := sock.recv(65536):
            answers += chunk
    assert answers.count(b"HTTP/1.1 200 OK\r\n") == (2 if after == "pipelined" else 1), answers[:300]


@pytest.mark.parametrize(
    "connection",
    [
        b"Connection: keep-alive, close",
        b"Connection: close, keep-alive",
        b"Connection: te\r\nConnection: Close",
    ],
)
def test_a_close_among_the_connection_options_ends_the_connection_after_the_answer(
    server: Server, connection: bytes
) -> None:
    # RFC 9112, section 9.6: gunicorn honoured only a first Connection line of exactly "close", and served the
    # request pipelined after the close.
    first = b"GET /livez HTTP/1.1\r\nHost: x\r\n" + connection + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(first + b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = _read_answer(sock)
        assert answer.startswith(b"HTTP/1.1 200 ")
        assert parse_answer(answer).headers["connection"] == "close"
        assert sock.recv(65536) == b""  # closed: the second request is not served


def _read_answer(sock: socket.socket) -> bytes:
    """One answer with a Content-Length body, read off a kept-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        assert more, "closed before the answer's head"
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(parse_answer(head + b"\r\n\r\n").headers["content-length"])
    while len(body) < length:
        more = sock.recv(65536)
        assert more, "closed before the answer's end"
        body += more
    return head + b"\r\n\r\n" + body


def test_recycled_workers_keep_their_counts_and_do_not_grow_the_metrics_directory(
    tmp_path: Path,
) -> None:
    metrics_dir = tmp_path / "metrics"
    recycling = start(
        env={
            "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
            "GUNICORN_MAX_REQUESTS": "8",
            "GUNICORN_MAX_REQUESTS_JITTER": "0",
        },
        workers=2,
    )
    try:
        sent = 80  # about ten recycles of each worker's 8 requests, counting the probes
        for _ in range(sent):
            assert httpx.get(recycling.url("/livez"), timeout=30).status_code == 200
        # Both serving: a new worker folds in the files of those it replaces once it has built the app, and
        # by then it has files of its own (its connection metrics, from its start).
        recycling.wait_for(recycling.ready, "2 workers serving")
        text = httpx.get(recycling.url("/metrics"), timeout=30).text
        served = {
            sample.labels["method"]: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "attention_http_requests_total" and sample.labels["endpoint"] == "/livez"
        }
        assert served == {"GET": sent}

        def files() -> list[str]:
            return sorted(path.name for path in metrics_dir.glob("*.db"))

        # Two live workers' counter, histogram and live-gauge files, and one archive of counters and one of
        # histograms (live gauges are not archived: a dead worker's are deleted). Every request counts towards
        # a recycle, the probes and the scrape above too, so a worker may have just been replaced: its files
        # stay until the new worker has built its app and folds them in (it has files of its own from its
        # start), so the directory is given the time a worker takes to start.
        recycling.wait_for(lambda: len(files()) <= 2 * 3 + 2, "at most 8 metrics files")
        assert {"counter_archive.db", "histogram_archive.db"} <= set(files())
    finally:
        assert recycling.terminate() == 0, recycling.log()


def test_an_http_1_1_request_without_host_is_a_400_naming_it(server: Server) -> None:
    # RFC 9112 section 3.2: a server MUST answer 400 to an HTTP/1.1 request without Host. It was served.
    status, _, body = exchange(server, b"GET /livez HTTP/1.1\r\n\r\n")
    assert status == 400, body
    problem = json.loads(body)
    assert problem["type"].endswith("missing-host")
    assert list(problem["errors"]) == ["Host"]
    # HTTP/1.0 may leave it out; with it, HTTP/1.1 is served
    assert exchange(server, b"GET /livez HTTP/1.0\r\n\r\n")[0] == 200
    assert exchange(server, b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200


def test_a_host_value_that_is_no_host_is_a_400_naming_it(server: Server) -> None:
    # RFC 9112 section 3.2: so is a Host with an invalid value, in any version; they were served.
    for host in (b"a b", b"[:::::1]:80", b"caf\xc3\xa9"):
        for version in (b"1.1", b"1.0"):
            status, _, body = exchange(
                server, b"GET /livez HTTP/" + version + b"\r\nHost: " + host + b"\r\n\r\n"
            )
            assert status == 400, (host, version, body)
            problem = json.loads(body)
            assert problem["type"].endswith("invalid-host")
            assert list(problem["errors"]) == ["Host"]
    assert exchange(server, b"GET /livez HTTP/1.1\r\nHost: attention_api:8000\r\n\r\n")[0] == 200


def test_gunicorns_own_errors_carry_the_open_inference_protocols_error_member(server: Server) -> None:
    # The app adds it on /v2; what gunicorn refuses before the app runs had only the problem's members, so a
    # /v2 client (tritonclient reads "error") saw no message.
    head = b"POST /v2/models/attention/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    status, _, body = exchange(server, head + b"Content-Length: -5\r\n\r\n")
    assert status == 400
    problem = json.loads(body)
    assert problem["error"] == problem["detail"]
    assert "CONTENT-LENGTH" in problem["detail"]


def test_gunicorns_own_errors_carry_a_request_id_cors_and_a_log_line_and_are_counted(server: Server) -> None:
    counted = 'attention_http_requests_total{endpoint="<unmatched>",method="other",status="414"}'
    before = server.sample(counted)
    status, headers, body = exchange(server, b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 414
    assert server.sample(counted) == before + 1  # as the app counts its own answers: none goes unseen
    request_id = headers["x-request-id"]
    assert json.loads(body)["request_id"] == request_id
    assert headers["access-control-allow-origin"] == "*"  # CORS_ORIGINS is "*" by default
    assert "X-Request-ID" in headers["access-control-expose-headers"]
    server.wait_for(
        lambda: any(line["request_id"] == request_id for line in _access_lines(server)), "log line"
    )
    (line,) = [line for line in _access_lines(server) if line["request_id"] == request_id]
    assert (line["status"], line["answered_by"], line["path"]) == (414, "gunicorn", None)


def test_access_log_off_silences_gunicorns_own_answers_too() -> None:
    # ACCESS_LOG=0 turned off the app's lines only: a 414 (or any answer gunicorn wrote) still printed one.
    running = start(env={"ACCESS_LOG": "0"}, workers=1)
    try:
        counted = 'attention_http_requests_total{endpoint="<unmatched>",method="other",status="414"}'
        before = running.sample(counted)
        assert exchange(running, b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 414
        seed = httpx.post(f"{running.base_url}/v1/attention", content=SEED_BODY, headers=JSON)
        assert seed.status_code == 200
        running.wait_for(lambda: running.sample(counted) == before + 1, "the 414 counted")
    finally:
        assert running.terminate() == 0, running.log()
    assert _access_lines(running) == []  # all of the server's output, read to its end


def test_gunicorns_own_answers_are_logged_and_counted_after_the_api_keys_file_is_gone(tmp_path: Path) -> None:
    # Reading ACCESS_LOG read every setting, API_KEYS_FILE's file too: once it was gone (rotated), each answer
    # gunicorn wrote was neither logged nor counted.
    keys = tmp_path / "keys"
    keys.write_text("a-key-of-sixteen-or-more\n")
    running = start(env={"API_KEYS_FILE": str(keys)}, workers=1)
    try:
        keys.unlink()
        counted = 'attention_http_requests_total{endpoint="<unmatched>",method="other",status="414"}'
        before = running.sample(counted)
        assert exchange(running, b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 414
        running.wait_for(lambda: running.sample(counted) == before + 1, "the 414 counted")
    finally:
        assert running.terminate() == 0, running.log()
    assert [line["status"] for line in _access_lines(running) if line.get("answered_by")] == [414]


def test_a_body_of_tiny_chunks_is_400_naming_transfer_encoding_and_the_worker_lives() -> None:
    """gunicorn parses every chunk in Python: 16 MiB of 1-byte chunks held the worker's loop until it was
    killed (2 MB held /livez 9.7 s). Past a tenth of framing (and 1 MiB + 64 KiB besides, what gunicorn
    may have received ahead) the body is refused after reading about 230 KB of it; chunks of 100 bytes (6 %
    framing) and large chunks, which gunicorn reads ahead of what it hands out, are read as before."""
    running = start(workers=1)
    try:
        pid = running.worker_pids()
        body = _softmax_body(1024 * 1024)
        for size in (100, 256 * 1024, 1024 * 1024, len(body)):
            status, _, answer = exchange(running, CHUNKED_HEAD % b"chunks" + _chunked(body, chunk=size))
            assert status == 200, (size, answer[:300])
        wire = CHUNKED_HEAD % b"chunks-of-1" + _chunked(body[: 384 * 1024], chunk=1)  # 2.25 MiB sent
        with socket.create_connection(("127.0.0.1", running.port), timeout=10) as sock:

            def send() -> None:
                with contextlib.suppress(OSError):  # the server closes once it has answered
                    sock.sendall(wire)

            sender = threading.Thread(target=send)
            sender.start()
            answer = b""
            with contextlib.suppress(OSError):
                while chunk := sock.recv(65536):
                    answer += chunk
                    if b"\r\n\r\n" in answer and answer.rstrip().endswith(b"}"):
                        break
            sender.join(10)
        head, _, problem = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400"), answer[:300]
        assert b"application/problem+json" in head
        assert "Transfer-Encoding" in json.loads(problem)["errors"]
        assert httpx.get(running.url("/livez"), timeout=10).status_code == 200
        assert running.worker_pids() == pid  # the same worker: not killed
    finally:
        assert running.terminate() == 0, running.log()
