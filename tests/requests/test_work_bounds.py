"""Each endpoint's work counts its real cost drivers, so that the default limits refuse what would run for
seconds (issue #18, "Work that is counted right"). Expected amounts are worked out by hand from the cost
model each request documents; the CPU times behind the model are in bench/worst_cases.py, not here."""

from __future__ import annotations

import math

import numpy as np
import pytest
from flask.testing import FlaskClient

from service.kernels import CausalAlignment, Rotary
from service.requests import (
    AttentionRequest,
    LikelihoodRequest,
    MultiHeadRequest,
    PositionalEncodingRequest,
    SampleRequest,
    SoftmaxRequest,
    Work,
)
from service.settings import Settings

DEFAULTS = Settings()
COMPUTE_LIMIT = DEFAULTS.max_output_only_work_elements


def ones(*shape: int) -> np.ndarray:
    return np.ones(shape)


def compute_bound(work: Work) -> int:
    (amount,) = [bound.amount for bound in work.bounds if bound.setting == "MAX_OUTPUT_ONLY_WORK_ELEMENTS"]
    return amount


def narrow_heads_layer(n: int) -> MultiHeadRequest:
    """The issue's layer: d_model = 1, 60 heads of width 1, self-attention over n tokens."""
    return MultiHeadRequest(
        query=np.broadcast_to(np.float64(0.5), (n, 1)),
        w_q=ones(1, 60),
        w_k=ones(1, 60),
        w_v=ones(1, 60),
        w_o=ones(60, 1),
        num_heads=60,
    )


def test_narrow_heads_count_one_reference_score_each() -> None:
    # 60 × 8192² = 4.0e9 scores, each at least one reference score (they took 20-26 s of CPU): far over
    work = narrow_heads_layer(8192).work()
    assert compute_bound(work) >= 60 * 8192 * 8192 > COMPUTE_LIMIT
    # n = 16: 60 × 256 = 15,360 scores count 1 each; each projection's entries count 1 each (their inner
    # widths, 1 and 60, are under 128): q 16 × 60, k and v 16 × 120, the output 16 × 1
    small = narrow_heads_layer(16).work()
    assert compute_bound(small) == 15_360 + 16 * (60 + 120 + 1)
    assert small.compute == compute_bound(small)
    # elements is what the layer holds, which admission reserves memory for: the projections (16 × 60 for q,
    # twice that for k and v, twice for the heads and their concatenation) and the output (16 × 1)
    assert small.elements == 16 * 60 * (1 + 2 + 2) + 16


def test_the_issues_narrow_heads_body_is_a_413_naming_the_compute_limit(client: FlaskClient) -> None:
    n = 8192
    body = {
        "query": [[0.5]] * n,
        "w_q": [[1.0] * 60],
        "w_k": [[1.0] * 60],
        "w_v": [[1.0] * 60],
        "w_o": [[1.0]] * 60,
        "num_heads": 60,
    }
    response = client.post("/v1/multi-head-attention", json=body)
    assert response.status_code == 413, response.data
    problem = response.get_json()
    assert problem["type"].endswith("work-too-large")
    assert "(MAX_OUTPUT_ONLY_WORK_ELEMENTS)" in problem["detail"]
    # what was needed: one reference score per score and per projected entry at least
    assert f"{60 * n * n + n * (60 + 120 + 1):,}" in problem["detail"]


def test_score_work_counts_width_and_the_slowdown_of_small_blocks() -> None:
    from service.requests._attention import score_work  # here, so that the other tests fail on their own

    # 2 × 3 × 4 = 24 scores of d_k + d_v = 11: one each (the floor), whatever the block
    assert score_work(2, 3, 4, 5, 6, materialized=True) == 24
    # d_k + d_v = 256 in blocks of 3 query rows (all of n): 2 × 8 / 3 = 5.33 each, 12 scores → 64
    assert score_work(1, 3, 4, 200, 56, materialized=True) == 64
    # the same with 8 rows or more: 2 each
    assert score_work(1, 8, 4, 200, 56, materialized=True) == 64
    # output only, 2^20 batch entries of 4 × 4: 2^18 entries fill a block, so each block is one query row,
    # 8 times slower: (254 + 2) / 128 × 8 = 16 per score
    assert score_work(1 << 20, 4, 4, 254, 2, materialized=False) == (1 << 20) * 16 * 16
    # 8192 × 8192 at d = 64: blocks of 128 rows, the reference: one per score
    assert score_work(1, 8192, 8192, 64, 64, materialized=False) == 8192 * 8192


