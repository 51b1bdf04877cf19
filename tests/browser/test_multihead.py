"""<multi-head-attention> in real Chromium: every weight and output it shows is the service's answer.

What the page sent is read off the wire (the loopback guard records every request), sent again with urllib,
and the answer compared with the cells at the precision shown. Independently of the browser, that answer is
checked against a plain-loop reference of the layer written here (projections, per-head softmax over the
visible keys, grouped key/value heads, concatenation, output projection), to rel 1e-12 in float64.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.browser.conftest import Watch, serve_page
from tests.browser.test_playground import answered, matrix, post

WIDGET = "multi-head-attention"
PATH = "/v1/multi-head-attention"


def widget(page: Any) -> Any:
    return page.locator(WIDGET)


def open_widget(page: Any, base_url: str) -> None:
    page.goto(base_url + "/")
    page.wait_for_selector(f"{WIDGET}[data-state=ready]", state="attached")


def shown(value: float) -> str:
    """A number as formatNumber (base.js) prints it: four decimals, a real minus sign, no "−0.0000"."""
    text = f"{value:.4f}"
    return "0.0000" if text == "-0.0000" else text.replace("-", "−")


def shown_matrix(values: list[list[float]]) -> list[list[str]]:
    return [[shown(v) for v in row] for row in values]


def last_sent(watch: Watch) -> dict[str, Any]:
    # The playground's <transformer-block> posts to the same path for its attention stage (asking for the
    # weights only); this widget always asks for the heads too.
    bodies = [json.loads(body or "{}") for body in watch.posts_to(PATH)]
    bodies = [body for body in bodies if "heads" in body.get("include", [])]
    assert bodies, "the widget sent nothing to " + PATH
    sent: dict[str, Any] = bodies[-1]
    return sent


def head_panels(page: Any) -> list[dict[str, Any]]:
    """Each heatmap's head, key/value head, whether it is marked shared, its label and its border colour."""
    panels: list[dict[str, Any]] = page.locator(f"{WIDGET} .head").evaluate_all(
        """panels => panels.map(p => ({
            head: Number(p.dataset.head), kv: Number(p.dataset.kvHead),
            shared: p.classList.contains("shared"), label: p.querySelector(".kv").textContent,
            border: getComputedStyle(p).borderTopColor }))"""
    )
    return panels


def reference_layer(body: dict[str, Any]) -> dict[str, Any]:
    """The layer in plain loops from its definition (AIAYN §3.2.2, grouped heads as in PyTorch's enable_gqa).

    Shares nothing with the service's kernels: NumPy only multiplies the projections.
    """
    x = np.asarray(body["query"], dtype=np.float64)
    heads, kv_heads = body["num_heads"], body["num_kv_heads"]
    q, k, v = (x @ np.asarray(body[w], dtype=np.float64) for w in ("w_q", "w_k", "w_v"))
    d_k = q.shape[1] // heads
    d_v = v.shape[1] // kv_heads
    n = x.shape[0]
    scale = 1 / math.sqrt(d_k)
    weights, outputs = [], []
    for head in range(heads):
        group = head // (heads // kv_heads)
        qh = q[:, head * d_k : (head + 1) * d_k]
        kh = k[:, group * d_k : (group + 1) * d_k]
        vh = v[:, group * d_v : (group + 1) * d_v]
        head_weights, head_output = [], []
        for i in range(n):
            visible = [j for j in range(n) if not body["causal"] or j <= i]
            scores = {j: sum(qh[i, t] * kh[j, t] for t in range(d_k)) * scale for j in visible}
            top = max(scores.values())
            exps = {j: math.exp(s - top) for j, s in scores.items()}
            total = sum(exps.values())
            row = [exps[j] / total if j in exps else 0.0 for j in range(n)]
            head_weights.append(row)
            head_output.append([sum(row[j] * vh[j, c] for j in range(n)) for c in range(d_v)])
        weights.append(head_weights)
        outputs.append(head_output)
    concatenated = np.concatenate([np.asarray(o) for o in outputs], axis=1)
    output = concatenated @ np.asarray(body["w_o"], dtype=np.float64)
    return {"weights": weights, "heads": outputs, "output": output.tolist(), "scale": scale}


def assert_close(got: Any, expected: Any) -> None:
    # rel 1e-12; the absolute floor only matters for entries that cancel to about zero.
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-12, atol=1e-13)


