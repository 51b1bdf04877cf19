"""Ask a running service the course's worked example and check the answer (standard library only).

Runs inside the container (``podman exec -i CID python - < deploy/check_seed.py``) or anywhere:
``python deploy/check_seed.py http://127.0.0.1:8000``. Exits 1 when the answer is wrong.
"""

from __future__ import annotations

import json
import math
import os
import sys
import urllib.request

SEED = {"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}
# softmax([0, 1/√2]) by hand, and the output mixes the values [6, 0] and [0, 3] with those weights
WEIGHTS = [1 / (1 + math.exp(2**-0.5)), math.exp(2**-0.5) / (1 + math.exp(2**-0.5))]
OUTPUT = [6 * WEIGHTS[0], 3 * WEIGHTS[1]]


def check(base_url: str) -> str:
    """POST the seed to ``base_url``; return a one-line report or raise AssertionError."""
    request = urllib.request.Request(
        base_url.rstrip("/") + "/v1/attention",
        data=json.dumps(SEED).encode(),
        headers={"Content-Type": "application/json", "X-Request-ID": "seed-check"},
        method="POST",
    )
    key = os.environ.get("API_KEY")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=10) as response:
        status, echoed, body = response.status, response.headers["X-Request-ID"], json.load(response)
    assert status == 200, status
    assert echoed == "seed-check", echoed
    for name, expected in (("weights", WEIGHTS), ("output", OUTPUT)):
        got = body[name]
        assert all(math.isclose(g, e, rel_tol=1e-12) for g, e in zip(got, expected, strict=True)), (name, got)
    return f"seed example OK: weights {[round(w, 4) for w in body['weights']]}, output {body['output']}"


if __name__ == "__main__":
    url = sys.argv[1] if len(sys.argv) > 1 else f"http://127.0.0.1:{os.environ.get('PORT', '8000')}"
    try:
        print(check(url))
    except AssertionError as error:
        print(f"seed example WRONG: {error}")
        raise SystemExit(1) from None