def test_attention_with_weights_bounds_the_arithmetic_too() -> None:
    # Broadcast batches of one-row blocks with wide keys: 64 × 64 × 1 × 32 scores of d_k + d_v = 2001,
    # 8 times slower per multiply-add with one query row: 131,072 × 2001 / 128 × 8 = 16.4 million
    arrays = {
        "query": np.broadcast_to(np.float64(0.5), (64, 1, 1, 2000)),
        "key": np.broadcast_to(np.float64(0.5), (1, 64, 32, 2000)),
        "value": np.broadcast_to(np.float64(0.5), (1, 64, 32, 1)),
    }
    held = AttentionRequest(**arrays, include=["weights"]).work()
    assert compute_bound(held) == math.ceil(64 * 64 * 32 * 2001 / 128 * 8)
    assert [bound.setting for bound in held.bounds] == ["MAX_WORK_ELEMENTS", "MAX_OUTPUT_ONLY_WORK_ELEMENTS"]


def test_softmax_counts_the_sort_of_top_p_and_the_truncation() -> None:
    logits = ones(2, 1000)  # V = 1000: log2 V rounds up to 10 bits, the sort counts 5 a logit
    assert compute_bound(SoftmaxRequest(logits=logits).work()) == 2000 * 4
    assert compute_bound(SoftmaxRequest(logits=logits, top_k=10).work()) == 2000 * (4 + 2)
    assert compute_bound(SoftmaxRequest(logits=logits, min_p=0.1).work()) == 2000 * (4 + 4)
    assert compute_bound(SoftmaxRequest(logits=logits, top_p=0.9).work()) == 2000 * (4 + 4 + 5)
    assert compute_bound(SoftmaxRequest(logits=logits, top_p=1.0).work()) == 2000 * 4  # nothing to sort


def test_sample_counts_the_draws_binary_searches() -> None:
    # 3 rows of V = 1000: 3000 logits × (4 + the portable exp 4); 150 draws × 10 steps × 3
    work = SampleRequest(logits=ones(3, 1000), num_samples=50, seed=1).work()
    assert compute_bound(work) == 3000 * 8 + 150 * 10 * 3
    assert work.compute == compute_bound(work)


def test_a_single_long_row_under_top_p_is_refused_before_the_body_limit() -> None:
    # 4 million logits fit in a 16 MiB body; sorted under top-p they took 2 s of CPU: now a 413
    row = np.broadcast_to(np.float64(0.5), (4_000_000,))
    assert compute_bound(SampleRequest(logits=row, top_p=0.9, seed=1).work()) > COMPUTE_LIMIT
    assert compute_bound(SoftmaxRequest(logits=row, top_p=0.9).work()) > COMPUTE_LIMIT
    assert compute_bound(SoftmaxRequest(logits=row).work()) <= COMPUTE_LIMIT


def test_positions_past_2_to_the_29_cost_four_times_as_much_and_are_bounded(client: FlaskClient) -> None:
    # NumPy's sine and cosine reduce such angles the slow way: two positions near 2^53 and d_model
    # 8,388,608, binary on /v2, took 1.3-2.2 s of CPU, estimated at 1 s; the compute limit now refuses them
    far = np.array([2**53 - 1, 2**53 - 3])
    near = np.array([2**29 - 1, 2**29 - 3])
    work = PositionalEncodingRequest(kind="sinusoidal", positions=far, d_model=8_388_608, base=1.0).work()
    assert work.compute == 2 * 8_388_608 * 2 * 4 == compute_bound(work) > COMPUTE_LIMIT
    work = PositionalEncodingRequest(kind="sinusoidal", positions=near, d_model=6).work()
    assert work.compute == 12 * 2
    body = {"kind": "sinusoidal", "positions": far.tolist(), "d_model": 4_194_306, "base": 1.0}
    response = client.post("/v1/positional-encoding", json=body)  # 2 × 4,194,306 × 8: just over the limit
    assert response.status_code == 413
    assert "MAX_OUTPUT_ONLY_WORK_ELEMENTS" in response.get_json()["detail"]


