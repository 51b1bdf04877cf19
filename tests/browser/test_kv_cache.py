"""<kv-cache> in real Chromium: each step appends one key/value row and asks the service for one row.

Every weight and output shown is checked twice: against the service's answer to the same request (sent again
with urllib), and against the rows of ONE causal self-attention request over the whole sequence, built here
from the rows the steps sent (the KV-cache property, on the numbers the page shows). The cache's size is
checked against the formula 2 · H_kv · d_k · 8 bytes per token, computed here.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Error as PlaywrightError

from tests.browser.conftest import Watch, serve_page
from tests.browser.test_playground import answered, post

KV = "kv-cache"
BYTES = 8  # float64
REL = 1e-12
TOKENS = ["the", "cat", "sat", "on", "the", "mat", "and", "then", "it", "slept"]  # the widget's example


def widget(page: Any) -> Any:
    return page.locator(KV)


def open_kv(page: Any, base_url: str) -> None:
    page.goto(base_url + "/")
    page.wait_for_selector(f"{KV}[data-state=ready]", state="attached")


def fixed(value: float) -> str:
    """A number as the widgets print it (formatNumber): four decimals, a true minus sign, no "−0.0000"."""
    text = f"{value:.4f}"
    return text[1:] if text == "-0.0000" else text.replace("-", "−")


def shown_matrix(page: Any, name: str) -> list[list[float]]:
    """A table's values in full: each cell's title ends in its value as JavaScript printed it."""
    titles = page.locator(f"{KV} table[data-matrix='{name}'] tbody tr").evaluate_all(
        "rows => rows.map(row => [...row.querySelectorAll('td')].map(td => td.title))"
    )
    return [[float(title.rsplit(": ", 1)[1]) for title in row] for row in titles]


def shown_text(page: Any, name: str) -> list[list[str]]:
    rows = page.locator(f"{KV} table[data-matrix='{name}'] tbody tr")
    return [
        [text.strip() for text in rows.nth(i).locator("td").all_inner_texts()] for i in range(rows.count())
    ]


def sizes(page: Any) -> dict[str, dict[str, int]]:
    """The size table: row name → tokens, key/value heads and bytes it states."""
    return {
        row["name"]: {
            "tokens": int(row["tokens"]),
            "kv_heads": int(row["kvHeads"]),
            "bytes": int(row["bytes"]),
        }
        for row in page.locator(f"{KV} tr[data-size]").evaluate_all(
            "rows => rows.map(r => ({ name: r.dataset.size, tokens: r.dataset.tokens, "
            "kvHeads: r.dataset.kvHeads, bytes: r.dataset.bytes }))"
        )
    }


def step_bodies(watch: Watch) -> list[dict[str, Any]]:
    """The widget's requests, in order (the heatmap on the same page posts to /v1/attention without GQA)."""
    bodies = [json.loads(body or "{}") for body in watch.posts_to("/v1/attention")]
    return [body for body in bodies if "enable_gqa" in body]


def assert_close(shown: list[list[float]], expected: list[list[float]]) -> None:
    assert len(shown) == len(expected)
    for got, want in zip(shown, expected, strict=True):
        assert got == pytest.approx(want, rel=REL, abs=1e-300)


def click_step(page: Any) -> Any:
    return answered(page, KV, lambda: widget(page).get_by_role("button", name="Step").click())


def click_reset(page: Any) -> Any:
    return answered(page, KV, lambda: widget(page).get_by_role("button", name="Reset").click())


