"""The /v2 side of the benchmark: the same attention cases over the Open Inference Protocol, side by side.

For each case, in one run and taken in turns: the kernel alone on arrays already in memory (the
arithmetic's floor), /v1's in-process floor (orjson parse + kernel + orjson write), /v1 over HTTP, /v2 with
JSON tensors over HTTP, and /v2 with binary tensors through the Python client (its framing and reading
included). Then the peak RSS growth of a fresh worker serving one request over /v1 and over /v2 binary, and
the bytes of FP32 and FP64 binary answers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import numpy as np
from attention_client import Client

from bench import load
from bench.cases import Case, floor_bytes
from deploy.launch import MIB, SERVICE_APP, serving
from service.kernels import attention

V2_PATH = "/v2/models/attention/infer"
Include = tuple[Literal["weights", "scores", "logsumexp"], ...]
MEASURES = ("kernel", "v1_floor", "v1_http", "v2_json_http", "v2_binary_http")


@dataclass
class V2Row:
    case: Case
    times: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in MEASURES})
    answer_bytes: dict[str, int] = field(default_factory=dict)
    rss_growth: dict[str, int] = field(default_factory=dict)

    def median(self, measure: str) -> float:
        return float(np.median(self.times[measure]))


def arrays_of(case: Case) -> dict[str, np.ndarray]:
    return {name: np.asarray(case.body[name], dtype=np.float64) for name in ("query", "key", "value")}


def json_body(case: Case) -> bytes:
    """The case as a /v2 request with JSON tensors (flattened data, as the protocol's clients send it)."""
    inputs = [
        {"name": name, "shape": list(array.shape), "datatype": "FP64", "data": array.reshape(-1).tolist()}
        for name, array in arrays_of(case).items()
    ]
    return json.dumps({"inputs": inputs, "outputs": _outputs(case)}).encode()


def _outputs(case: Case) -> list[dict[str, str]]:
    return [{"name": "output"}, *([{"name": "weights"}] if case.body["include"] else [])]


def measure(row: V2Row, *, port: int, base_url: str, repeats: int, rounds: int, seconds: float) -> None:
    case = row.case
    arrays = arrays_of(case)
    weights = bool(case.body["include"])
    include: Include = ("weights",) if weights else ()
    raw_json = json_body(case)
    v1, v2 = load.Client(port), load.Client(port)
    client = Client(base_url)

    def kernel() -> None:
        attention(arrays["query"], arrays["key"], arrays["value"], include=include)

    actions: dict[str, Callable[[], Any]] = {
        "kernel": kernel,
        "v1_floor": partial(floor_bytes, case),
        "v1_http": partial(v1.post, case.path, case.raw),
        "v2_json_http": partial(v2.post, V2_PATH, raw_json),
        "v2_binary_http": partial(client.attention, *arrays.values(), include=include),
    }
    deadline = time.monotonic() + seconds
    per_round = max(1, repeats // rounds)
    try:
        for action in actions.values():
            action()
        for _ in range(rounds):
            for name, action in actions.items():
                for _ in range(per_round):
                    start = time.perf_counter()
                    action()
                    row.times[name].append(time.perf_counter() - start)
            if time.monotonic() > deadline:
                break
        row.answer_bytes = {
            "v1": v1.post(case.path, case.raw),
            "v2_json": v2.post(V2_PATH, raw_json),
            **{
                datatype: _binary_answer_bytes(client, arrays, include, datatype)
                for datatype in ("FP64", "FP32")
            },
        }
    finally:
        v1.close()
        v2.close()
        client.close()
    print(
        f"{case.name} (/v2): kernel {ms(row.median('kernel'))}, /v1 floor {ms(row.median('v1_floor'))}, "
        f"/v1 HTTP {ms(row.median('v1_http'))}, /v2 JSON {ms(row.median('v2_json_http'))}, "
        f"/v2 binary (client) {ms(row.median('v2_binary_http'))}",
        flush=True,
    )


def _binary_answer_bytes(
    client: Client, arrays: dict[str, np.ndarray], include: Include, datatype: str
) -> int:
    """Bytes of binary tensor data in the answer (after the JSON header) for inputs of ``datatype``."""
    dtype = np.float32 if datatype == "FP32" else np.float64
    query, key, value = (array.astype(dtype) for array in arrays.values())
    result = client.attention(query, key, value, include=include)
    return int(result.output.nbytes + (0 if result.weights is None else result.weights.nbytes))


def measure_memory(row: V2Row, settings: dict[str, str]) -> None:
    """Peak RSS growth of a fresh worker serving the case once over /v1 and once over /v2 binary."""
    case = row.case
    arrays = arrays_of(case)
    include: Include = ("weights",) if case.body["include"] else ()
    small = {name: array[:2] for name, array in arrays.items()}
    for protocol in ("v1", "v2_binary"):
        with serving(SERVICE_APP, settings, workers=1, keep_stdout=False) as server:
            client, raw = Client(server.base_url), load.Client(server.port)
            try:
                client.attention(*small.values(), include=include)  # loads lazily imported code first
                raw.post(case.path, b'{"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}')
                before = server.reset_peak_memory()
                if protocol == "v1":
                    raw.post(case.path, case.raw)
                else:
                    client.attention(*arrays.values(), include=include)
            finally:
                client.close()
                raw.close()
            after = server.memory()
            row.rss_growth[protocol] = max(after[pid].peak - before[pid].rss for pid in before)
    print(
        f"{case.name}: peak RSS growth /v1 {row.rss_growth['v1'] / MIB:.1f} MiB, "
        f"/v2 binary {row.rss_growth['v2_binary'] / MIB:.1f} MiB",
        flush=True,
    )


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def table(rows: list[V2Row]) -> str:
    header = [
        "case",
        "kernel only",
        "/v1 in-process floor",
        "/v1 HTTP",
        "/v2 JSON HTTP",
        "/v2 binary HTTP (client)",
        "÷ /v1 floor",
        "÷ kernel",
        "answer /v1 · /v2 JSON · /v2 FP64 · FP32",
        "RSS growth /v1 · /v2",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        binary = row.median("v2_binary_http")
        sizes = row.answer_bytes
        growth = row.rss_growth
        cells = [
            row.case.name,
            ms(row.median("kernel")),
            ms(row.median("v1_floor")),
            ms(row.median("v1_http")),
            ms(row.median("v2_json_http")),
            ms(binary),
            f"{binary / row.median('v1_floor'):.2f}",
            f"{binary / row.median('kernel'):.2f}",
            " · ".join(f"{sizes[k] / 1024:,.0f} KiB" for k in ("v1", "v2_json", "FP64", "FP32")),
            " · ".join(f"{growth[k] / MIB:.1f} MiB" for k in ("v1", "v2_binary")) if growth else "",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets(rows: list[V2Row]) -> str:
    by_name = {row.case.name: row for row in rows}
    mid, big = by_name["attention 512 weights"], by_name["attention 2048 output"]
    binary = mid.median("v2_binary_http")
    checks = [
        (
            "/v2 binary, 512 with weights: HTTP median ≤ 0.4× the /v1 in-process floor",
            f"{binary / mid.median('v1_floor'):.2f}×",
            binary <= 0.4 * mid.median("v1_floor"),
        ),
        (
            "/v2 binary, 512 with weights: HTTP median ≤ 2× the kernel-only floor",
            f"{binary / mid.median('kernel'):.2f}×",
            binary <= 2 * mid.median("kernel"),
        ),
        (
            "/v2 binary, 2048 output-only: peak RSS growth ≤ /v1's",
            f"{big.rss_growth['v2_binary'] / MIB:.1f} vs {big.rss_growth['v1'] / MIB:.1f} MiB",
            big.rss_growth["v2_binary"] <= big.rss_growth["v1"],
        ),
        (
            "FP32 binary answers are half the bytes of FP64 ones",
            f"{mid.answer_bytes['FP32']:,} vs {mid.answer_bytes['FP64']:,} B",
            2 * mid.answer_bytes["FP32"] == mid.answer_bytes["FP64"],
        ),
    ]
    lines = ["| target | measured | met |", "|---|---|---|"]
    lines += [f"| {name} | {value} | {'yes' if ok else 'NO'} |" for name, value, ok in checks]
    return "\n".join(lines)