def test_rotary_on_attention_counts_its_tables_as_positional_encoding_does() -> None:
    # q [3, 4] and k [5, 4] at the default positions (queries the last 3 of 5): 15 scores, 1 each; rotary's
    # tables at 3 + 5 positions × 2 angles, cos and sin, 2 each; the 12 + 20 rotated values, 2 each
    plain = AttentionRequest(query=ones(3, 4), key=ones(5, 4), value=ones(5, 1), include=frozenset())
    rotated = AttentionRequest(
        query=ones(3, 4), key=ones(5, 4), value=ones(5, 1), include=frozenset(), rotary={}
    )
    assert plain.work().compute == 15
    assert rotated.work().compute == 15 + 8 * 2 * 2 * 2 + (12 + 20) * 2 == compute_bound(rotated.work())
    # Past position 2^29 each table entry costs 4 times as much (the rotations do not): here the keys' last
    far = AttentionRequest(
        query=ones(3, 4),
        key=ones(5, 4),
        value=ones(5, 1),
        include=frozenset(),
        rotary={"key_offset": 2**29 - 4},
    )
    assert far.work().compute == 15 + 8 * 2 * 2 * 2 * 4 + (12 + 20) * 2


def test_a_base_under_1_makes_large_angles_at_small_positions() -> None:
    # The frequencies are base^(-2i/dim): under 1, the largest is base^(-(dim - 2)/dim), not 1. A base of
    # 1e-300 put every angle past 2^29 from position 1 (a sinusoidal table of 32,768 × 512 took 1.1-1.4 s of
    # CPU, estimated at 1.0 s): each entry counts 8, as past position 2^29.
    table = PositionalEncodingRequest(kind="sinusoidal", length=4, d_model=6, base=1e-300).work()
    assert table.compute == 24 * 8
    # base 0.5 and dim 64: the largest frequency is 0.5^(-62/64) = 1.96, so position 2^28 + 2^25 passes 2^29
    near = {"query": ones(1, 64), "key": ones(2, 64), "value": ones(2, 1), "include": frozenset()}
    rotary = {"base": 0.5, "key_offset": 2**28 + 2**25}
    slow = AttentionRequest(**near, rotary=rotary).work().compute
    fast = AttentionRequest(**near, rotary={**rotary, "base": 10_000.0}).work().compute
    tables = 2 * 3 * 32  # 3 positions, 32 frequencies, cos and sin
    assert slow - fast == tables * (8 - 2)
    assert fast == math.ceil(2 * 65 / 128 * 8) + tables * 2 + (64 + 128) * 2


@pytest.mark.parametrize(
    ("n", "m", "alignment", "offsets", "expected"),
    [
        (3, 10, "lower_right", {}, (7, 0)),  # the queries are the last 3 of 10 positions
        (3, 10, "upper_left", {}, (0, 0)),
        (3, 10, "lower_right", {"query_offset": -5, "key_offset": 2}, (-5, 2)),
    ],
)
def test_rotary_places_its_rows_by_the_causal_alignment_unless_told(
    n: int, m: int, alignment: CausalAlignment, offsets: dict[str, int], expected: tuple[int, int]
) -> None:
    assert Rotary(**offsets).offsets(n, m, alignment) == expected


def test_rotary_at_large_positions_is_bounded() -> None:
    # A review's requests (arrays broadcast here: nothing allocated). Attention, q [1, 4096], k [2048, 4096]
    # with keys from position 2^40: 524,416 reference scores before, and 1.24 s of CPU (the sines and cosines
    # of 2049 × 2048 large angles).
    attention = AttentionRequest(
        query=np.broadcast_to(1.0, (1, 4096)),
        key=np.broadcast_to(1.0, (2048, 4096)),
        value=np.broadcast_to(1.0, (2048, 1)),
        include=frozenset(),
        rotary={"key_offset": 2**40},
    )
    assert compute_bound(attention.work()) > COMPUTE_LIMIT
    # The layer projecting 1900 keys of width 1 to one head of 8192, rotated at 2^40: 1,095,046 before
    # (estimated at 0.03 s, so computed on the worker's loop), and 2.4 s of CPU, /livez 2.5 s late.
    layer = MultiHeadRequest(
        query=ones(1, 1),
        key=np.broadcast_to(1.0, (1900, 1)),
        value=np.broadcast_to(1.0, (1900, 1)),
        w_q=np.broadcast_to(1e-3, (1, 8192)),
        w_k=np.broadcast_to(1e-3, (1, 8192)),
        w_v=ones(1, 1),
        w_o=ones(1, 1),
        num_heads=1,
        include=frozenset(),
        rotary={"key_offset": 2**40, "query_offset": 2**40},
    )
    assert compute_bound(layer.work()) > COMPUTE_LIMIT


