"""The cyclic garbage collector is paused while a large body is decoded, and only then."""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from collections.abc import Iterator

import marshmallow as ma
import orjson
import pytest
from flask import Flask
from flask.testing import FlaskClient

import service.protocols.declarations.likelihood as likelihood_module
import service.protocols.v2.views as v2_views
import service.web.admission as admission_module
import service.web.garbage as garbage
from service.protocols.declarations.model import declared_models
from service.protocols.v1 import parsing
from service.requests import Work
from service.web.admission import (
    DECODE_ON_THREAD_BYTES,
    PAUSE_COLLECTION_BYTES,
    answered,
    decode_off_the_loop,
)
from service.web.garbage import collection_paused


@pytest.fixture(autouse=True)
def collector_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    assert gc.isenabled()
    monkeypatch.setattr(garbage, "_blocks", 0)  # whatever a failed test left counted is forgotten after it
    yield
    gc.enable()  # whatever a failed test left behind


def test_the_collector_is_off_in_the_block_and_on_again_after() -> None:
    with collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_collector_is_on_again_when_the_block_raises() -> None:
    with pytest.raises(ValueError, match="decoding failed"), collection_paused():
        raise ValueError("decoding failed")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    with collection_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_nested_blocks_leave_the_collector_on() -> None:
    with collection_paused():
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_overlapping_blocks_turn_it_on_when_the_last_ends() -> None:
    """As a decoding thread and a compute thread do: the first to end must not turn it on under the other."""
    decoding, building = collection_paused(), collection_paused()
    decoding.__enter__()
    building.__enter__()
    decoding.__exit__(None, None, None)
    assert not gc.isenabled()
    building.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_block_that_starts_as_the_last_one_ends_is_still_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A block entered on another thread while the last block is turning the collector back on: it must not
    take the collector for someone else's (off, no block counted) and run unpaused."""
    ending, rival = collection_paused(), collection_paused()
    rival_entered, rival_may_end = threading.Event(), threading.Event()

    def rival_block() -> None:
        with rival:
            rival_entered.set()
            rival_may_end.wait(10)

    thread = threading.Thread(target=rival_block)
    enable = gc.enable

    def enable_with_a_rival_starting() -> None:
        thread.start()
        rival_entered.wait(0.5)  # at once without the lock; with it, the rival waits for this to end
        enable()

    ending.__enter__()
    monkeypatch.setattr(gc, "enable", enable_with_a_rival_starting)
    ending.__exit__(None, None, None)
    monkeypatch.undo()
    try:
        assert rival_entered.wait(10)
        assert not gc.isenabled()  # the rival's block holds it off
    finally:
        rival_may_end.set()
        thread.join(10)
    assert gc.isenabled()


class _Node:
    """An object in a reference cycle, seen through a weak reference."""

    def __init__(self) -> None:
        self.itself = self


def _garbage_cycle() -> weakref.ref[_Node]:
    return weakref.ref(_Node())