def check_shown_against_service(page: Any, base_url: str, sent: dict[str, Any]) -> dict[str, Any]:
    """Every weight cell, head-output cell and output cell equals the service's answer to ``sent``."""
    expected = post(base_url, PATH, sent)
    heads = sent["num_heads"]
    assert len(expected["weights"]) == heads
    assert page.locator(f"{WIDGET} .head").count() == heads
    for head in range(heads):
        assert matrix(page, f"weights-{head}", WIDGET) == shown_matrix(expected["weights"][head]), head
    concatenated = [[x for head in expected["heads"] for x in head[t]] for t in range(len(sent["query"]))]
    assert matrix(page, "heads", WIDGET) == shown_matrix(concatenated)
    assert matrix(page, "output", WIDGET) == shown_matrix(expected["output"])
    answer: dict[str, Any] = expected
    return answer


def test_every_weight_and_output_shown_is_the_services_answer(page: Any, base_url: str, watch: Watch) -> None:
    open_widget(page, base_url)
    sent = last_sent(watch)
    assert sent["num_heads"] == 4
    assert sent["num_kv_heads"] == 4
    assert sent["causal"] is True
    assert sorted(sent["include"]) == ["heads", "weights"]
    tokens = ["the", "cat", "sat", "down"]
    assert np.shape(sent["query"]) == (4, 4)
    assert np.shape(sent["w_q"]) == (4, 8)
    assert np.shape(sent["w_k"]) == np.shape(sent["w_v"]) == (4, 8)
    assert np.shape(sent["w_o"]) == (8, 4)
    answer = check_shown_against_service(page, base_url, sent)
    table = widget(page).locator("table[data-matrix=weights-0]")
    assert [t.strip() for t in table.locator("tbody th[scope=row]").all_inner_texts()] == tokens
    # Causal: nothing above the diagonal, every row a distribution.
    for head in answer["weights"]:
        for i, row in enumerate(head):
            assert row[i + 1 :] == [0.0] * (len(row) - i - 1)
            assert math.fsum(row) == pytest.approx(1, rel=1e-12)
    # The service's answer is the layer's definition, computed here in loops.
    reference = reference_layer(sent)
    for name in ("weights", "heads", "output"):
        assert_close(answer[name], reference[name])
    assert answer["scale"] == pytest.approx(reference["scale"], rel=1e-12)
    # Without the causal mask the keys after each query are seen too (and the cells say so).
    answered(page, WIDGET, lambda: widget(page).get_by_label("Causal mask").uncheck())
    sent = last_sent(watch)
    assert sent["causal"] is False
    answer = check_shown_against_service(page, base_url, sent)
    assert any(
        row[i + 1 :] != [0.0] * (len(row) - i - 1) for head in answer["weights"] for i, row in enumerate(head)
    )
    assert_close(answer["output"], reference_layer(sent)["output"])


def test_a_causal_heatmap_hides_the_keys_after_each_query(base_url: str) -> None:
    """Independently of the browser: a causal layer's scores are null above the diagonal, and it is the
    layer's definition (grouped heads included)."""
    tokens = 5
    rng = np.random.default_rng(12)
    body = {
        "query": rng.normal(size=(tokens, 4)).tolist(),
        "w_q": rng.normal(size=(4, 8)).tolist(),
        "w_k": rng.normal(size=(4, 4)).tolist(),
        "w_v": rng.normal(size=(4, 4)).tolist(),
        "w_o": rng.normal(size=(8, 4)).tolist(),
        "num_heads": 4,
        "num_kv_heads": 2,
        "causal": True,
        "include": ["weights", "scores", "heads"],
    }
    answer = post(base_url, PATH, body)
    for scores, weights in zip(answer["scores"], answer["weights"], strict=True):
        for i in range(tokens):
            assert scores[i][i + 1 :] == [None] * (tokens - i - 1)
            assert None not in scores[i][: i + 1]
            assert math.fsum(weights[i]) == pytest.approx(1, rel=1e-12)
    reference = reference_layer(body)
    for name in ("weights", "heads", "output"):
        assert_close(answer[name], reference[name])


