"""Admission in process: the shared memory budget, the compute slots and their queue, readiness, closing.

The gevent worker's parts (the kernel on a thread, head and body deadlines) are tested against gunicorn in
tests/deploy/test_admission_gunicorn.py; here the same accounting runs with real threads, as it does under
any other server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient

from service import create_app
from service.requests import AttentionRequest
from service.web import admission as admission_module
from service.web.admission import (
    HELD_ELSEWHERE_SECONDS,
    SMALL_BODY_BYTES,
    UPLOAD_SHARE,
    Admission,
    AdmissionLimits,
    Reservation,
    admission_of,
    body_too_large,
)
from service.web.connection import take_close_request
from service.web.limits import binary_answer, expected_cpu_seconds
from service.web.problems import Problem
from tests.problems import assert_problem

SEED = {"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}
MIB = 1024 * 1024


def limits(**changes: Any) -> AdmissionLimits:
    values: dict[str, Any] = {
        "memory_budget_bytes": 64 * MIB,
        "max_body_bytes": 8 * MIB,
        "compute_slots": 1,
        "compute_queue_length": 2,
        "compute_queue_seconds": 3.0,
        "compute_deadline_seconds": 20.0,
        "body_timeout_seconds": 10.0,
        "body_min_bytes_per_second": 1024,
        "header_timeout_seconds": 10.0,
    }
    values.update(changes)
    return AdmissionLimits(**values)


def test_uploads_share_the_budget_and_small_bodies_always_find_room() -> None:
    admission = Admission(limits())
    uploads = [Reservation(admission) for _ in range(7)]
    taken = [reservation.take(7 * MIB, upload=True) for reservation in uploads]
    # 64 MiB × 0.75 = 48 MiB for uploads: six of 7 MiB fit, the seventh does not.
    assert taken == [True] * 6 + [False]
    assert admission.upload_bytes == 42 * MIB
    assert UPLOAD_SHARE * admission.limits.memory_budget_bytes == 48 * MIB
    small = Reservation(admission)
    assert small.take(SMALL_BODY_BYTES, upload=True)  # a small body is not held to the uploads' share
    assert not admission.fits(7 * MIB, upload=True)
    for reservation in [*uploads, small]:
        reservation.release()
    assert (admission.held_bytes, admission.upload_bytes) == (0, 0)
    assert admission.fits(7 * MIB, upload=True)


def test_a_body_over_the_limit_is_413_from_its_headers() -> None:
    admission = Admission(limits())
    too_large = body_too_large(admission, 8 * MIB + 1)
    assert too_large is not None
    assert (too_large.status, too_large.slug) == (413, "body-too-large")
    assert "8,388,608 bytes (MAX_BODY_BYTES)" in too_large.detail
    assert body_too_large(admission, 8 * MIB) is None
    assert body_too_large(admission, None) is None  # chunked: known only as it is read


def test_a_body_without_room_waits_for_it_first_come_first_served() -> None:
    """A body that does not fit waits, unread, for room: four clients sending 9 MB bodies to two workers,
    one of which took three connections, had three answers in seven refused at once for memory that a
    computation and its answer gave back a moment later. Bodies are served in order, except that one that
    fits goes before one ahead of it that does not (as computations do)."""
    admission = Admission(limits(compute_queue_seconds=5.0))
    holder, holder_of_4 = Reservation(admission), Reservation(admission)
    assert holder.take(40 * MIB, upload=True)
    assert holder_of_4.take(4 * MIB, upload=True)  # 44 of uploads' 48 MiB
    order: list[str] = []
    sizes = {"first": 6 * MIB, "second": 2 * MIB, "third": 5 * MIB, "small": SMALL_BODY_BYTES}
    bodies = {name: Reservation(admission) for name in sizes}

    def send(name: str) -> None:
        bodies[name].take_body(sizes[name])
        order.append(name)

    small = threading.Thread(target=send, args=("small",))
    small.start()
    small.join(10)
    assert order == ["small"]  # small bodies have room of their own
    first = threading.Thread(target=send, args=("first",))
    first.start()
    wait_until(lambda: admission.bodies_waiting == 1)
    second = threading.Thread(target=send, args=("second",))
    second.start()
    second.join(10)  # 2 MiB fits (46 of 48 MiB): it does not wait behind the first's 6
    third = threading.Thread(target=send, args=("third",))
    third.start()
    wait_until(lambda: admission.bodies_waiting == 2)
    threading.Event().wait(0.1)
    assert order == ["small", "second"]
    holder_of_4.release()  # either would fit now (42 of 48 MiB held), not both: the first goes first
    first.join(10)
    assert order == ["small", "second", "first"]
    assert admission.bodies_waiting == 1
    holder.release()
    third.join(10)
    assert order == ["small", "second", "first", "third"]
    for reservation in bodies.values():
        reservation.release()
    assert (admission.held_bytes, admission.upload_bytes, admission.bodies_waiting) == (0, 0, 0)


def test_a_body_without_room_is_refused_after_the_queue_wait_or_at_once_past_the_queue_length() -> None:
    admission = Admission(limits(compute_queue_seconds=0.3, compute_queue_length=1))
    holder = Reservation(admission)
    assert holder.take(60 * MIB)
    refusals: list[Problem] = []

    def send() -> None:
        with pytest.raises(Problem) as refused:
            Reservation(admission).take_body(4 * MIB)
        refusals.append(refused.value)

    waiting = threading.Thread(target=send)
    waiting.start()
    wait_until(lambda: admission.bodies_waiting == 1)
    send()  # the queue (of 1) is full: at once
    assert admission.bodies_waiting == 1
    waiting.join(10)
    assert admission.bodies_waiting == 0
    assert [(problem.status, problem.slug) for problem in refusals] == [(503, "overloaded")] * 2
    assert "1 request bodies are already waiting" in refusals[0].detail
    assert "(COMPUTE_QUEUE_LENGTH = 1)" in refusals[0].detail
    assert "within COMPUTE_QUEUE_SECONDS (0.3 s)" in refusals[1].detail  # nothing came back
    assert all(int(problem.headers["Retry-After"]) >= 1 for problem in refusals)
    holder.release()
    assert (admission.held_bytes, admission.upload_bytes) == (0, 0)


class Blocker:
    """A computation that holds its slot until released."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> str:
        self.started.set()
        assert self.release.wait(10)
        return "done"