def run_steps(page: Any, watch: Watch, count: int) -> list[dict[str, Any]]:
    """Reset, then ``count`` steps; per step what the page showed and the one request it sent."""
    click_reset(page)
    sent_before = len(step_bodies(watch))
    assert page.locator(f"{KV} .status").get_attribute("data-step") == "0"
    assert sizes(page)["this"]["tokens"] == 0
    assert page.locator(f"{KV} table[data-matrix^=cache]").count() == 0
    seen = []
    for step in range(1, count + 1):
        click_step(page)
        bodies = step_bodies(watch)
        assert len(bodies) == sent_before + step  # one request per step, none for the reset
        seen.append(
            {
                "body": bodies[-1],
                "weights": shown_matrix(page, "weights"),
                "output": shown_matrix(page, "output"),
                "weights_text": shown_text(page, "weights"),
                "sizes": sizes(page),
                "evicted": page.locator(f"{KV} table[data-matrix='cache-0'] tbody th.evicted").count(),
                "cache_rows": page.locator(f"{KV} table[data-matrix='cache-0'] tbody tr").count(),
            }
        )
        assert page.locator(f"{KV} .status").get_attribute("data-step") == str(step)
    return seen


def full_sequence(seen: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole sequence from the steps' requests: step t's query row, and the key/value row it appended."""
    heads = len(seen[0]["body"]["query"])
    kv_heads = len(seen[0]["body"]["key"])
    query = [[step["body"]["query"][h][0] for step in seen] for h in range(heads)]
    key = [[step["body"]["key"][h][-1] for step in seen] for h in range(kv_heads)]
    value = [[step["body"]["value"][h][-1] for step in seen] for h in range(kv_heads)]
    return {"query": query, "key": key, "value": value}


def check_against_the_service(base_url: str, seen: list[dict[str, Any]]) -> None:
    """Each step's numbers are the service's answer to its request, re-sent here."""
    for step in seen:
        again = post(base_url, "/v1/attention", step["body"])
        weights = [row[0] for row in again["weights"]]
        assert_close(step["weights"], weights)
        assert_close(step["output"], [row[0] for row in again["output"]])
        assert step["weights_text"] == [[fixed(w) for w in row] for row in weights]


def check_the_cache_property(base_url: str, seen: list[dict[str, Any]], window: list[int] | None) -> None:
    """Step t's row over the cache is row t of causal self-attention over the whole sequence (one request)."""
    full = {**full_sequence(seen), "causal": True, "enable_gqa": True, "include": ["weights"]}
    if window is not None:
        full["window"] = window
    answer = post(base_url, "/v1/attention", full)
    for t, step in enumerate(seen):
        start = t + 1 - len(step["weights"][0])  # the cache holds keys start … t
        if window is not None:
            assert start == max(0, t - window[0])
        else:
            assert start == 0
        for head, row in enumerate(answer["weights"]):
            assert all(w == 0 for w in row[t][:start])  # what the cache dropped had no weight anyway
            assert step["weights"][head] == pytest.approx(row[t][start : t + 1], rel=REL, abs=1e-300)
        assert_close(step["output"], [row[t] for row in answer["output"]])


def test_each_step_appends_one_row_and_shows_the_services_row_over_the_cache(
    page: Any, base_url: str, watch: Watch
) -> None:
    open_kv(page, base_url)
    assert (
        page.locator(f"{KV} .status").get_attribute("data-step") == "3"
    )  # the example starts three steps in
    heads, kv_heads, d = 4, 2, 2
    seen = run_steps(page, watch, len(TOKENS))
    for t, step in enumerate(seen, start=1):
        body = step["body"]
        assert body["causal"] is True
        assert body["causal_alignment"] == "lower_right"
        assert "window" not in body
        assert [len(body["query"]), len(body["query"][0]), len(body["query"][0][0])] == [heads, 1, d]
        assert [len(body["key"]), len(body["key"][0])] == [kv_heads, t]
        if t > 1:  # the cache is the previous step's, with one row appended per key/value head
            previous = seen[t - 2]["body"]
            assert [rows[:-1] for rows in body["key"]] == previous["key"]
            assert [rows[:-1] for rows in body["value"]] == previous["value"]
        # One row more per step; grouped heads hold H_kv / H_q of the bytes of a head per query head.
        assert step["cache_rows"] == t
        assert step["evicted"] == 0
        assert step["sizes"]["this"] == {
            "tokens": t,
            "kv_heads": kv_heads,
            "bytes": t * 2 * kv_heads * d * BYTES,
        }
        assert step["sizes"]["no-gqa"] == {"tokens": t, "kv_heads": heads, "bytes": t * 2 * heads * d * BYTES}
        assert step["sizes"]["this"]["bytes"] * heads == step["sizes"]["no-gqa"]["bytes"] * kv_heads
        assert set(step["sizes"]) == {"this", "no-gqa"}
    check_against_the_service(base_url, seen)
    check_the_cache_property(base_url, seen, None)
    # Grouped heads: query heads 0 and 1 read key/value head 0, so their weights differ only by their queries.
    assert [
        t.strip() for t in widget(page).locator("table[data-matrix=weights] tbody th").all_inner_texts()
    ] == [
        "head 0 (kv 0)",
        "head 1 (kv 0)",
        "head 2 (kv 1)",
        "head 3 (kv 1)",
    ]
    assert widget(page).get_by_role("button", name="Step").is_disabled()  # every token generated
    assert "That was the last token" in page.locator(f"{KV} .status").inner_text()


def test_a_window_keeps_the_last_rows_of_the_cache_and_evicts_the_rest(
    page: Any, base_url: str, watch: Watch
) -> None:
    open_kv(page, base_url)
    heads, kv_heads, d, left = 4, 1, 2, 2
    answered(
        page,
        KV,
        lambda: (
            widget(page)
            .get_by_label("Key/value heads")
            .select_option(label="1: all query heads share it (multi-query)")
        ),
    )
    answered(page, KV, lambda: widget(page).get_by_label("Sliding window").select_option(value=str(left)))
    seen = run_steps(page, watch, len(TOKENS))
    appended: list[list[list[float]]] = []
    for t, step in enumerate(seen, start=1):
        body = step["body"]
        assert body["window"] == [left, 0]
        appended.append([rows[-1] for rows in body["key"]])
        kept = min(t, left + 1)
        # A rolling cache: the last left + 1 rows appended, the older ones evicted (still drawn, struck out).
        assert [len(rows) for rows in body["key"]] == [kept] * kv_heads
        assert body["key"] == [[keys[h] for keys in appended[-kept:]] for h in range(kv_heads)]
        assert step["cache_rows"] == t
        assert step["evicted"] == t - kept
        assert step["sizes"]["this"] == {
            "tokens": kept,
            "kv_heads": 1,
            "bytes": kept * 2 * kv_heads * d * BYTES,
        }
        assert step["sizes"]["no-window"] == {
            "tokens": t,
            "kv_heads": 1,
            "bytes": t * 2 * kv_heads * d * BYTES,
        }
        assert step["sizes"]["full"] == {"tokens": t, "kv_heads": heads, "bytes": t * 2 * heads * d * BYTES}
        assert step["sizes"]["no-gqa"]["bytes"] == kept * 2 * heads * d * BYTES
    # The size stops growing at left + 1 tokens.
    assert [step["sizes"]["this"]["tokens"] for step in seen] == [1, 2, 3, 3, 3, 3, 3, 3, 3, 3]
    evicted = widget(page).locator("table[data-matrix='cache-0'] tbody td.evicted")
    assert set(evicted.all_inner_texts()) == {"—"}
    assert evicted.count() == (len(TOKENS) - left - 1) * 2 * d
    check_against_the_service(base_url, seen)
    check_the_cache_property(base_url, seen, [left, 0])


def test_reset_aborts_a_step_in_flight(page: Any, base_url: str, watch: Watch) -> None:
    open_kv(page, base_url)
    page.evaluate(
        """name => { window.__steps = [];
             const node = document.querySelector(name);
             node.addEventListener("answer", e => window.__steps.push(e.detail.step)); }""",
        KV,
    )
    held: list[Any] = []

    def hold(route: Any) -> None:
        # Only the cache's own step: the page's other widgets may still be posting to /v1/attention (the
        # heatmap, the positional encodings' rotary scores) when a loaded machine is slow to settle them.
        if json.loads(route.request.post_data or "{}").get("enable_gqa") is True:
            held.append(route)
        else:
            route.continue_()

    page.route("**/v1/attention", hold)
    widget(page).get_by_role("button", name="Step").click()  # step 4: its request is held
    for _ in range(100):  # bounded: at most 10 s
        if held:
            break
        page.wait_for_timeout(100)
    assert len(held) == 1
    assert len(json.loads(held[0].request.post_data)["key"][0]) == 4
    widget(page).get_by_role("button", name="Reset").click()
    page.unroute("**/v1/attention", hold)
    # The widget aborted the request on reset (then Playwright refuses to continue it), or its late answer
    # arrives now: either way it must not be drawn.
    with contextlib.suppress(PlaywrightError):
        held[0].continue_()
    page.wait_for_timeout(500)
    assert page.evaluate("window.__steps") == [0]
    assert page.locator(f"{KV} .status").get_attribute("data-step") == "0"
    assert page.locator(f"{KV} table[data-matrix=weights]").count() == 0
    assert sizes(page)["this"]["tokens"] == 0
    # And the next step starts again from one token.
    answer = click_step(page)
    assert answer["step"] == 1
    assert sizes(page)["this"]["tokens"] == 1


def test_play_steps_to_the_last_token_and_stops(page: Any, base_url: str, watch: Watch) -> None:
    open_kv(page, base_url)
    data = {
        "tokens": ["a", "b", "c", "d"],
        "num_heads": 2,
        "num_kv_heads": 2,
        "d_k": 3,
        "seed": 9,
        "steps": 1,
    }
    answered(
        page,
        KV,
        lambda: page.locator(KV).evaluate(
            "(node, data) => node.setAttribute('data', data)", json.dumps(data)
        ),
    )
    before = len(step_bodies(watch))
    play = widget(page).get_by_role("button", name="Play")
    play.click()
    assert widget(page).get_by_role("button", name="Pause").get_attribute("aria-pressed") == "true"
    page.locator(f"{KV} .status[data-step='4']").wait_for()
    widget(page).get_by_role("button", name="Play").wait_for()  # it stopped by itself at the last token
    assert widget(page).get_by_role("button", name="Play").get_attribute("aria-pressed") == "false"
    bodies = step_bodies(watch)[before:]
    assert [len(body["key"][0]) for body in bodies] == [2, 3, 4]  # one request per step, no more
    assert all(len(body["query"]) == 2 and len(body["query"][0][0]) == 3 for body in bodies)
    page.wait_for_timeout(1000)  # longer than its interval: nothing more is asked
    assert len(step_bodies(watch)) == before + 3
    check_against_the_service(
        base_url,
        [
            {
                "body": bodies[-1],
                "weights": shown_matrix(page, "weights"),
                "output": shown_matrix(page, "output"),
                "weights_text": shown_text(page, "weights"),
            }
        ],
    )


def active_cell(page: Any) -> dict[str, Any] | None:
    return page.evaluate(
        """name => {
            const root = document.querySelector(name).shadowRoot;
            const cell = root.activeElement;
            if (!cell || cell.tagName !== "TD") return null;
            return { matrix: cell.closest("table").dataset.matrix, row: Number(cell.dataset.row),
                     col: Number(cell.dataset.col), readout: root.querySelector(".readout").textContent };
        }""",
        KV,
    )


def test_the_keyboard_steps_and_reaches_every_cell_and_focus_shows_its_value(
    page: Any, base_url: str, watch: Watch
) -> None:
    open_kv(page, base_url)
    step = widget(page).get_by_role("button", name="Step")
    step.focus()
    answer = answered(page, KV, lambda: page.keyboard.press("Enter"))
    assert answer["step"] == 4
    weights = [row[0] for row in post(base_url, "/v1/attention", step_bodies(watch)[-1])["weights"]]
    # Tab from the last control: one Tab stop per table, the two cache heads, the query, then the weights.
    widget(page).get_by_label("d_k").focus()
    reached = []
    for _ in range(4):
        page.keyboard.press("Tab")
        reached.append((active_cell(page) or {}).get("matrix"))
    assert reached == ["cache-0", "cache-1", "query", "weights"]
    cell = active_cell(page)
    assert cell is not None
    label, value = cell["readout"].rsplit(": ", 1)
    assert label == "Weight head 0 (kv 0) → 1 the"
    assert math.isclose(float(value), weights[0][0], rel_tol=REL)
    page.keyboard.press("ArrowDown")
    page.keyboard.press("End")
    cell = active_cell(page)
    assert cell is not None
    assert (cell["matrix"], cell["row"], cell["col"]) == ("weights", 1, 3)
    label, value = cell["readout"].rsplit(": ", 1)
    assert label == "Weight head 1 (kv 0) → 4 on"
    assert math.isclose(float(value), weights[1][3], rel_tol=REL)


def test_a_refused_head_count_is_shown_beside_its_control(page: Any, base_url: str, watch: Watch) -> None:
    watch.expected.append("status of 422")  # Chromium logs every refused fetch; the refusal is the point here
    open_kv(page, base_url)
    data = {"num_heads": 4, "num_kv_heads": 3}
    page.locator(KV).evaluate("(node, data) => node.setAttribute('data', data)", json.dumps(data))
    control = widget(page).get_by_label("Key/value heads")
    page.wait_for_selector(f"{KV} select[aria-invalid=true]")
    assert control.get_attribute("aria-invalid") == "true"
    errors = [text for text in widget(page).locator(".error").all_inner_texts() if text.strip()]
    assert errors == [
        "Key/value heads (of 4 query heads): with enable_gqa the query's H_q=4 heads must be a multiple of "
        "the key's H_kv=3 heads (query head i reads key/value head i // (H_q / H_kv))"
    ]


EMBEDDED = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Someone else's page</title>
<link rel="icon" href="data:,"><script type="module" src="BASE/static/widgets.js"></script></head>
<body><h1>Elsewhere</h1>
<kv-cache api="BASE" data='{"tokens": ["a", "b", "c", "d", "e"], "num_heads": 2, "num_kv_heads": 1,
  "window": 1, "d_k": 3, "seed": 4, "steps": 5}'></kv-cache>
