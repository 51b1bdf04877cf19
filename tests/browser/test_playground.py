"""The playground, the embedded widgets and /docs in real Chromium; every number checked against the API.

The expected values come from the service's own answers (sent again by the test with urllib) or, for the
worked example, from the course: softmax([0, 1/√2]) = [0.3302, 0.6698].
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Error as PlaywrightError

from tests.browser.conftest import Watch, serve_page

ATTENTION = "attention-heatmap"
SOFTMAX = "softmax-temperature"
LIKELIHOOD = "token-likelihood"


def post(base_url: str, path: str, body: Any) -> Any:
    request = urllib.request.Request(
        base_url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def answered(page: Any, widget: str, action: Callable[[], None], until: str = "true") -> Any:
    """Run ``action`` and wait for ``widget``'s next rendered answer for which the JavaScript expression
    ``until`` (of ``answer``) holds; returns it.

    ``until`` matters after several inputs: a slow machine may let the debounce fire between two key
    presses, and the answer to that intermediate state is rightly drawn before the final one.
    """
    page.evaluate(
        """([name, until]) => { const wanted = new Function("answer", "return " + until);
             window.__answer = new Promise((resolve, reject) => {
               const node = document.querySelector(name);
               const listen = e => { if (wanted(e.detail)) { node.removeEventListener("answer", listen);
                                                             resolve(e.detail); } };
               node.addEventListener("answer", listen);
               const late = () => reject(new Error(name + " drew no such answer within 15 s"));
               setTimeout(late, 15000); }); }""",
        [widget, until],
    )
    action()
    return page.evaluate("window.__answer")


def open_playground(page: Any, base_url: str) -> None:
    """The playground with every widget's first answer shown, so that later requests are the test's."""
    page.goto(base_url + "/")
    # text-generation also posts to /v1/softmax, kv-cache to /v1/attention: their first answers come first
    for widget in (ATTENTION, SOFTMAX, LIKELIHOOD, "text-generation", "kv-cache"):
        page.wait_for_selector(f"{widget}[data-state=ready]", state="attached")


def matrix(page: Any, name: str, widget: str = ATTENTION) -> list[list[str]]:
    rows = page.locator(f"{widget} table[data-matrix={name}] tbody tr")
    return [
        [cell.strip() for cell in rows.nth(i).locator("td").all_inner_texts()] for i in range(rows.count())
    ]


def test_the_page_is_the_playground_for_a_browser_and_loads_nothing_from_elsewhere(
    page: Any, base_url: str, watch: Watch
) -> None:
    open_playground(page, base_url)
    assert page.title() == "Attention playground"
    loaded = {url.removeprefix(base_url) for method, url, _ in watch.requests if method == "GET"}
    assert {"/", "/static/widgets.js", "/static/client.js", "/static/style.css"} <= loaded


def test_default_example_shows_the_worked_weights(page: Any, base_url: str) -> None:
    open_playground(page, base_url)
    assert matrix(page, "weights") == [["0.3302", "0.6698"]]
    assert matrix(page, "raw") == [["0.0000", "1.0000"]]  # q·k₁ = 0, q·k₂ = 1
    assert matrix(page, "scaled") == [["0.0000", f"{1 / math.sqrt(2):.4f}"]]
    expected = post(
        base_url, "/v1/attention", {"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}
    )
    assert matrix(page, "output") == [[f"{x:.4f}" for x in expected["output"]]]


def test_causal_toggle_zeroes_every_weight_above_the_diagonal(page: Any, base_url: str) -> None:
    open_playground(page, base_url)
    answered(page, ATTENTION, lambda: page.get_by_role("button", name="Random, seeded").click())
    before = matrix(page, "weights")
    assert len(before) == 6
    assert any(float(before[i][j]) > 0 for i in range(6) for j in range(i + 1, 6))
    answered(page, ATTENTION, lambda: page.locator(ATTENTION).get_by_label("Causal mask").check())
    weights = matrix(page, "weights")
    masked = matrix(page, "masked")
    for i in range(6):
        assert all(weights[i][j] == "0.0000" for j in range(i + 1, 6)), weights[i]
        assert all(masked[i][j] == "−∞" for j in range(i + 1, 6)), masked[i]
        assert masked[i][i] != "−∞"
        assert abs(sum(float(w) for w in weights[i]) - 1) < 1e-3
    assert weights[0][0] == "1.0000"


def test_hiding_a_key_and_setting_the_scale_are_the_services_answers(page: Any, base_url: str) -> None:
    open_playground(page, base_url)
    answered(page, ATTENTION, lambda: page.locator(ATTENTION).get_by_label("k₂ (2)").uncheck())
    assert matrix(page, "masked")[0][1] == "−∞"
    assert matrix(page, "weights") == [["1.0000", "0.0000"]]
    assert matrix(page, "output") == [["6.0000", "0.0000"]]
    answered(page, ATTENTION, lambda: page.locator(ATTENTION).get_by_label("k₂ (2)").check())
    answered(page, ATTENTION, lambda: page.locator(ATTENTION).get_by_label("Scale").fill("2"))
    worked = {"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]], "scale": 2}
    expected = post(base_url, "/v1/attention", worked)
    assert matrix(page, "scaled") == [["0.0000", "2.0000"]]
    assert matrix(page, "weights") == [[f"{w:.4f}" for w in expected["weights"]]]


def active_cell(page: Any) -> dict[str, Any] | None:
    """The heatmap's focused table cell: its table, position, Tab stop and the readout line's text."""
    return page.evaluate(
        """() => {
            const root = document.querySelector("attention-heatmap").shadowRoot;
            const cell = root.activeElement;
            if (!cell || cell.tagName !== "TD") return null;
            const table = cell.closest("table");
            return { matrix: table.dataset.matrix, row: Number(cell.dataset.row),
                     col: Number(cell.dataset.col), text: cell.textContent,
                     tabStops: table.querySelectorAll("td[tabindex='0']").length,
                     isTabStop: cell.tabIndex === 0, readout: root.querySelector(".readout").textContent };
        }"""
    )


def shown(readout: str) -> tuple[str, float]:
    """'Weight cat → sat: 0.123…' as ('Weight cat → sat', 0.123…): the number exactly as JS printed it."""
    label, value = readout.rsplit(": ", 1)
    return label, float(value)


def test_keyboard_focus_on_a_heatmap_cell_shows_its_value_as_hover_does(
    page: Any, base_url: str, watch: Watch
) -> None:
    open_playground(page, base_url)
    answered(page, ATTENTION, lambda: page.get_by_role("button", name="Random, seeded").click())
    sent = next(
        json.loads(body) for body in reversed(watch.posts_to("/v1/attention")) if body and "weights" in body
    )
    weights = post(base_url, "/v1/attention", {**sent, "include": ["weights"]})["weights"]
    # Tab from the last key's toggle: each step's table is one Tab stop, the weights are the fourth.
    page.locator(ATTENTION).get_by_label("mat (6)").focus()
    reached = []
    for _ in range(4):
        page.keyboard.press("Tab")
        reached.append(active_cell(page))
    assert [(cell or {}).get("matrix") for cell in reached] == ["raw", "scaled", "masked", "weights"]
    first = reached[-1]
    assert first is not None
    assert (first["row"], first["col"]) == (0, 0)
    assert shown(first["readout"]) == ("Weight the → the", weights[0][0])
    # Arrow keys move within the table; the Tab stop moves along (one per table).
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    cell = active_cell(page)
    assert cell is not None
    assert (cell["matrix"], cell["row"], cell["col"]) == ("weights", 1, 2)
    assert cell["isTabStop"]
    assert cell["tabStops"] == 1
    assert cell["text"] == f"{weights[1][2]:.4f}"
    assert shown(cell["readout"]) == ("Weight cat → sat", weights[1][2])
    page.keyboard.press("End")
    cell = active_cell(page)
    assert cell is not None
    assert (cell["row"], cell["col"]) == (1, 5)
    assert shown(cell["readout"]) == ("Weight cat → mat", weights[1][5])
    page.keyboard.press("Control+End")
    page.keyboard.press("ArrowDown")  # already on the last row: stays
    cell = active_cell(page)
    assert cell is not None
    assert (cell["row"], cell["col"]) == (5, 5)
    # Tab leaves the table for the next one, and Shift+Tab comes back to the same cell.
    page.keyboard.press("Tab")
    assert (active_cell(page) or {}).get("matrix") == "output"
    page.keyboard.press("Shift+Tab")
    cell = active_cell(page)
    assert cell is not None
    assert (cell["matrix"], cell["row"], cell["col"]) == ("weights", 5, 5)
    # Hover shows the same line for the cell under the pointer (and its title, the browser's tooltip).
    hovered = page.locator(f"{ATTENTION} table[data-matrix=weights] td[data-row='2'][data-col='0']")
    hovered.hover()
    readout = page.locator(f"{ATTENTION} .readout")
    assert shown(readout.inner_text()) == ("Weight sat → the", weights[2][0])
    assert shown(hovered.get_attribute("title") or "") == ("sat → the", weights[2][0])


def test_api_errors_appear_beside_the_control_that_caused_them(
    page: Any, base_url: str, watch: Watch
) -> None:
    watch.expected.append("status of 422")  # Chromium logs every refused fetch; the refusal is the point here
    open_playground(page, base_url)
    keys = page.locator(ATTENTION).get_by_label("Keys K (one row per key)")
    keys.fill("1 0 0\n0 1 0")
    error = page.locator(f"{ATTENTION} .control:has(textarea[data-matrix=key]) .error")
    page.wait_for_function(
        "() => document.querySelector('attention-heatmap').shadowRoot"
        ".querySelector('textarea[data-matrix=key]').getAttribute('aria-invalid') === 'true'"
    )
    text = error.inner_text()
    assert text.startswith("Keys K (one row per key): key has d_k=3 but query has d_k=2"), text
    assert page.locator(f"{ATTENTION} .control:has(textarea[data-matrix=query]) .error").inner_text() == ""


def test_temperature_zero_makes_the_distribution_one_hot(page: Any, base_url: str, watch: Watch) -> None:
    open_playground(page, base_url)
    slider = page.locator(SOFTMAX).get_by_role("slider", name="Temperature")
    slider.focus()
    answer = answered(page, SOFTMAX, lambda: page.keyboard.press("Home"), until="answer.temperature === 0")
    assert answer["temperature"] == 0
    shown = [text.strip() for text in page.locator(f"{SOFTMAX} .probability").all_inner_texts()]
    assert shown == ["1.0000", "0.0000", "0.0000", "0.0000", "0.0000"]
    assert page.locator(f"{SOFTMAX} .entropy").inner_text() == "0.0000"
    last = json.loads(watch.posts_to("/v1/softmax")[-1] or "{}")
    assert last["temperature"] == 0  # greedy was the service's answer, not the page's
    # Back up to a temperature of 2: the same logits, spread out, exactly as the service says.
    # On a busy machine the debounce may let an intermediate temperature through first: wait for the answer
    # at 2, which is the last one asked for and so the one shown.
    for _ in range(40):
        page.keyboard.press("ArrowRight")
    page.locator(f"{SOFTMAX} .summary").filter(has_text="temperature 2.00").wait_for()
    assert json.loads(watch.posts_to("/v1/softmax")[-1] or "{}")["temperature"] == 2.0
    expected = post(base_url, "/v1/softmax", {"logits": last["logits"], "temperature": 2.0})
    shown = [text.strip() for text in page.locator(f"{SOFTMAX} .probability").all_inner_texts()]
    assert shown == [f"{p:.4f}" for p in expected["probabilities"]]


def test_an_answer_to_a_temperature_the_slider_has_left_is_never_drawn(page: Any, base_url: str) -> None:
    # Deterministic: the page's clock is paused, so the debounced update waits until the test runs it, and
    # the first answer is held back until the slider has moved on. Once, that answer was drawn (and its
    # "answer" event fired) for a temperature the slider no longer showed.
    page.clock.install()
    open_playground(page, base_url)
    page.clock.pause_at(page.evaluate("Date.now()") + 1000)
    page.evaluate(
        """name => { window.__answers = [];
             const node = document.querySelector(name);
             node.addEventListener("answer", e => window.__answers.push(e.detail)); }""",
        SOFTMAX,
    )
    held: list[Any] = []

    def hold(route: Any) -> None:
        held.append(route)

    page.route("**/v1/softmax", hold)
    slider = page.locator(SOFTMAX).get_by_role("slider", name="Temperature")
    slider.focus()
    page.keyboard.press("Home")  # temperature 0
    page.clock.run_for(1000)  # the debounce fires: the request for temperature 0 is sent, and held
    for _ in range(100):  # bounded: at most 10 s
        if held:
            break
        page.wait_for_timeout(100)
    assert len(held) == 1
    page.keyboard.press("ArrowRight")  # temperature 0.05; its update waits on the paused clock
    page.unroute("**/v1/softmax", hold)
    # The answer for temperature 0 may arrive now, after the slider left it; or the widget aborted that
    # request when the slider moved (then Playwright refuses to continue it), and it cannot be drawn.
    with contextlib.suppress(PlaywrightError):
        held[0].continue_()
    page.wait_for_timeout(500)  # real time for an answer to reach the page (its own timers are paused)
    assert page.evaluate("window.__answers") == []
    answer = answered(page, SOFTMAX, lambda: page.clock.run_for(1000))
    assert answer["temperature"] == 0.05
    assert page.evaluate("window.__answers.map(a => a.temperature)") == [0.05]
    assert page.locator(f"{SOFTMAX} .summary").inner_text().endswith("temperature 0.05")


def test_likelihood_perplexity_is_the_services(page: Any, base_url: str, watch: Watch) -> None:
    open_playground(page, base_url)
    sent = json.loads(watch.posts_to("/v1/log-likelihood")[-1] or "{}")
    assert sent["shift"] is True
    expected = post(base_url, "/v1/log-likelihood", sent)
    assert page.locator(f"{LIKELIHOOD} .perplexity").inner_text() == f"{expected['perplexity']:.4f}"
    assert page.locator(f"{LIKELIHOOD} .mean-nll").inner_text() == f"{expected['mean_nll']:.4f} nats"
    ranks = [
        int(r)
        for r in page.locator(f"{LIKELIHOOD} .tok[data-rank]").evaluate_all("s => s.map(x => x.dataset.rank)")
    ]
    assert ranks == expected["ranks"][1:]
    # Keyboard focus on a scored token shows what hovering it shows: its rank and log-probability.
    first_scored = page.locator(f"{LIKELIHOOD} .tok[data-rank]").first
    first_scored.focus()
    readout = page.locator(f"{LIKELIHOOD} .readout").inner_text()
    assert readout == first_scored.get_attribute("title")
    logprob = f"{expected['token_logprobs'][1]:.4f}".replace("-", "−")
    assert readout.startswith(
        f"{first_scored.inner_text()}: rank {expected['ranks'][1]}, log-probability {logprob};"
    )


def test_the_bigram_model_counts_as_a_plain_loop_does(page: Any, base_url: str) -> None:
    """The one computation the widgets do themselves, against counting pairs in Python."""
    page.goto(base_url + "/")
    corpus = "the cat sat . the cat ran . a dog sat on the cat ."
    tokens = ["the", "cat", "sat", "unseen"]
    got = page.evaluate(
        """async ([corpus, tokens]) => {
            const { bigramLogits } = await import("/static/widgets.js");
            return bigramLogits(corpus, tokens, 0.5);
        }""",
        [corpus, tokens],
    )
    training = corpus.split()
    vocabulary = list(dict.fromkeys(training + tokens))
    assert got["vocabulary"] == vocabulary
    assert got["targets"] == [vocabulary.index(word) for word in tokens]
    pairs = list(itertools.pairwise(training))
    for word, row in zip(tokens, got["logits"], strict=True):
        expected = [math.log(pairs.count((word, following)) + 0.5) for following in vocabulary]
        assert row == pytest.approx(expected, rel=1e-12)


def test_typing_a_sentence_rescores_it(page: Any, base_url: str, watch: Watch) -> None:
    open_playground(page, base_url)
    text = page.get_by_label("Text", exact=True)
    answered(page, LIKELIHOOD, lambda: text.fill("the dog sat on the mat ."))
    sent = json.loads(watch.posts_to("/v1/log-likelihood")[-1] or "{}")
    assert len(sent["targets"]) == 7
    expected = post(base_url, "/v1/log-likelihood", sent)
    assert page.locator(f"{LIKELIHOOD} .perplexity").inner_text() == f"{expected['perplexity']:.4f}"
    assert page.locator(f"{LIKELIHOOD} .tok").all_inner_texts() == [
        "the",
        "dog",
        "sat",
        "on",
        "the",
        "mat",
        ".",
    ]
    posts = len(watch.posts_to("/v1/log-likelihood"))
    text.fill("the")
    message = page.locator(f"{LIKELIHOOD} .general")
    message.filter(has_text="at least two words").wait_for()
    assert len(watch.posts_to("/v1/log-likelihood")) == posts  # nothing to score, nothing asked


README = Path(__file__).resolve().parents[2] / "README.md"
README_ORIGIN = "https://attention.example"


def readme_embed_snippet() -> str:
    """The README's copy-paste HTML for embedding the widgets, exactly as a reader would paste it."""
    return README.read_text().split("```html\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def embed_url(base_url: str) -> Iterator[str]:
    """A second loopback origin serving someone else's page: the README's snippet, pointed at the service."""
    snippet = readme_embed_snippet().replace(README_ORIGIN, base_url)
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Someone else\'s page</title>'
        '<link rel="icon" href="data:,"></head>'
        f"<body><h1>A page on another origin</h1>{snippet}</body></html>"
    )
    yield from serve_page(body)