def test_a_narrow_projection_counts_each_entry_at_least_once() -> None:
    # key [1900, 1] projected by w_k [1, 8192]: 15.6 million entries of one multiply-add each, bound by
    # writing them (0.28 s of CPU), had counted 1/128 each (estimated 0.03 s, so computed on the loop)
    layer = MultiHeadRequest(
        query=ones(1, 1),
        key=ones(1900, 1),
        value=ones(1900, 1),
        w_q=ones(1, 8192),
        w_k=ones(1, 8192),
        w_v=ones(1, 1),
        w_o=ones(1, 1),
        num_heads=1,
        include=frozenset(),
    )
    # projections: q 1 × 8192, k 1900 × 8192 and v 1900 × 1 entries (1 each), the output 1 × 1 (1 / 128 × 8
    # for a product of one row: 1); the 1900 scores count (8192 + 1) / 128 × 8 each (one query row)
    scores = math.ceil(1900 * (8193 / 128 * 8))
    assert layer.work().compute == 8192 + 1900 * 8193 + 1 + scores
    assert layer.work().estimated_cpu_seconds > 0.3


def test_each_input_is_counted_over_its_own_batch_entries(client: FlaskClient) -> None:
    # 64 one-token queries over one shared key and value [1, 1024, 1024], projected by [1024, 64]: the kernel
    # projects the key and value once, but they were counted once per query (64 times), so the request was
    # a 413 at an estimated 2 s of CPU; it takes about 0.01 s.
    key = ones(1, 1024, 1024)
    layer = MultiHeadRequest(
        query=ones(64, 1, 1),
        key=key,
        value=key,
        w_q=ones(1, 64),
        w_k=ones(1024, 64),
        w_v=ones(1024, 64),
        w_o=ones(64, 1),
        num_heads=1,
        include=frozenset(),
    )
    # held: q 64 × 64, k and v 1 × 1024 × 64 each, the heads and their concatenation 2 × 64 × 64, output 64
    assert layer.work().elements == 64 * 64 + 2 * 1024 * 64 + 2 * 64 * 64 + 64
    # compute: the q projection, 64 products of one row and inner width 1, 64 entries each at 1 (at least
    # 1; 1 / 128 × 8 for one row); k and v, 1024 × 64 entries each of inner width 1024 (8); the output, 64
    # rows of inner width 64 (64 / 128 × 8 = 4 each); 64 × 1024 scores of width 64 + 64, one query row a
    # block (8 each)
    assert layer.work().compute == 64 * 64 + 2 * 1024 * 64 * 8 + 64 * 4 + 64 * 1024 * 8
    body = {
        "query": [[[1.0]]] * 64,
        "key": [[[1.0] * 1024] * 1024],
        "value": [[[1.0] * 1024] * 1024],
        "w_q": [[1.0] * 64],
        "w_k": [[1.0] * 64] * 1024,
        "w_v": [[1.0] * 64] * 1024,
        "w_o": [[1.0]] * 64,
        "num_heads": 1,
    }
    assert client.post("/v1/multi-head-attention", json=body).status_code == 200


@pytest.mark.parametrize(
    ("request_", "compute"),
    [
        # 6 positions × 5 logits × (log-softmax 4 + the partial sort 2 when top_logprobs is asked for)
        (LikelihoodRequest(logits=ones(2, 3, 5), targets=np.zeros((2, 3), dtype=np.int64)), 30 * 4),
        (
            LikelihoodRequest(logits=ones(2, 3, 5), targets=np.zeros((2, 3), dtype=np.int64), top_logprobs=2),
            30 * 6 + 6 * 64,
        ),
        # 4 × 6 table entries, 2 each; rotary: x (3 × 4) and the 2 × 3 × 2 angles' cos and sin, 2 each
        (PositionalEncodingRequest(kind="sinusoidal", length=4, d_model=6), 24 * 2),
        (PositionalEncodingRequest(kind="rotary", x=ones(3, 4)), (12 + 12) * 2),
    ],
    ids=["likelihood", "likelihood-top-logprobs", "sinusoidal", "rotary"],
)
def test_every_request_states_its_compute(request_: LikelihoodRequest, compute: int) -> None:
    work = request_.work()
    assert work.compute == compute
    assert work.estimated_cpu_seconds == pytest.approx(compute * 30e-9)