</body></html>"""


@pytest.fixture
def elsewhere(base_url: str) -> Iterator[str]:
    """A second loopback origin with a page that embeds the widget, pointed at the service."""
    yield from serve_page(EMBEDDED.replace("BASE", base_url))


def test_embedded_on_another_origin_the_rows_are_the_services(
    page: Any, base_url: str, elsewhere: str, watch: Watch
) -> None:
    assert elsewhere != base_url
    page.goto(elsewhere + "/")
    page.wait_for_selector(f"{KV}[data-state=ready]", state="attached")
    posts = [url for method, url, _ in watch.requests if method == "POST"]
    assert posts == [base_url + "/v1/attention"]  # step 5 of 5: one request, to the service
    body = step_bodies(watch)[0]
    assert body["window"] == [1, 0]
    assert [len(body["query"]), len(body["query"][0]), len(body["query"][0][0])] == [2, 1, 3]
    assert [len(body["key"]), len(body["key"][0]), len(body["key"][0][0])] == [1, 2, 3]
    again = post(base_url, "/v1/attention", body)
    assert_close(shown_matrix(page, "weights"), [row[0] for row in again["weights"]])
    assert_close(shown_matrix(page, "output"), [row[0] for row in again["output"]])
    assert sizes(page)["this"] == {"tokens": 2, "kv_heads": 1, "bytes": 2 * 2 * 1 * 3 * BYTES}
    assert sizes(page)["no-gqa"]["bytes"] == 2 * 2 * 2 * 3 * BYTES
    assert sizes(page)["no-window"]["tokens"] == 5
    keys = [t.strip() for t in widget(page).locator("table[data-matrix=weights] thead th").all_inner_texts()]
    assert keys[1:] == ["4 d", "5 e"]