def hold_a_slot(
    admission: Admission,
    *,
    cpu_seconds: float = 0.0,
    memory_bytes: int = 0,
    reservation: Reservation | None = None,
) -> tuple[Blocker, threading.Thread]:
    """A computation that has started in one of ``admission``'s slots and holds it until released."""
    blocker = Blocker()
    runner = threading.Thread(
        target=admission.run,
        args=(blocker,),
        kwargs={
            "cpu_seconds": cpu_seconds,
            "memory_bytes": memory_bytes,
            "reservation": Reservation(admission) if reservation is None else reservation,
        },
    )
    runner.start()
    assert blocker.started.wait(10)
    return blocker, runner


@pytest.fixture
def busy_admission() -> Iterator[tuple[Admission, Blocker]]:
    """An admission whose one slot is taken by a computation predicted to run a long time."""
    admission = Admission(limits(compute_queue_seconds=0.5))
    blocker, runner = hold_a_slot(admission, cpu_seconds=120.0, memory_bytes=MIB)
    yield admission, blocker
    blocker.release.set()
    runner.join(10)


def test_a_request_that_would_wait_longer_than_the_queue_allows_is_refused_at_once(
    busy_admission: tuple[Admission, Blocker],
) -> None:
    admission, _ = busy_admission
    assert not admission.has_free_slot()
    with pytest.raises(Problem) as refused:
        admission.run(lambda: "never", cpu_seconds=0.0, memory_bytes=0, reservation=Reservation(admission))
    assert (refused.value.status, refused.value.slug) == (503, "overloaded")
    # The running computation was estimated at 120 s: far past the 0.5 s allowed.
    assert int(refused.value.headers["Retry-After"]) > 60


def test_a_full_queue_is_refused_at_once_and_the_queue_drains_in_order() -> None:
    admission = Admission(limits(compute_queue_length=1, compute_queue_seconds=10.0))
    blocker = Blocker()
    ran: list[str] = []  # in the order the computations finished, each while it still held the slot
    answers: dict[str, str] = {}

    def run(name: str, compute: Any) -> None:
        def recorded() -> str:
            answer: str = compute()
            ran.append(name)
            return answer

        answers[name] = admission.run(
            recorded, cpu_seconds=0.0, memory_bytes=0, reservation=Reservation(admission)
        )

    first = threading.Thread(target=run, args=("first", blocker))
    first.start()
    assert blocker.started.wait(10)
    second = threading.Thread(target=run, args=("second", lambda: "second"))
    second.start()
    for _ in range(2000):  # wait (bounded: 10 s) until the second request is queued
        if admission.queued:
            break
        threading.Event().wait(0.005)
    assert admission.queued == 1
    with pytest.raises(Problem) as refused:
        admission.run(lambda: "third", cpu_seconds=0.0, memory_bytes=0, reservation=Reservation(admission))
    assert (refused.value.status, refused.value.slug) == (503, "overloaded")
    assert "COMPUTE_QUEUE_LENGTH" in refused.value.detail
    blocker.release.set()
    first.join(10)
    second.join(10)
    assert ran == ["first", "second"]
    assert answers == {"first": "done", "second": "second"}
    assert admission.busy_slots == 0
    assert admission.has_free_slot()


def test_a_computation_holds_its_memory_until_released_and_waits_for_room() -> None:
    admission = Admission(limits(compute_queue_seconds=0.2))
    held = Reservation(admission)
    assert held.take(60 * MIB)
    reservation = Reservation(admission)
    with pytest.raises(Problem) as refused:  # 8 MiB cannot come free while 60 of 64 are held
        admission.run(lambda: "x", cpu_seconds=0.0, memory_bytes=8 * MIB, reservation=reservation)
    assert refused.value.status == 503
    held.release()
    assert admission.run(lambda: "x", cpu_seconds=0.0, memory_bytes=8 * MIB, reservation=reservation) == "x"
    assert admission.held_bytes == 8 * MIB  # held until the answer has been sent
    reservation.release()
    assert admission.held_bytes == 0


@pytest.fixture
def app() -> Flask:
    return create_app({"TESTING": True, "MEMORY_BUDGET_BYTES": 64 * MIB, "MAX_CONTENT_LENGTH": 8 * MIB})


def test_every_request_gives_back_what_it_held(app: Flask) -> None:
    client = app.test_client()
    admission = admission_of(app)
    assert admission is not None
    for _ in range(3):
        # A server closes each answer once it is sent (the test client only when asked): that gives back
        # what the request held.
        with client.post("/v1/attention", json=SEED) as answer:
            assert answer.status_code == 200
            assert admission.held_bytes > 0
        with client.post("/v1/attention", json={"query": "x"}) as answer:
            assert answer.status_code == 422
    assert (admission.held_bytes, admission.upload_bytes, admission.busy_slots) == (0, 0, 0)


