"""Bodies waiting for room, ended by the server (crowded, or their client gone), under gevent: in a process
of its own (gevent patches the standard library, which the rest of the suite must not see)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# What both scripts share: gevent's patching (first), an admission with the queue's limits given, and the
# waits the "server" may end, as the worker's IdleConnections holds them.
PRELUDE = textwrap.dedent(
    """
    from gevent import monkey

    monkey.patch_all()

    import contextlib
    import random

    import gevent

    from service.web.admission import Admission, AdmissionLimits, Reservation
    from service.web.connection import WaitEnd, on_waits
    from service.web.problems import Problem

    MIB = 1 << 20


    def admission_of(budget_bytes, *, queue_length, queue_seconds):
        return Admission(
            AdmissionLimits(
                memory_budget_bytes=budget_bytes,
                max_body_bytes=8 * MIB,
                compute_slots=1,
                compute_queue_length=queue_length,
                compute_queue_seconds=queue_seconds,
                compute_deadline_seconds=20,
                body_timeout_seconds=10,
                body_min_bytes_per_second=1024,
                header_timeout_seconds=10,
            )
        )


    ends = []


    class Waits:  # the "server's", as the worker's IdleConnections
        @contextlib.contextmanager
        def room(self, end):
            ends.append(end)
            try:
                yield
            finally:
                ends.remove(end)


    waits = Waits()
    """
)

STRESS = PRELUDE + textwrap.dedent(
    """
    admission = admission_of(64 * MIB, queue_length=64, queue_seconds=0.2)
    random.seed(18)

    errors, refused, held = [], set(), 0

    def client():
        global held
        on_waits(waits)
        for _ in range(100):
            reservation = Reservation(admission)
            try:
                reservation.take_body(random.choice([2, 4, 6]) * MIB)
                held += 1
                gevent.sleep(random.random() * 0.002)
            except Problem as refusal:
                refused.add(refusal.status)
            except Exception as error:
                errors.append(repr(error))
            finally:
                reservation.release()

    def crowded_server():
        loop = gevent.get_hub().loop
        for _ in range(1000):  # ends two waits a millisecond, from the loop, as the worker's sweep does
            for end in random.sample(ends, min(2, len(ends))):
                loop.run_callback(end, random.choice(list(WaitEnd)))
            gevent.sleep(0.001)

    greenlets = [gevent.spawn(client) for _ in range(40)] + [gevent.spawn(crowded_server)]
    gevent.joinall(greenlets, timeout=60)
    print(errors[:3], sorted(refused), held > 0, admission.held_bytes, admission.bodies_waiting)
    """
)


def test_waits_for_room_ended_by_the_server_are_refusals_that_hold_nothing() -> None:
    """Forty clients take and give back bodies of 2-6 MiB (a 48 MiB share: many wait) while the server ends
    two waits a millisecond (crowded, or their client gone). The first version raised a timeout into the
    waiting greenlet, inside its wait on the admission's condition variable, which broke the condition's
    locks ("Semaphore released too many times": a 500 in CI). Every refusal must be a 503 (crowded, or no
    room in time) or a 400 (the client gone), and nothing may stay held or waiting."""
    done = subprocess.run(
        [sys.executable, "-c", STRESS], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[] [400, 503] True 0 0", done.stdout + done.stderr


ENDED = PRELUDE + textwrap.dedent(
    """
    admission = admission_of(16 * MIB, queue_length=8, queue_seconds=10)
    full = Reservation(admission)
    full.take_body(8 * MIB)  # the uploads' share (3/4 of 16 MiB) is 12 MiB: the next 8 MiB must wait

    def wait(framing):
        on_waits(waits)
        reservation = Reservation(admission)
        try:
            reservation.take_body(8 * MIB, framing=framing)
        except Problem as refusal:
            return refusal.status, refusal.errors, refusal.headers.get("Retry-After")
        finally:
            reservation.release()

    for why, framing in [
        (WaitEnd.CLIENT_LEFT, "Content-Length"),
        (WaitEnd.CLIENT_LEFT, "Transfer-Encoding"),
        (WaitEnd.CROWDED, "Content-Length"),
    ]:
        waiting = gevent.spawn(wait, framing)
        gevent.sleep(0.05)  # it waits
        gevent.get_hub().loop.run_callback(ends[0], why)
        status, errors, retry = waiting.get(timeout=5)
        print(why.name, status, sorted(errors or {}), retry)
    full.release()
    print(admission.held_bytes, admission.bodies_waiting)
    """
)


def test_a_wait_ended_for_a_client_gone_is_a_400_naming_the_body_framing_and_a_crowded_one_a_503() -> None:
    done = subprocess.run(
        [sys.executable, "-c", ENDED], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.splitlines() == [
        "CLIENT_LEFT 400 ['Content-Length'] None",
        "CLIENT_LEFT 400 ['Transfer-Encoding'] None",
        "CROWDED 503 [] 1",
        "0 0",
    ], done.stdout + done.stderr


ON_THE_LOOP = PRELUDE + textwrap.dedent(
    """
    from gevent import monkey as patched

    admission = admission_of(64 * MIB, queue_length=4, queue_seconds=5)
    thread_of = patched.get_original("threading", "get_ident")  # the OS thread's, not the greenlet's
    loop = thread_of()

    def ran_on_the_loop(cpu_seconds):
        reservation = Reservation(admission)
        thread = admission.run(thread_of, cpu_seconds=cpu_seconds, memory_bytes=0, reservation=reservation)
        return thread == loop

    # As learnt from computations whose estimates erred high, ten times and more (layer norm's).
    admission.speed = 0.016
    print(ran_on_the_loop(2.0), ran_on_the_loop(0.04), ran_on_the_loop(0.06))
    admission.speed = 4.0  # slower than estimated: fewer run on the loop
    print(ran_on_the_loop(0.04), ran_on_the_loop(0.01))
    """
)


def test_a_learnt_speed_never_puts_a_computation_on_the_loop_that_its_estimate_keeps_off() -> None:
    """Admission's speed is one average over every endpoint; an estimate of 2 s of CPU at a learnt 0.016
    (0.035 s expected) had run on the worker's loop, the attention worst case for 2.7 s, /livez waiting."""
    done = subprocess.run(
        [sys.executable, "-c", ON_THE_LOOP], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["False", "True", "False", "False", "True"], done.stdout + done.stderr