def test_the_readme_widgets_work_embedded_on_another_origin(
    page: Any, base_url: str, embed_url: str, watch: Watch
) -> None:
    assert embed_url != base_url
    page.goto(embed_url + "/")
    for widget in (ATTENTION, SOFTMAX, LIKELIHOOD):
        page.wait_for_selector(f"{widget}[data-state=ready]", state="attached")
    expected = post(base_url, "/v1/softmax", {"logits": [2.0, 1.0, 0.1], "temperature": 1})
    shown = [text.strip() for text in page.locator(f"{SOFTMAX} .probability").all_inner_texts()]
    assert shown == [f"{p:.4f}" for p in expected["probabilities"]]
    sent = json.loads(watch.posts_to("/v1/attention")[0] or "{}")
    assert sent["causal"] is True
    weights = post(base_url, "/v1/attention", {**sent, "include": ["weights"]})["weights"]
    assert matrix(page, "weights") == [[f"{w:.4f}" for w in row] for row in weights]
    assert weights[0][1:] == [0.0, 0.0]
    # The snippet's own token labels, not the built-in example's
    table = page.locator(f"{ATTENTION} table[data-matrix=weights]")
    assert [t.strip() for t in table.locator("tbody th[scope=row]").all_inner_texts()] == [
        "the",
        "cat",
        "sat",
    ]
    assert [t.strip() for t in table.locator("thead th[scope=col]").all_inner_texts()][1:] == [
        "the",
        "cat",
        "sat",
    ]
    assert [t.strip() for t in page.locator(f"{SOFTMAX} .token").all_inner_texts()] == ["yes", "no", "maybe"]
    sent = json.loads(watch.posts_to("/v1/log-likelihood")[0] or "{}")
    perplexity = post(base_url, "/v1/log-likelihood", sent)["perplexity"]
    assert page.locator(f"{LIKELIHOOD} .perplexity").inner_text() == f"{perplexity:.4f}"
    assert all(url.startswith(base_url) for method, url, _ in watch.requests if method == "POST")