def test_a_body_the_budget_cannot_take_in_time_is_503_before_it_is_read_and_closes_the_connection() -> None:
    app = create_app(
        {
            "TESTING": True,
            "MEMORY_BUDGET_BYTES": 64 * MIB,
            "MAX_CONTENT_LENGTH": 8 * MIB,
            "COMPUTE_QUEUE_SECONDS": 0.2,
        }
    )
    client: FlaskClient = app.test_client()
    admission = admission_of(app)
    assert admission is not None
    holder = Reservation(admission)
    assert holder.take(60 * MIB)
    try:
        body = b'{"logits": [' + b"1.0," * 2_000_000 + b"1.0]}"  # 8 MB: within MAX_BODY_BYTES, not the room
        answer = client.post("/v1/softmax", data=body, content_type="application/json")
        assert_problem(answer, 503)
        assert answer.json is not None
        assert answer.json["type"].endswith(":overloaded")
        assert (
            "could not take a body of 8,000,017 bytes within COMPUTE_QUEUE_SECONDS (0.2 s)"
            in (answer.json["detail"])
        )
        assert int(answer.headers["Retry-After"]) >= 1
        assert take_close_request()  # the server is told to close rather than read the body
        assert client.post("/v1/attention", json=SEED).status_code == 200  # a small one still fits
    finally:
        holder.release()


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("POST", "/v1/softmax", {}, 401),  # no API key
        ("POST", "/v1/softmax", {"Authorization": "Bearer wrong-key"}, 401),
        ("POST", "/v1/sofmax", {"Authorization": "Bearer the-key"}, 404),
        ("PUT", "/v1/softmax", {"Authorization": "Bearer the-key"}, 405),
        ("POST", "/v1/softmax", {"Authorization": "Bearer the-key", "Content-Type": "text/plain"}, 415),
        ("POST", "/v1/softmax", {"Authorization": "Bearer the-key", "Content-Encoding": "br"}, 415),
        (
            "POST",
            "/v2/models/softmax/infer",
            {"Authorization": "Bearer the-key", "Content-Type": "text/csv"},
            415,
        ),
    ],
)
def test_a_body_refused_from_its_head_neither_holds_room_nor_waits_for_it(
    method: str, path: str, headers: dict[str, str], status: int
) -> None:
    """Refused for its key, its route, its media type or its content coding whatever its body, a request
    must not take room in the budget or a place among the bodies waiting for it: it waited for room first,
    then was refused 503 (so clients without a key could fill the queue of bodies and keep out those with
    one)."""
    app = create_app(
        {
            "TESTING": True,
            "MEMORY_BUDGET_BYTES": 64 * MIB,
            "MAX_CONTENT_LENGTH": 8 * MIB,
            "COMPUTE_QUEUE_SECONDS": 0.2,
            "API_KEYS": ["the-key"],
        }
    )
    client: FlaskClient = app.test_client()
    admission = admission_of(app)
    assert admission is not None
    holder = Reservation(admission)
    assert holder.take(60 * MIB)  # no room for the 8 MB body
    try:
        body = b'{"logits": [' + b"1.0," * 2_000_000 + b"1.0]}"
        answer = client.open(
            path, method=method, data=body, headers={"Content-Type": "application/json", **headers}
        )
        assert_problem(answer, status)
        assert take_close_request()  # closed rather than drained
        assert admission.held_bytes == 60 * MIB
    finally:
        holder.release()


@pytest.mark.parametrize(
    ("method", "path", "key", "status"),
    [("POST", "/v1/sofmax", "k", 404), ("GET", "/v1/softmax", "k", 405), ("POST", "/v1/softmax", None, 401)],
)
def test_a_wrong_path_method_or_key_is_said_before_a_body_too_large(
    method: str, path: str, key: str | None, status: int
) -> None:
    app = create_app(
        {"TESTING": True, "MEMORY_BUDGET_BYTES": 64 * MIB, "MAX_CONTENT_LENGTH": 8 * MIB, "API_KEYS": ["k"]}
    )
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    answer = app.test_client().open(
        path, method=method, data=b"1" * (8 * MIB + 1), content_type="application/json", headers=headers
    )
    assert_problem(answer, status)
    assert take_close_request()  # the body is not read


def test_readyz_is_not_ready_while_every_compute_slot_is_busy(app: Flask) -> None:
    client = app.test_client()
    admission = admission_of(app)
    assert admission is not None
    assert client.get("/readyz").status_code == 200
    blocker, runner = hold_a_slot(admission)
    try:
        answer = client.get("/readyz")
        assert_problem(answer, 503)
        assert answer.json is not None
        assert "compute slot" in answer.json["detail"]
        assert client.get("/livez").status_code == 200  # alive all the same
        # Work as small as the worked example needs no slot: it is answered while the slot is busy.
        seed = client.post("/v1/attention", json=SEED)
        assert seed.status_code == 200
        assert seed.json is not None
        assert seed.json["weights"] == pytest.approx([0.3302384506733431, 0.6697615493266569], rel=1e-12)
    finally:
        blocker.release.set()
        runner.join(10)
    assert client.get("/readyz").status_code == 200


