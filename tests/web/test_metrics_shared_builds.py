"""Scrapes of /metrics that arrive while one is built share it, and none gets a text older than itself."""

from __future__ import annotations

import threading

from service.web.metrics import SharedBuilds


def test_scrapes_arriving_during_a_build_share_the_next_one_and_get_nothing_older() -> None:
    shared = SharedBuilds()
    first_started = threading.Event()
    release_first = threading.Event()
    builds: list[int] = []

    def build() -> bytes:
        builds.append(len(builds) + 1)
        number = len(builds)
        if number == 1:
            first_started.set()
            assert release_first.wait(10)
        return f"build {number}".encode()

    texts: dict[str, bytes] = {}

    def scrape(name: str, arrived_after: int | None = None) -> None:
        texts[name] = shared.get("text", build, arrived_after=arrived_after)

    first = threading.Thread(target=scrape, args=("first",))
    first.start()
    assert first_started.wait(10)
    # Five scrapes arrive while the first build is under way: its text is older than they are.
    # (Their arrival is marked here, so that a thread slow to start does not arrive after the second build.)
    later = [threading.Thread(target=scrape, args=(f"later {k}", shared.arrival())) for k in range(5)]
    for thread in later:
        thread.start()
    release_first.set()
    for thread in (first, *later):
        thread.join(10)
        assert not thread.is_alive()
    assert texts["first"] == b"build 1"
    assert {texts[f"later {k}"] for k in range(5)} == {b"build 2"}  # one more build, shared by all five
    assert builds == [1, 2]
    # A scrape after every build has ended starts its own; another format never shares a text.
    assert shared.get("text", build) == b"build 3"
    assert shared.get("openmetrics", build) == b"build 4"