def test_gqa_sends_fewer_key_value_heads_and_marks_the_heads_that_share_one(
    page: Any, base_url: str, watch: Watch
) -> None:
    open_widget(page, base_url)
    before = post(base_url, PATH, last_sent(watch))
    panels = head_panels(page)
    assert [(p["head"], p["kv"], p["shared"]) for p in panels] == [(i, i, False) for i in range(4)]
    assert len({p["border"] for p in panels}) == 4
    assert widget(page).get_by_label("Key/value heads", exact=True).is_disabled()

    answered(page, WIDGET, lambda: widget(page).get_by_label("Grouped key/value heads (GQA)").check())
    sent = last_sent(watch)
    assert (sent["num_heads"], sent["num_kv_heads"]) == (4, 2)
    assert np.shape(sent["w_k"]) == np.shape(sent["w_v"]) == (4, 4)  # two key/value heads of d_k = 2
    answer = check_shown_against_service(page, base_url, sent)
    assert_close(answer["output"], reference_layer(sent)["output"])
    panels = head_panels(page)
    assert [(p["head"], p["kv"], p["shared"]) for p in panels] == [
        (0, 0, True),
        (1, 0, True),
        (2, 1, True),
        (3, 1, True),
    ]
    assert panels[0]["border"] == panels[1]["border"] != panels[2]["border"] == panels[3]["border"]
    assert [p["label"] for p in panels] == [
        "key/value head 0, shared with head 1",
        "key/value head 0, shared with head 0",
        "key/value head 1, shared with head 3",
        "key/value head 1, shared with head 2",
    ]
    summary = widget(page).locator(".groups").inner_text()
    assert summary == (
        "4 query heads share 2 key/value heads (grouped-query attention): heads 0, 1 read key/value head 0; "
        "heads 2, 3 read key/value head 1."
    )
    # The first head of each group keeps its key/value projection: its weights are unchanged, while the
    # heads that now read another head's keys attend differently.
    assert answer["weights"][0] == before["weights"][0]
    assert answer["weights"][2] == before["weights"][2]
    assert answer["weights"][1] != before["weights"][1]

    kv = widget(page).get_by_label("Key/value heads", exact=True)
    answered(page, WIDGET, lambda: kv.fill("1"), until="answer.body.num_kv_heads === 1")
    sent = last_sent(watch)
    assert sent["num_kv_heads"] == 1
    check_shown_against_service(page, base_url, sent)
    panels = head_panels(page)
    assert {(p["kv"], p["shared"]) for p in panels} == {(0, True)}
    assert panels[0]["label"] == "key/value head 0, shared with head 1, 2, 3"
    assert "multi-query" in widget(page).locator(".groups").inner_text()

    answered(page, WIDGET, lambda: widget(page).get_by_label("Grouped key/value heads (GQA)").uncheck())
    sent = last_sent(watch)
    assert sent["num_kv_heads"] == 4
    assert [(p["kv"], p["shared"]) for p in head_panels(page)] == [(i, False) for i in range(4)]
    assert post(base_url, PATH, sent)["weights"] == before["weights"]


def test_changing_the_number_of_heads_redraws_that_many_heatmaps(
    page: Any, base_url: str, watch: Watch
) -> None:
    open_widget(page, base_url)
    heads = widget(page).get_by_label("Heads", exact=True)
    for count in (2, 3, 4):
        answered(page, WIDGET, lambda count=count: heads.select_option(str(count)))
        sent = last_sent(watch)
        assert (sent["num_heads"], sent["num_kv_heads"]) == (count, count)
        assert np.shape(sent["w_q"]) == (4, 2 * count)
        assert np.shape(sent["w_o"]) == (2 * count, 4)
        check_shown_against_service(page, base_url, sent)
        assert [p["head"] for p in head_panels(page)] == list(range(count))
        columns = widget(page).locator("table[data-matrix=heads] thead th[scope=col]").all_inner_texts()
        assert len(columns) == 1 + 2 * count  # the corner, then d_v = 2 columns per head
    # Three heads with grouped key/value heads: one key/value head (3 has no other divisor), read by all.
    answered(page, WIDGET, lambda: heads.select_option("3"))
    answered(page, WIDGET, lambda: widget(page).get_by_label("Grouped key/value heads (GQA)").check())
    sent = last_sent(watch)
    assert (sent["num_heads"], sent["num_kv_heads"]) == (3, 1)
    check_shown_against_service(page, base_url, sent)
    assert [(p["kv"], p["shared"]) for p in head_panels(page)] == [(0, True)] * 3