def test_an_abandoned_computation_keeps_its_memory_until_its_thread_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The 504 path (the gevent worker's): the request's answer is sent, but its thread still holds the
    inputs, scores and result it computes with, so their share of the budget must stay held until it ends."""
    import gevent

    import service.web.admission as admission_module

    monkeypatch.setattr(admission_module, "under_gevent", lambda: True)  # the kernel on a pool thread
    admission = Admission(limits(compute_deadline_seconds=0.05))
    blocker = Blocker()
    reservation = Reservation(admission)
    assert reservation.take(MIB, upload=True)  # its body
    with pytest.raises(Problem) as abandoned:
        admission.run(blocker, cpu_seconds=1.0, memory_bytes=8 * MIB, reservation=reservation)
    assert (abandoned.value.status, abandoned.value.slug) == (504, "deadline-exceeded")
    assert blocker.started.wait(10)
    reservation.release()  # the 504 has been sent
    assert admission.busy_slots == 1
    assert admission.held_bytes == 8 * MIB  # the body's 1 MiB and the 7 MiB more the computation holds
    blocker.release.set()
    for _ in range(1000):  # bounded (10 s): until the thread has ended and its greenlet gave everything back
        if admission.busy_slots == 0:
            break
        gevent.sleep(0.01)
    assert (admission.held_bytes, admission.upload_bytes, admission.busy_slots) == (0, 0, 0)


def test_the_worked_example_finds_room_while_the_largest_computation_runs(app: Flask) -> None:
    """A computation's estimate (24 bytes a work element, 16 a body byte) may be the whole budget or more: the
    largest one the default limits accept is. Computations and large uploads leave a share of the budget to
    small requests, so the worked example is still answered (a 503 before: its 57-byte body found no room)."""
    client = app.test_client()
    admission = admission_of(app)
    assert admission is not None
    budget = admission.limits.memory_budget_bytes
    heavy = Reservation(admission)
    blocker, runner = hold_a_slot(admission, cpu_seconds=1.0, memory_bytes=10 * budget, reservation=heavy)
    try:
        assert admission.held_bytes >= budget // 2
        with client.post("/v1/attention", json=SEED) as seed:
            assert seed.status_code == 200
            assert seed.json is not None
            assert seed.json["weights"] == pytest.approx([0.3302384506733431, 0.6697615493266569], rel=1e-12)
        assert not admission.fits(SMALL_BODY_BYTES + 1, upload=True)  # a large upload is kept out of it
    finally:
        blocker.release.set()
        runner.join(10)
        heavy.release()
    assert (admission.held_bytes, admission.upload_bytes, admission.busy_slots) == (0, 0, 0)


def wait_until(condition: Callable[[], bool]) -> None:
    for _ in range(2000):  # bounded: 10 s
        if condition():
            return
        threading.Event().wait(0.005)
    raise AssertionError("not within 10 s")


def wait_until_queued(admission: Admission, count: int) -> None:
    for _ in range(2000):  # bounded: 10 s
        if admission.queued >= count:
            return
        threading.Event().wait(0.005)
    raise AssertionError(f"{admission.queued} queued, not {count}")


def test_a_request_waiting_for_memory_lets_one_queued_behind_it_that_fits_go_first() -> None:
    """Two requests at the work limit on one worker: the first queued needs nearly the whole budget, part of
    which the second holds (its body, reserved from its headers). Served strictly in order, the first waited
    for memory only the second could give back, and was refused 503 after COMPUTE_QUEUE_SECONDS while no
    computation ran; now the second goes first, and then the first."""
    admission = Admission(limits(compute_queue_seconds=5.0))
    budget = admission.large_request_budget()
    ran: list[str] = []
    outcomes: dict[str, object] = {}
    blocker, runner = hold_a_slot(admission)  # holds the slot while both queue
    second_body = Reservation(admission)
    assert second_body.take(4 * MIB, upload=True)

    def request(name: str, reservation: Reservation, memory: int) -> None:
        try:
            outcomes[name] = admission.run(
                lambda: ran.append(name), cpu_seconds=0.0, memory_bytes=memory, reservation=reservation
            )
        except Problem as problem:
            outcomes[name] = problem.status
        finally:
            reservation.release()

    first = threading.Thread(target=request, args=("first", Reservation(admission), budget))
    first.start()
    wait_until_queued(admission, 1)
    second = threading.Thread(target=request, args=("second", second_body, 8 * MIB))
    second.start()
    wait_until_queued(admission, 2)
    blocker.release.set()
    for thread in (runner, first, second):
        thread.join(10)
    assert ran == ["second", "first"]
    assert outcomes == {"first": None, "second": None}
    assert (admission.held_bytes, admission.upload_bytes, admission.busy_slots, admission.queued) == (
        0,
        0,
        0,
        0,
    )


def test_a_request_leaving_the_queue_removes_itself_not_an_equal_one() -> None:
    """Queued requests with the same estimate are different requests: the one that leaves (refused at its
    own, earlier deadline here) must not take another's place in the queue with it."""
    admission = Admission(limits(compute_queue_seconds=10.0))
    blocker, runner = hold_a_slot(admission)
    outcomes: dict[str, object] = {}

    def request(name: str) -> None:
        try:
            outcomes[name] = admission.run(
                lambda: name, cpu_seconds=0.0, memory_bytes=0, reservation=Reservation(admission)
            )
        except Problem as problem:
            outcomes[name] = problem.status

    first = threading.Thread(target=request, args=("first",))
    first.start()
    wait_until_queued(admission, 1)
    admission.limits = limits(compute_queue_seconds=0.2)  # the next request may wait 0.2 s only
    second = threading.Thread(target=request, args=("second",))
    second.start()
    second.join(10)
    assert outcomes == {"second": 503}
    assert admission.queued == 1  # the first is still queued
    blocker.release.set()
    for thread in (runner, first):
        thread.join(10)
    assert outcomes == {"second": 503, "first": "first"}
    assert admission.busy_slots == 0


def test_a_computation_whose_thread_cannot_start_gives_its_slot_back_and_never_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """gevent's pool queues the task before it starts a thread for it: when the thread cannot start (a pids
    or address-space limit), the task stays queued for the next thread, which would run it after its request
    was answered and its slot and memory given back."""
    import service.web.admission as admission_module

    queued: list[Any] = []

    class NoThreads:
        def __init__(self, size: int) -> None:
            pass

        def spawn(self, job: Any) -> None:
            queued.append(job)
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(admission_module, "under_gevent", lambda: True)
    monkeypatch.setattr(admission_module, "ThreadPool", NoThreads)
    admission = Admission(limits())
    reservation = Reservation(admission)
    ran: list[str] = []
    with pytest.raises(RuntimeError, match="can't start new thread"):
        admission.run(lambda: ran.append("x"), cpu_seconds=1.0, memory_bytes=MIB, reservation=reservation)
    reservation.release()
    assert (admission.busy_slots, admission.held_bytes, admission.has_free_slot()) == (0, 0, True)
    (job,) = queued
    job()  # a thread that starts later runs what the pool kept queued
    assert ran == []


def test_what_a_request_held_goes_back_even_when_its_answers_close_raises(app: Flask) -> None:
    """The server closes every answer; a close that raises (a streamed answer's access line written to a
    broken pipe, a call_on_close hook) must not keep the request's memory from the budget for good."""
    from flask import Response

    def fail() -> None:
        raise OSError("broken pipe")

    @app.after_request
    def closes_badly(answer: Response) -> Response:
        answer.call_on_close(fail)
        return answer

    admission = admission_of(app)
    assert admission is not None
    client = app.test_client()
    # A 422: its body was read, so its room was taken, and it is held until the answer is closed.
    answer = client.post("/v1/attention", json={"query": "x"})
    assert answer.status_code == 422
    assert admission.held_bytes > 0
    with pytest.raises(OSError, match="broken pipe"):
        answer.close()
    assert (admission.held_bytes, admission.upload_bytes) == (0, 0)
    # A 415 is answered without reading its body (which takes no room): its connection is closed all the same.
    unread = client.post("/v1/attention", data=b'{"query": [0, 1]}', content_type="text/plain")
    assert unread.status_code == 415
    with pytest.raises(OSError, match="broken pipe"):
        unread.close()
    assert take_close_request()


def test_a_body_limit_no_budget_could_hold_is_refused_at_start() -> None:
    """Bodies over what uploads may hold of the budget could never be read: each would get a 503 "try again"
    for ever, and every chunked body with them (it reserves MAX_BODY_BYTES). The app refuses to start."""
    with pytest.raises(ValueError, match=r"MAX_BODY_BYTES \(33,554,432\).*MEMORY_BUDGET_BYTES"):
        create_app({"TESTING": True, "MEMORY_BUDGET_BYTES": 32 * MIB, "MAX_CONTENT_LENGTH": 32 * MIB})
    create_app({"TESTING": True, "MEMORY_BUDGET_BYTES": 32 * MIB, "MAX_CONTENT_LENGTH": 24 * MIB})  # 0.75


@pytest.mark.parametrize("slot_busy", [True, False], ids=["slot-busy", "slot-free"])
def test_two_requests_at_the_work_limit_do_not_wait_out_each_others_deadline(slot_busy: bool) -> None:
    """Each needs nearly the whole budget and holds its body while it waits: neither fitted while the other
    was queued, so the first was refused after COMPUTE_QUEUE_SECONDS with nothing running, and only then
    did the second run. Now the one behind is refused at once, and the first runs once its body is back.
    With the slot free, the second's body is read while the first already waits for memory."""
    admission = Admission(limits(compute_queue_seconds=30.0))
    holder = hold_a_slot(admission) if slot_busy else None  # holds the slot while both queue
    limit = 10 * admission.limits.memory_budget_bytes  # capped at what computations may hold
    ran: list[str] = []
    outcomes: dict[str, object] = {}
    refused_while_first_waited = threading.Event()
    bodies = {name: Reservation(admission) for name in ("first", "second")}
    assert bodies["second"].take(2 * MIB, upload=True)  # being read while the first queues

    def request(name: str) -> None:
        reservation = bodies[name]
        if name == "first":
            assert reservation.take(2 * MIB, upload=True)  # its body, read before it queues
        try:
            outcomes[name] = admission.run(
                lambda: ran.append(name), cpu_seconds=0.0, memory_bytes=limit, reservation=reservation
            )
        except Problem as problem:
            outcomes[name] = (problem.status, problem.slug, "Retry-After" in problem.headers)
            refused_while_first_waited.set()
        finally:
            reservation.release()  # its answer sent

    first = threading.Thread(target=request, args=("first",))
    first.start()
    wait_until_queued(admission, 1)
    second = threading.Thread(target=request, args=("second",))
    second.start()
    if holder is not None:
        wait_until_queued(admission, 2)  # (with the slot free, the second is refused as soon as it queues)
        holder[0].release.set()  # the slot frees: the first cannot start while the second holds its body
        holder[1].join(10)
    assert refused_while_first_waited.wait(10)  # far inside the 30 s the first may wait
    for thread in (first, second):
        thread.join(10)
    assert outcomes == {"second": (503, "overloaded", True), "first": None}
    assert ran == ["first"]
    assert (admission.held_bytes, admission.upload_bytes, admission.busy_slots, admission.queued) == (
        0,
        0,
        0,
        0,
    )


def test_a_request_waiting_for_memory_is_passed_for_a_while_only() -> None:
    """A request at the work limit needs nearly the whole budget, so it can start only when nothing else on
    its worker holds memory. Smaller requests queued behind it may start first, but not for ever: under a
    steady stream of them (two clients, one always computing or queued while the other is) it was passed
    until COMPUTE_QUEUE_SECONDS and refused 503 each time it was sent. After half that wait it goes first;
    the stream's requests behind it wait, or are refused when it would fit but for their bodies."""
    # (a queue of 8: both clients may be queued at once, for an instant, when it arrives)
    admission = Admission(limits(compute_queue_seconds=2.0, compute_queue_length=8))
    heavy_outcome: list[object] = []
    stream_outcomes: list[object] = []
    heavy_done = threading.Event()

    def smaller_request() -> None:
        body = Reservation(admission)
        try:
            assert body.take(4096)
            stream_outcomes.append(
                admission.run(
                    lambda: threading.Event().wait(0.02),  # returns False: it ran
                    cpu_seconds=0.005,
                    memory_bytes=MIB,
                    reservation=body,
                )
            )
        except Problem as problem:
            stream_outcomes.append(problem.status)
        finally:
            body.release()
        if stream_outcomes[-1] == 503:
            threading.Event().wait(0.05)  # a client that backs off a little after a 503

    def client() -> None:
        for _ in range(400):  # bounded: the stream stops once the heavy request is answered, or after ~8 s
            if heavy_done.is_set():
                return
            smaller_request()

    def heavy_request() -> None:
        body = Reservation(admission)
        try:
            heavy_outcome.append(
                admission.run(
                    lambda: "ran",
                    cpu_seconds=0.0,
                    memory_bytes=admission.large_request_budget(),
                    reservation=body,
                )
            )
        except Problem as problem:
            heavy_outcome.append(problem.status)
        finally:
            body.release()
            heavy_done.set()

    clients = [threading.Thread(target=client) for _ in range(2)]
    for thread in clients:
        thread.start()
    for _ in range(2000):  # bounded: 10 s until the stream runs
        if len(stream_outcomes) >= 4:
            break
        threading.Event().wait(0.005)
    heavy = threading.Thread(target=heavy_request)
    heavy.start()
    heavy.join(10)
    heavy_done.set()
    for thread in clients:
        thread.join(10)
    assert heavy_outcome == ["ran"]
    assert False in stream_outcomes  # the stream ran before and around it
    assert set(stream_outcomes) <= {False, 503}
    assert (admission.held_bytes, admission.upload_bytes, admission.busy_slots, admission.queued) == (
        0,
        0,
        0,
        0,
    )


def test_a_request_waiting_for_memory_held_elsewhere_lets_the_queue_pass_again() -> None:
    """Memory held outside the queue (an answer being written to a slow reader) may never come back while
    the request at the work limit waits: once it has gone first for HELD_ELSEWHERE_SECONDS with the slot
    idle, those behind it start again, long before its own 503 (they waited for that 503 before)."""
    admission = Admission(limits(compute_queue_seconds=2.0, compute_queue_length=8))
    slow_answer = Reservation(admission)
    assert slow_answer.take(8 * MIB)  # held for the whole test
    events: list[str] = []
    blocker, runner = hold_a_slot(admission)  # until the heavy request goes first

    def request(name: str, memory: int) -> None:
        reservation = Reservation(admission)
        try:
            admission.run(lambda: None, cpu_seconds=0.0, memory_bytes=memory, reservation=reservation)
            events.append(f"{name} ran")
        except Problem as problem:
            events.append(f"{name} {problem.status}")
        finally:
            reservation.release()

    heavy = threading.Thread(target=request, args=("heavy", admission.large_request_budget()))
    heavy.start()
    wait_until_queued(admission, 1)
    small = threading.Thread(target=request, args=("small", MIB))
    small.start()
    wait_until_queued(admission, 2)
    threading.Event().wait(1.2)  # past PASSED_FOR_SHARE (1 s): the heavy request goes first
    blocker.release.set()
    for thread in (runner, small, heavy):
        thread.join(10)
    slow_answer.release()
    # The small one ran about HELD_ELSEWHERE_SECONDS after the slot freed, at about 1.45 s, not after the
    # heavy one's 503 at 2 s.
    assert events == ["small ran", "heavy 503"]
    assert (admission.held_bytes, admission.upload_bytes, admission.busy_slots, admission.queued) == (
        0,
        0,
        0,
        0,
    )


def test_a_refused_request_gives_its_body_back_as_it_leaves_the_queue() -> None:
    """A request refused to make room for the one ahead (see _make_room) left the queue, but gave its body
    back only once its 503 had been written: in between, the one ahead counted that body as still held by
    no one it could refuse, and refused the next request behind it too. One refusal is enough here."""
    admission = Admission(limits(compute_queue_seconds=10.0, compute_queue_length=8))
    outcomes: dict[str, object] = {}
    blocker, runner = hold_a_slot(admission)

    def request(name: str, reservation: Reservation, memory: int) -> None:
        try:
            admission.run(lambda: None, cpu_seconds=0.0, memory_bytes=memory, reservation=reservation)
            outcomes[name] = "ran"
        except Problem as problem:
            outcomes[name] = problem.status
            threading.Event().wait(0.05)  # its 503 being written
        finally:
            reservation.release()

    head = threading.Thread(target=request, args=("head", Reservation(admission), 52 * MIB))
    head.start()
    wait_until_queued(admission, 1)
    behind = []
    for number in (1, 2, 3):
        body = Reservation(admission)
        assert body.take(4 * MIB, upload=True)
        # 54 MiB: none fits while the head and the others wait, each fits once they are gone
        thread = threading.Thread(target=request, args=(f"behind {number}", body, 54 * MIB))
        thread.start()
        behind.append(thread)
        wait_until_queued(admission, 1 + number)
    blocker.release.set()  # none behind fits while the head waits: the last one is refused for it
    for thread in (runner, head, *behind):
        thread.join(10)
    assert outcomes == {"behind 3": 503, "head": "ran", "behind 1": "ran", "behind 2": "ran"}
    assert (admission.held_bytes, admission.upload_bytes, admission.busy_slots, admission.queued) == (
        0,
        0,
        0,
        0,
    )


class Requests:
    """Requests run on threads against one admission: each records its outcome and when it had it."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.outcomes: dict[str, object] = {}
        self.at: dict[str, float] = {}
        self.threads: list[threading.Thread] = []

    def send(
        self, name: str, memory: int, *, body: Reservation | None = None, hold: Blocker | None = None
    ) -> None:
        """Queue a computation needing ``memory`` (its ``body`` already held; ``hold`` keeps its slot)."""
        reservation = Reservation(self.admission) if body is None else body

        def request() -> None:
            try:
                self.admission.run(
                    (lambda: None) if hold is None else hold,
                    cpu_seconds=0.0,
                    memory_bytes=memory,
                    reservation=reservation,
                )
                self.outcomes[name] = "ran"
            except Problem as problem:
                self.outcomes[name] = problem.status
            finally:
                self.at[name] = time.monotonic()
                reservation.release()

        thread = threading.Thread(target=request)
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(10)
        admission = self.admission
        assert (admission.held_bytes, admission.upload_bytes, admission.busy_slots, admission.queued) == (
            0,
            0,
            0,
            0,
        )


def head_and_one_behind(*, compute_queue_seconds: float) -> tuple[Reservation, Requests]:
    """An answer being written holds 32 MiB; the head of the queue needs 26, the request behind it (its 4 MiB
    body read) 30: 32 + 4 + 26 > 60 MiB, so neither fits, and the head would were the body behind refused.
    The answer's reservation, and the queued requests."""
    admission = Admission(limits(compute_queue_seconds=compute_queue_seconds, compute_queue_length=8))
    answer = Reservation(admission)
    assert answer.take(32 * MIB)
    requests = Requests(admission)
    behind_body = Reservation(admission)
    assert behind_body.take(4 * MIB, upload=True)  # read while the head queues
    requests.send("head", 26 * MIB)
    wait_until_queued(admission, 1)
    requests.send("behind", 30 * MIB, body=behind_body)
    wait_until_queued(admission, 2)
    return answer, requests


def test_a_request_behind_is_not_refused_for_memory_that_comes_back_in_a_moment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The head of the queue, with the slot free, would fit now were the body of the request queued behind
    it given back, and fits anyway once the answer before it has been sent: that request was refused at once,
    although the answer's memory came back a moment later (four clients, two workers, 9 MB multi-head bodies:
    three answers in seven refused). Now the head waits for that memory up to HELD_ELSEWHERE_SECONDS (here
    made 5 s, so that a loaded machine cannot run it out), and both run."""
    monkeypatch.setattr(admission_module, "HELD_ELSEWHERE_SECONDS", 5.0)
    answer_being_written, requests = head_and_one_behind(compute_queue_seconds=8.0)
    threading.Event().wait(0.1)
    assert requests.outcomes == {}
    answer_being_written.release()  # the answer has been sent
    requests.join()
    assert requests.outcomes == {"head": "ran", "behind": "ran"}


def test_a_request_behind_is_refused_once_the_memory_held_elsewhere_is_waited_for_long_enough() -> None:
    """As above, but the answer's reader is slow: HELD_ELSEWHERE_SECONDS after the request behind queued (not
    at once) it is refused, so that the head runs, rather than both waiting on a reader that may take
    ANSWER_TIMEOUT_SECONDS."""
    queued = time.monotonic()
    slow_answer, requests = head_and_one_behind(compute_queue_seconds=5.0)
    for thread in requests.threads:
        thread.join(10)
    slow_answer.release()
    requests.join()
    assert requests.outcomes == {"head": "ran", "behind": 503}
    assert requests.at["behind"] - queued >= HELD_ELSEWHERE_SECONDS


def test_the_wait_for_memory_held_elsewhere_counts_only_while_a_slot_is_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The head's wait (HELD_ELSEWHERE_SECONDS, here 1 s) for memory held outside the queue starts again after
    a request behind it took the slot: counted from the first time, it had run out when that one's answer
    was being sent, and the request behind was refused at once for memory that came back a moment later."""
    monkeypatch.setattr(admission_module, "HELD_ELSEWHERE_SECONDS", 1.0)
    answer_being_written, requests = head_and_one_behind(compute_queue_seconds=8.0)  # the head's wait starts
    small = Blocker()
    requests.send("small", MIB, hold=small)  # fits: it passes both, and holds the slot 1.5 s
    assert small.started.wait(10)
    threading.Event().wait(1.5)
    small.release.set()  # the head's wait starts again here, not 1.5 s ago
    threading.Event().wait(0.1)
    answer_being_written.release()
    requests.join()
    assert requests.outcomes == {"small": "ran", "head": "ran", "behind": "ran"}