def test_a_block_that_starts_late_in_a_long_pause_collects_the_young_and_joins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Overlapping blocks could keep the collector off for good: once a pause has lasted MAX_PAUSE_SECONDS,
    the next block to start collects what was made meanwhile (another request's cycle here), and is paused
    too."""
    now = [100.0]
    monkeypatch.setattr(garbage, "_clock", lambda: now[0])
    first, within, late, later = (collection_paused() for _ in range(4))
    first.__enter__()
    cycle = _garbage_cycle()
    now[0] += garbage.MAX_PAUSE_SECONDS - 0.5
    within.__enter__()  # joins the pause, collecting nothing
    assert cycle() is not None
    first.__exit__(None, None, None)
    assert not gc.isenabled()
    now[0] += 1.0
    late.__enter__()  # the pause has lasted long enough: the young generation is collected first
    assert cycle() is None
    assert not gc.isenabled()
    another = _garbage_cycle()
    now[0] += 1.0
    later.__enter__()  # within MAX_PAUSE_SECONDS of that collection: none
    assert another() is not None
    for block in (within, late):
        block.__exit__(None, None, None)
        assert not gc.isenabled()  # every block that joined holds it off
    later.__exit__(None, None, None)
    assert gc.isenabled()


class _Kernel:
    def work(self) -> Work:
        raise NotImplementedError  # not asked for here

    def run(self) -> str:
        return f"ran with the collector {'on' if gc.isenabled() else 'off'}"


def test_an_answer_is_built_with_the_collector_paused() -> None:
    def answer(result: str) -> tuple[str, bool]:
        return result, gc.isenabled()

    assert answered(_Kernel(), answer).run() == ("ran with the collector on", False)
    assert gc.isenabled()


@pytest.mark.parametrize(
    ("protocol", "module", "builder"),
    [("v1", likelihood_module, "_top_logprobs"), ("v2", v2_views, "encode_outputs")],
)
def test_a_served_answer_is_built_with_the_collector_paused(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch, protocol: str, module: object, builder: str
) -> None:
    """Through the view, admission and the request's timeline, which takes the kernel and the answer apart."""
    collector_on: list[bool] = []
    build = getattr(module, builder)

    def recording(*args: object) -> object:
        collector_on.append(gc.isenabled())
        return build(*args)

    monkeypatch.setattr(module, builder, recording)
    logits, targets = [[2.0, 0.5, -1.0], [0.1, 1.5, 0.3]], [0, 1]
    if protocol == "v1":
        body: dict[str, object] = {"logits": logits, "targets": targets, "top_logprobs": 1}
        answer = client.post("/v1/log-likelihood", json=body)
    else:
        inputs = [
            {"name": "logits", "shape": [2, 3], "datatype": "FP64", "data": logits},
            {"name": "targets", "shape": [2], "datatype": "INT64", "data": targets},
        ]
        answer = client.post("/v2/models/log-likelihood/infer", json={"inputs": inputs})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert collector_on == [False]
    assert gc.isenabled()


def test_a_large_body_is_decoded_with_the_collector_paused() -> None:
    assert decode_off_the_loop(gc.isenabled, body_bytes=DECODE_ON_THREAD_BYTES + 1) is False
    assert gc.isenabled()
    with pytest.raises(orjson.JSONDecodeError):
        decode_off_the_loop(lambda: orjson.loads(b"[0,"), body_bytes=DECODE_ON_THREAD_BYTES + 1)
    assert gc.isenabled()


class _Document:
    """Stands for a parsed body (which is lists and dicts, which take no weak references)."""


def test_a_failed_decoding_frees_its_document_before_the_collector_is_back() -> None:
    """An error's traceback holds its frames and their locals: the document would outlive the pause."""
    alive: list[weakref.ref[_Document]] = []

    def decode() -> None:
        document = _Document()
        alive.append(weakref.ref(document))
        raise ValueError("the schema refused it")

    with pytest.raises(ValueError, match="refused") as refused:
        decode_off_the_loop(decode, body_bytes=DECODE_ON_THREAD_BYTES + 1)
    assert alive[0]() is None
    assert "the schema refused it" in str(refused.value)  # the error itself is intact


def test_a_failed_decoding_frees_its_document_held_by_an_error_it_was_raised_from() -> None:
    """The schema catches one error and raises another: the first's frames hold the document too."""
    alive: list[weakref.ref[_Document]] = []

    def parse() -> None:
        document = _Document()
        alive.append(weakref.ref(document))
        raise KeyError("inner")

    def decode() -> None:
        try:
            parse()
        except KeyError as error:
            raise ValueError("the schema refused it") from error

    with pytest.raises(ValueError, match="refused") as refused:
        decode_off_the_loop(decode, body_bytes=DECODE_ON_THREAD_BYTES + 1)
    assert isinstance(refused.value.__cause__, KeyError)  # held here, with its traceback
    assert alive[0]() is None


def _empty_lists() -> int:
    return sum(1 for item in gc.get_objects() if type(item) is list and not item)


class _Refusal(ValueError):
    def __init__(self, document: _Document) -> None:
        super().__init__("refused")
        self.document = document


def test_an_error_handed_back_from_a_thread_is_in_no_reference_cycle() -> None:
    """unwrap() raises the thread's error: kept in its frame, the error and the frame its traceback holds
    formed a cycle, and what the error held (a parsed body) waited for a full garbage collection."""
    document = _Document()
    alive = weakref.ref(document)
    outcome = admission_module._Outcome[None](error=_Refusal(document))
    del document
    gc.disable()  # what is not freed by reference counting stays
    try:
        with pytest.raises(_Refusal):
            outcome.unwrap()
        assert alive() is None
    finally:
        gc.enable()


def test_a_refusal_of_the_schema_lets_go_of_the_large_body_as_its_decoding_ends(app: Flask) -> None:
    """marshmallow's error holds the parsed body (``data``); the /v1 decoding drops it before the collector's
    pause ends, so the body is not alive when the next collections run."""
    rows = DECODE_ON_THREAD_BYTES // 3 + 1
    body = b'{"logits":[' + b",".join([b"[]"] * rows) + b"]}"
    schema = declared_models()["softmax"].request_schema
    gc.collect()
    gc.disable()
    try:
        before = _empty_lists()
        with app.app_context(), pytest.raises(ma.ValidationError) as refused:
            decode_off_the_loop(lambda: parsing._load(body, schema), body_bytes=len(body))
        assert "logits" in refused.value.messages
        left = _empty_lists() - before  # with the error still held
    finally:
        gc.enable()
    assert left < rows // 100


def test_parsing_many_rows_starts_no_collection_while_paused() -> None:
    """What the pause is for: a body of one-element rows makes a container per row, and without the pause
    collections run inside the one parse call (this count is what made 16 MiB of them 5× slower)."""
    rows = 100_000
    body = b"[" + b",".join([b"[0]"] * rows) + b"]"
    started: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(count)
    try:
        orjson.loads(body)
        without_pause = len(started)
        started.clear()
        with collection_paused():
            orjson.loads(body)
        assert started == []
    finally:
        gc.callbacks.remove(count)
    if sys.version_info >= (3, 12):
        # 3.12 and later collect at the interpreter's next check, after the one parse call: at most once
        assert without_pause >= 1
    else:
        # 3.11 collects inside the call, once per gc.get_threshold()[0] (700) new containers
        assert without_pause >= rows // gc.get_threshold()[0] // 2


def test_bodies_over_64_kib_decoded_on_the_loop_are_decoded_with_the_collector_paused() -> None:
    # 1 MiB of one-element rows parsed in 127 ms with the collector running, 22 ms without (on the loop)
    assert gc.isenabled()
    assert (
        decode_off_the_loop(gc.isenabled, body_bytes=PAUSE_COLLECTION_BYTES) is True
    )  # the worked example's
    assert decode_off_the_loop(gc.isenabled, body_bytes=PAUSE_COLLECTION_BYTES + 1) is False
    assert decode_off_the_loop(gc.isenabled, body_bytes=DECODE_ON_THREAD_BYTES + 1) is False  # on a thread
    assert gc.isenabled()