def test_a_key_value_head_count_the_service_refuses_is_explained_beside_its_control(
    page: Any, base_url: str, watch: Watch
) -> None:
    watch.expected.append("status of 422")  # Chromium logs every refused fetch; the refusal is the point here
    open_widget(page, base_url)
    answered(page, WIDGET, lambda: widget(page).get_by_label("Grouped key/value heads (GQA)").check())
    kv = widget(page).get_by_label("Key/value heads", exact=True)
    kv.fill("3")
    page.wait_for_function(
        f"() => document.querySelector('{WIDGET}').shadowRoot.querySelector('[aria-invalid=true]') !== null"
    )
    assert last_sent(watch)["num_kv_heads"] == 3
    error = widget(page).locator(".control:has(input[type=number][max]) .error")
    assert error.inner_text() == (
        "Key/value heads: num_heads=4 must be a multiple of num_kv_heads=3 "
        "(query head i reads key/value head i // (num_heads / num_kv_heads))"
    )
    assert kv.get_attribute("aria-invalid") == "true"
    assert widget(page).locator(".general").inner_text() == ""
    # A count that divides again: the error goes, and the answer is drawn.
    answered(page, WIDGET, lambda: kv.fill("2"), until="answer.body.num_kv_heads === 2")
    assert error.inner_text() == ""
    assert kv.get_attribute("aria-invalid") is None


def test_keyboard_focus_on_a_weight_shows_its_value_as_hover_does(
    page: Any, base_url: str, watch: Watch
) -> None:
    open_widget(page, base_url)
    weights = post(base_url, PATH, last_sent(watch))["weights"]
    first = widget(page).locator("table[data-matrix=weights-1] td[data-row='0'][data-col='0']")
    first.focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowRight")
    readout = widget(page).locator(".readout")
    label, value = readout.inner_text().rsplit(": ", 1)
    assert label == "Head 1 weight cat → cat"
    assert float(value) == weights[1][1][1]
    focused = page.evaluate(
        f"() => document.querySelector('{WIDGET}').shadowRoot.activeElement.dataset.row"
        f" + ',' + document.querySelector('{WIDGET}').shadowRoot.activeElement.tabIndex"
    )
    assert focused == "1,0"
    widget(page).locator("table[data-matrix=output] td[data-row='2'][data-col='3']").hover()
    expected_output = post(base_url, PATH, last_sent(watch))["output"]
    label, value = readout.inner_text().rsplit(": ", 1)
    assert label == "Output sat → y4"
    assert float(value) == expected_output[2][3]


EMBEDDED_DATA = {"tokens": ["a", "b", "c"], "num_heads": 2, "num_kv_heads": 1, "causal": False, "seed": 3}


@pytest.fixture
def embed_url(base_url: str) -> Iterator[str]:
    """Someone else's page on a second loopback origin, loading the widget from the service."""
    data = json.dumps(EMBEDDED_DATA).replace("'", "&#39;")
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Another origin</title>'
        f'<link rel="icon" href="data:,"><script type="module" src="{base_url}/static/widgets.js"></script>'
        f"</head><body><h1>A page on another origin</h1>"
        f"<{WIDGET} api=\"{base_url}\" data='{data}'></{WIDGET}>"
        "</body></html>"
    )
    yield from serve_page(body)


def test_the_widget_works_embedded_on_another_origin(
    page: Any, base_url: str, embed_url: str, watch: Watch
) -> None:
    assert embed_url != base_url
    page.goto(embed_url + "/")
    page.wait_for_selector(f"{WIDGET}[data-state=ready]", state="attached")
    assert all(url.startswith(base_url) for method, url, _ in watch.requests if method == "POST")
    sent = last_sent(watch)
    assert (sent["num_heads"], sent["num_kv_heads"], sent["causal"]) == (2, 1, False)
    answer = check_shown_against_service(page, base_url, sent)
    assert_close(answer["output"], reference_layer(sent)["output"])
    table = widget(page).locator("table[data-matrix=weights-0]")
    assert [t.strip() for t in table.locator("tbody th[scope=row]").all_inner_texts()] == ["a", "b", "c"]
    assert widget(page).get_by_label("Grouped key/value heads (GQA)").is_checked()
    assert widget(page).get_by_label("Key/value heads", exact=True).input_value() == "1"
    assert [(p["kv"], p["shared"]) for p in head_panels(page)] == [(0, True), (0, True)]