def test_a_body_waiting_for_room_leaves_it_to_the_head_of_the_compute_queue() -> None:
    """Room that comes back while the head of the compute queue (its body read, a slot free) and a body both
    wait for it goes to the head when it cannot go to both: taken by the body, it kept the head waiting
    until its deadline (the body's own request then queued behind it, to be refused for it)."""
    admission = Admission(limits(compute_queue_seconds=5.0, compute_queue_length=8))
    answer_being_written = Reservation(admission)
    assert answer_being_written.take(50 * MIB)
    requests = Requests(admission)
    order: list[str] = []
    body = Reservation(admission)

    def send_body() -> None:
        body.take_body(15 * MIB)  # 50 + 15 > 60 MiB: it waits
        order.append(f"body with {admission.held_bytes // MIB} MiB held")

    sender = threading.Thread(target=send_body)
    sender.start()
    wait_until(lambda: admission.bodies_waiting == 1)  # waiting first, it is woken first
    requests.send("head", 50 * MIB)
    wait_until_queued(admission, 1)
    answer_being_written.release()  # either fits now, not both
    for thread in requests.threads:
        thread.join(10)
    sender.join(10)
    body.release()
    requests.join()
    assert requests.outcomes == {"head": "ran"}
    assert order == ["body with 15 MiB held"]  # after the head's 50 MiB had been given back


