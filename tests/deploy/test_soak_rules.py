"""The soak test's own judgement: which memory series count as a leak, and what each request must get."""

from __future__ import annotations

import json
import random

import pytest

from deploy import soak

MIB = 1024 * 1024


def test_a_steady_climb_is_a_leak() -> None:
    samples = [50 * MIB + step * MIB for step in range(30)]  # +1 MiB every sample
    assert soak.keeps_growing(samples)


@pytest.mark.parametrize(
    "samples",
    [
        [50 * MIB] * 30,  # flat
        [50 * MIB + (step % 3) * MIB for step in range(30)],  # noise around a level
        [50 * MIB] * 10 + [70 * MIB] * 20,  # one step up (a cache filling), then flat
        [50 * MIB + step * 64 * 1024 for step in range(30)],  # growth smaller than the noise floor
        [50 * MIB, 60 * MIB, 70 * MIB],  # too few samples to judge
    ],
)
def test_flat_noisy_or_settling_memory_is_not(samples: list[int]) -> None:
    assert not soak.keeps_growing(samples)


def test_the_mix_covers_every_endpoint_and_error_kind() -> None:
    kinds = soak.request_mix(random.Random(1))
    assert {kind.path for kind in kinds} == {"/v1/attention", "/v1/softmax", "/v1/log-likelihood"}
    assert {kind.expect for kind in kinds} == {200, 400, 413, 422}
    oversized = next(kind for kind in kinds if kind.name == "oversized-body")
    assert len(oversized.body) > soak.MAX_BODY_BYTES
    work = json.loads(next(kind for kind in kinds if kind.name == "oversized-work").body)
    assert len(work["query"]) * len(work["key"]) > soak.MAX_WORK_ELEMENTS
    with pytest.raises(ValueError, match="Expecting"):
        json.loads(next(kind for kind in kinds if kind.name == "malformed-json").body)