def test_the_js_client_from_another_origin_answers_and_names_refused_fields(
    page: Any, base_url: str, embed_url: str, watch: Watch
) -> None:
    watch.expected.append("status of 422")  # the refusal below is on purpose
    page.goto(embed_url + "/")
    result = page.evaluate(
        """async base => {
            const { attention, ApiError } = await import(base + "/static/client.js");
            const ok = await attention({ query: [0, 1], key: [[1, 0], [0, 1]], value: [[6, 0], [0, 3]] });
            try {
                await attention({ query: [0, 1], key: [[1, 0, 0], [0, 1, 0]], value: [[6, 0], [0, 3]] });
                return { ok, refused: null };
            } catch (error) {
                return { ok, refused: { isApiError: error instanceof ApiError, status: error.status,
                                        key: error.messagesFor("key"), errors: error.errors,
                                        message: error.message } };
            }
        }""",
        base_url,
    )
    assert result["ok"] == post(
        base_url, "/v1/attention", {"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}
    )
    refused = result["refused"]
    assert refused["isApiError"] is True
    assert refused["status"] == 422
    assert refused["key"] == ["key has d_k=3 but query has d_k=2 (query shape [2], key shape [2, 3])"]
    assert refused["errors"] == {"key": refused["key"]}  # named as in the problem document
    assert "d_k=3" in refused["message"]


def test_docs_render_and_try_it_out_runs_the_attention_example(
    page: Any, base_url: str, screenshots: Path
) -> None:
    page.goto(base_url + "/docs")
    operation = page.locator("#operations-attention-attention")  # Swagger UI names it by operationId
    operation.locator(".opblock-summary").first.click()
    operation.get_by_role("button", name="Try it out").click()
    body = operation.locator("textarea.body-param__text")
    assert json.loads(body.input_value()) == {
        "query": [0, 1],
        "key": [[1, 0], [0, 1]],
        "value": [[6, 0], [0, 3]],
    }
    with page.expect_response(lambda response: response.url == base_url + "/v1/attention") as response_info:
        operation.get_by_role("button", name="Execute").click()
    assert response_info.value.status == 200
    status = operation.locator(".live-responses-table tr.response .response-col_status").first
    assert status.inner_text().strip() == "200"
    page.evaluate("document.activeElement.blur()")
    # From the operation's title to the live answer (bounding boxes are viewport-relative; clips are not).
    scroll = page.evaluate("window.scrollY")
    top = operation.bounding_box()
    bottom = operation.locator(".live-responses-table").first.bounding_box()
    assert top is not None
    assert bottom is not None
    clip = {
        "x": top["x"],
        "y": top["y"] + scroll,
        "width": top["width"],
        "height": bottom["y"] + bottom["height"] - top["y"],
    }
    page.screenshot(path=str(screenshots / "api-docs-try-it-out.png"), full_page=True, clip=clip)
    operation.locator(".opblock-summary").first.click()
    page.evaluate("document.activeElement.blur(); window.scrollTo(0, 0)")
    page.screenshot(path=str(screenshots / "api-docs.png"))


def test_screenshots_of_the_playground_at_desktop_and_phone_width(
    page: Any, base_url: str, screenshots: Path
) -> None:
    open_playground(page, base_url)
    answered(page, ATTENTION, lambda: page.get_by_role("button", name="Random, seeded").click())
    answered(page, ATTENTION, lambda: page.locator(ATTENTION).get_by_label("Causal mask").check())
    page.screenshot(path=str(screenshots / "playground.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(base_url + "/")
    page.wait_for_selector(f"{SOFTMAX}[data-state=ready]", state="attached")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow}px wider than a phone"
    page.screenshot(path=str(screenshots / "playground-phone.png"))