def test_small_bodies_are_not_kept_out_by_large_ones_waiting_for_room() -> None:
    """Bodies waiting for room (COMPUTE_QUEUE_LENGTH of them) refused the worked example's body, which had
    room: a crowd of large Content-Lengths would have kept every small request out."""
    admission = Admission(limits(compute_queue_seconds=5.0, compute_queue_length=1))
    uploads = Reservation(admission)
    assert uploads.take(46 * MIB, upload=True)
    waiting = Reservation(admission)
    sender = threading.Thread(target=waiting.take_body, args=(4 * MIB,))
    sender.start()
    wait_until(lambda: admission.bodies_waiting == 1)
    small = Reservation(admission)
    small.take_body(57)
    assert small.held_bytes == 57
    with pytest.raises(Problem, match="COMPUTE_QUEUE_LENGTH = 1"):
        Reservation(admission).take_body(4 * MIB)  # a large one is refused: the queue is full
    small.release()
    uploads.release()
    sender.join(10)
    waiting.release()
    assert (admission.held_bytes, admission.upload_bytes, admission.bodies_waiting) == (0, 0, 0)


def test_a_parse_that_another_waiting_parse_keeps_out_is_refused_at_once() -> None:
    """Two bodies each waiting for room to be parsed, neither able to start while the other holds its body:
    the second is refused at once (a 503), so the first starts once the running work gives its memory back,
    rather than both waiting out COMPUTE_QUEUE_SECONDS."""
    # 64 MiB of budget, 60 of it for large requests; a wait instead of the refusal would end in another 503
    admission = Admission(limits(max_body_bytes=16 * MIB, compute_queue_length=4, compute_queue_seconds=30.0))
    running = Reservation(admission)
    assert running.take(20 * MIB, large=True)
    first, second = Reservation(admission), Reservation(admission)
    first.take_body(10 * MIB)
    second.take_body(10 * MIB)
    outcome: list[object] = []

    def parse_first() -> None:
        try:
            first.take_for_parsing(40 * MIB)  # 40 + its 10: fits once the running work is done
            outcome.append("parsed")
        except Problem as problem:
            outcome.append(problem)

    waiting = threading.Thread(target=parse_first)
    waiting.start()
    deadline = time.monotonic() + 5
    while admission.bodies_waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert admission.bodies_waiting == 1
    with pytest.raises(Problem) as refused:
        second.take_for_parsing(45 * MIB)  # 45 + its 10 + the first's 10: over 60 MiB until one leaves
    assert refused.value.status == 503
    assert "other requests waiting to be parsed" in refused.value.detail
    second.release()
    running.release()
    waiting.join(5)
    assert outcome == ["parsed"]
    first.release()
    assert admission.held_bytes == 0


def test_computations_that_fail_teach_the_speed_nothing() -> None:
    # A 422 for an overflow in the first block of rows ends a computation estimated at 2 s within
    # milliseconds; learnt from, 17 of them had taught the speed 0.016, and admission then ran the attention
    # worst case on the worker's loop (service/web/admission.py, Admission.runs_on_the_loop).
    admission = Admission(limits())

    def overflow() -> str:
        raise ValueError("overflow in the first block of rows")

    for _ in range(20):
        with pytest.raises(ValueError, match="overflow"):
            admission.run(overflow, cpu_seconds=2.0, memory_bytes=0, reservation=Reservation(admission))
    assert admission.speed == 1.0
    assert admission.busy_slots == 0
    admission.run(lambda: "done", cpu_seconds=2.0, memory_bytes=0, reservation=Reservation(admission))
    assert admission.speed < 1.0  # a computation that returned teaches it (this one took microseconds)


def test_a_large_answer_counts_in_what_its_computation_is_expected_to_cost() -> None:
    # 4.2 million output values from one key: the kernel's estimate alone was under 1 ms (no slot, on the
    # worker's loop), and making the answer took 148-270 ms there
    request = AttentionRequest(
        query=np.zeros((1024, 1)), key=np.zeros((1, 1)), value=np.zeros((1, 4096)), include=[]
    )
    work = request.work()
    assert work.estimated_cpu_seconds < admission_module.NO_SLOT_SECONDS
    for answer in (admission_module.JSON_ANSWER, binary_answer(8)):
        assert expected_cpu_seconds(work, answer) > admission_module.INLINE_SECONDS  # a slot, on a thread
    assert Admission(limits()).runs_on_the_loop(expected_cpu_seconds(work)) is False
