"""The layer widgets against a careless or hostile page author, and a keyboard user, in real Chromium.

Each test puts widgets on a bare page of another loopback origin (nothing else on it posts), gives them
`data` that is not what they take (huge counts, words by the thousand, markup, JSON that is not an object),
or removes them while they play, and checks that the card says what is wrong, that nothing unbounded is asked
of the browser or the service, and (the `page` fixture's Watch) that no error reaches the console.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Error as PlaywrightError

from tests.browser.conftest import Watch, serve_page

BARE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>A bare page</title>
<link rel="icon" href="data:,"><script type="module" src="BASE/static/widgets.js"></script></head>
<body><h1>Widgets given odd data</h1></body></html>"""


@pytest.fixture
def bare(base_url: str) -> Iterator[str]:
    """A page on a second loopback origin that loads the widgets and holds none."""
    yield from serve_page(BARE.replace("BASE", base_url))


def place(page: Any, base_url: str, tag: str, data: Any, *, controls: bool = False) -> Any:
    """Adds ``<tag api=… data=…>`` (``data`` as JSON unless already text) and waits until it has settled."""
    text = data if isinstance(data, str) else json.dumps(data)
    page.evaluate(
        """([tag, api, data, controls]) => { const node = document.createElement(tag);
             node.setAttribute("api", api); node.setAttribute("data", data);
             if (controls) node.setAttribute("controls", "");
             node.id = "subject"; document.body.append(node); }""",
        [tag, base_url, text, controls],
    )
    page.wait_for_selector("#subject[data-state=ready]", state="attached")
    return page.locator("#subject")


def messages(subject: Any) -> list[str]:
    return [text.strip() for text in subject.locator(".error").all_inner_texts() if text.strip()]


def open_bare(page: Any, bare: str) -> None:
    page.goto(bare + "/")
    page.wait_for_function("customElements.get('kv-cache') !== undefined")


def test_kv_cache_refuses_a_huge_head_count_before_making_anything_up(
    page: Any, base_url: str, bare: str, watch: Watch
) -> None:
    open_bare(page, bare)
    subject = place(page, base_url, "kv-cache", {"num_heads": 1_000_000_000})
    assert messages(subject) == ["Query heads (num_heads): a whole number from 1 to 8."]
    assert watch.posts_to("/v1/attention") == []
    # The key/value head choices are not the divisors of a billion (listing them would build a huge array).
    options = subject.locator("select").first.locator("option").all_inner_texts()
    assert len(options) <= 2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{not json", "The data attribute is not valid JSON: {not json…"),
        ("5", "The data attribute must be a JSON object ({…}), not 5."),
        ('["the", "cat"]', 'The data attribute must be a JSON object ({…}), not ["the", "cat"].'),
    ],
)
def test_unusable_data_stays_reported_while_the_example_is_shown(
    page: Any, base_url: str, bare: str, watch: Watch, data: str, message: str
) -> None:
    open_bare(page, bare)
    subject = place(page, base_url, "multi-head-attention", data)
    # The example's answer has been drawn (data-state=ready), and the reason it is shown is still said.
    assert subject.locator("table[data-matrix=output]").count() == 1
    assert messages(subject) == [message]


def test_multi_head_refuses_more_tokens_than_it_can_draw_before_asking(
    page: Any, base_url: str, bare: str, watch: Watch
) -> None:
    open_bare(page, bare)
    # Ten thousand words, some of them markup: no request (the answer would be 4 heatmaps of 10⁸ cells).
    tokens = [f"<b>w{i}</b>" if i % 2 else f"<script>w{i}</script>" for i in range(10_000)]
    subject = place(page, base_url, "multi-head-attention", {"tokens": tokens})
    assert messages(subject) == ["The widget draws at most 32 tokens (here 10000): fewer, please."]
    assert watch.posts_to("/v1/multi-head-attention") == []
    assert subject.locator("td").count() == 0
    assert page.evaluate("document.querySelectorAll('script, b').length") == 1  # widgets.js: no markup added
    # Typed: 33 words are refused as well, and 32 are drawn (one heatmap of 32 × 32 per head).
    field = subject.get_by_label("Tokens")
    field.fill(" ".join(f"w{i}" for i in range(33)))
    subject.locator(".error.general", has_text="(here 33)").wait_for()
    assert watch.posts_to("/v1/multi-head-attention") == []
    field.fill(" ".join(f"<i>w{i}</i>" for i in range(32)))
    subject.locator("table[data-matrix=weights-3]").wait_for()
    assert subject.locator("table[data-matrix=weights-0] tbody td").count() == 32 * 32
    assert subject.locator("table[data-matrix=weights-0] tbody th").first.inner_text() == "<i>w0</i>"
    assert len(watch.posts_to("/v1/multi-head-attention")) == 1


@pytest.mark.parametrize(
    ("tag", "data", "message"),
    [
        (
            "multi-head-attention",
            {"num_heads": 1e9},
            "The data's num_heads is 2, 3 or 4 (not 1000000000): 4 heads are shown.",
        ),
        (
            "multi-head-attention",
            {"num_heads": "3", "tokens": "the cat"},
            'The data\'s num_heads is 2, 3 or 4 (not "3"): 4 heads are shown. '
            'The data\'s tokens are a list of words (["the", "cat"]): the example\'s are shown.',
        ),
        (
            "kv-cache",
            {"tokens": "the cat"},
            'The data\'s tokens are a list of words (["the", "cat"]): the example\'s are shown.',
        ),
        (
            "kv-cache",
            {"tokens": [f"w{i}" for i in range(10_000)], "steps": 1},
            "The widget generates at most 32 tokens: the first 32 are used.",
        ),
    ],
)
def test_a_data_field_the_widget_replaces_is_said_in_the_card(
    page: Any, base_url: str, bare: str, watch: Watch, tag: str, data: dict[str, Any], message: str
) -> None:
    open_bare(page, bare)
    subject = place(page, base_url, tag, data)
    assert messages(subject) == [message]
    assert subject.locator("td").count() > 0  # what is shown instead is drawn


def test_kv_cache_removed_while_playing_stops_and_is_paused_when_added_back(
    page: Any, base_url: str, bare: str, watch: Watch
) -> None:
    open_bare(page, bare)
    data = {"tokens": [f"w{i}" for i in range(12)], "num_heads": 2, "d_k": 2, "steps": 1}
    subject = place(page, base_url, "kv-cache", data)
    subject.get_by_role("button", name="Play").click()
    subject.locator(".status[data-step='3']").wait_for()
    page.evaluate("window.__kv = document.querySelector('#subject'); window.__kv.remove()")
    sent = len(watch.posts_to("/v1/attention"))
    page.wait_for_timeout(2000)  # almost three play intervals: no step is taken while it is out of the page
    assert len(watch.posts_to("/v1/attention")) <= sent + 1  # at most the one already in flight as it left
    step = int(page.evaluate("window.__kv.shadowRoot.querySelector('.status').dataset.step"))
    assert 3 <= step <= 4
    page.evaluate("document.body.append(window.__kv)")
    subject.get_by_role("button", name="Play").wait_for()  # paused: the button offers Play again
    assert subject.get_by_role("button", name="Play").get_attribute("aria-pressed") == "false"
    subject.locator(f".status[data-step='{step}']").wait_for()
    sent = len(watch.posts_to("/v1/attention"))
    page.wait_for_timeout(1500)
    assert len(watch.posts_to("/v1/attention")) == sent  # and it stays where it was


def test_the_keyboard_stepping_to_the_last_token_lands_on_reset_not_the_page(
    page: Any, base_url: str, bare: str, watch: Watch
) -> None:
    open_bare(page, bare)
    data = {"tokens": ["a", "b", "c"], "num_heads": 2, "d_k": 2, "steps": 1}
    subject = place(page, base_url, "kv-cache", data)
    subject.get_by_role("button", name="Step").focus()
    for step in (2, 3):
        page.keyboard.press("Enter")
        subject.locator(f".status[data-step='{step}']").wait_for()
    assert subject.get_by_role("button", name="Step").is_disabled()
    focused = page.evaluate("document.querySelector('#subject').shadowRoot.activeElement?.textContent")
    assert focused == "Reset"
    page.keyboard.press("Enter")  # and Enter there starts again
    subject.locator(".status[data-step='0']").wait_for()


def test_kv_cache_offers_no_step_while_its_data_has_a_problem(
    page: Any, base_url: str, bare: str, watch: Watch
) -> None:
    open_bare(page, bare)
    subject = place(page, base_url, "kv-cache", {"d_k": -1, "steps": 1})
    assert messages(subject) == ["d_k: a whole number from 1 to 8."]
    # Pressing them would count steps that nothing shows (and Play would read "Pause" with nothing playing).
    assert subject.get_by_role("button", name="Step").is_disabled()
    assert subject.get_by_role("button", name="Play").is_disabled()
    assert watch.posts_to("/v1/attention") == []
    # With the controls, a d_k typed right brings the steps back, where they were.
    page.evaluate("document.querySelector('#subject').setAttribute('controls', '')")
    subject.get_by_label("d_k").fill("2")
    subject.locator(".status[data-step='1']").wait_for()
    assert subject.get_by_role("button", name="Step").is_enabled()
    subject.get_by_role("button", name="Play").click()
    subject.get_by_label("d_k").fill("-3")  # a problem while playing stops the run
    subject.locator(".error.general", has_text="d_k: a whole number").wait_for()
    assert subject.get_by_role("button", name="Play").get_attribute("aria-pressed") == "false"
    assert subject.get_by_role("button", name="Play").is_disabled()


def test_multi_head_draws_the_newest_head_count_when_an_older_answer_comes_late(
    page: Any, base_url: str, bare: str, watch: Watch
) -> None:
    open_bare(page, bare)
    subject = place(page, base_url, "multi-head-attention", {"tokens": ["a", "b", "c"], "num_heads": 4})
    page.evaluate(
        """() => { window.__heads = [];
             document.querySelector("#subject").addEventListener(
               "answer", e => window.__heads.push(e.detail.body.num_heads)); }"""
    )
    held: list[Any] = []
    page.route(
        "**/v1/multi-head-attention", lambda route: held.append(route) if not held else route.continue_()
    )
    subject.get_by_label("Heads", exact=True).select_option("3")  # its request is held
    for _ in range(100):  # bounded: at most 10 s
        if held:
            break
        page.wait_for_timeout(100)
    subject.get_by_label("Heads", exact=True).select_option("2")  # answered at once
    subject.locator("[data-head='1']").wait_for()
    page.wait_for_function("window.__heads.length === 1")
    with contextlib.suppress(PlaywrightError):  # aborted by the widget, or answered late: never drawn
        held[0].continue_()
    page.wait_for_timeout(500)
    assert page.evaluate("window.__heads") == [2]
    assert subject.locator(".head").count() == 2
    assert subject.get_attribute("aria-busy") is None


# Data of the wrong type or shape: each was drawn as far as it went and then threw inside the widget, which
# stayed busy (aria-busy) with nothing said in the card.
@pytest.mark.parametrize(
    ("tag", "data", "message"),
    [
        (
            "softmax-temperature",
            {"logits": [2, 1], "temperature": "0.5"},
            'The data\'s temperature must be a number, not "0.5". The example is shown instead.',
        ),
        (
            "softmax-temperature",
            {"logits": "2 1 0"},
            'The data\'s logits must be a non-empty list of numbers ([2, 1]), not "2 1 0". '
            "The example is shown instead.",
        ),
        (
            "softmax-temperature",
            {"logits": [[2, 1], [1, 2]]},
            "The data's logits must be a non-empty list of numbers ([2, 1]), not [[2,1],[1,2]]. "
            "The example is shown instead.",
        ),
        (
            "token-likelihood",
            {"logits": [[1, 2], [2, 1]]},
            "The data's logits and targets go together (missing: targets). The example is shown instead.",
        ),
        (
            "token-likelihood",
            {"text": 42},
            "The data's text must be a string, not 42. The example is shown instead.",
        ),
        (
            "attention-heatmap",
            {"query": [[0, 1]], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]], "tokens": "a b"},
            'The data\'s tokens must be a list of words (["the", "cat"]), not "a b". '
            "The example is shown instead.",
        ),
    ],
)
def test_data_of_the_wrong_type_or_shape_is_reported_and_the_example_drawn(
    page: Any, base_url: str, bare: str, watch: Watch, tag: str, data: dict[str, Any], message: str
) -> None:
    open_bare(page, bare)
    subject = place(page, base_url, tag, data, controls=True)
    assert messages(subject) == [message]
    assert subject.get_attribute("aria-busy") is None
    example = {
        "softmax-temperature": ".row[data-token=mat]",
        "token-likelihood": ".tok[data-rank]",
        "attention-heatmap": "table[data-matrix=weights] td",
    }[tag]
    assert subject.locator(example).count() > 0


def test_one_query_as_a_list_of_numbers_is_one_row(page: Any, base_url: str, bare: str, watch: Watch) -> None:
    # /v1/attention takes a 1-D query; the widget threw drawing its 1-D answer (no rows to map).
    open_bare(page, bare)
    data = {"query": [0, 1], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}
    subject = place(page, base_url, "attention-heatmap", data)
    assert messages(subject) == []
    assert subject.locator("table[data-matrix=weights] tbody tr").count() == 1
    assert subject.locator("table[data-matrix=weights] td").all_inner_texts() == ["0.3302", "0.6698"]
    assert subject.locator("table[data-matrix=output] td").all_inner_texts() == ["1.9814", "2.0093"]


def test_an_answer_the_widget_cannot_draw_is_said_and_the_widget_settles(
    page: Any, base_url: str, bare: str, watch: Watch
) -> None:
    # An exception in show() escaped the request's promise: nothing said, aria-busy forever.
    open_bare(page, bare)
    page.evaluate(
        """async (base) => {
             const { SoftmaxTemperature } = await import(base + "/static/widgets.js");
             class Broken extends SoftmaxTemperature {
               static tag = "broken-softmax";
               show() { throw new TypeError("no way to draw this"); }
             }
             customElements.define(Broken.tag, Broken);
           }""",
        base_url,
    )
    subject = place(page, base_url, "broken-softmax", {"logits": [2, 1]})
    assert messages(subject) == ["The widget could not draw this answer: no way to draw this"]
    assert subject.get_attribute("aria-busy") is None
    assert len(watch.posts_to("/v1/softmax")) == 1


@pytest.mark.parametrize("tag", ["token-likelihood", "text-generation"])
def test_smoothing_zero_is_reported_as_out_of_its_range(
    page: Any, base_url: str, bare: str, watch: Watch, tag: str
) -> None:
    # log(0 + 0) is −∞ for every pair the corpus lacks, which JSON sent as null: every request was refused.
    open_bare(page, bare)
    data: dict[str, Any] = {"smoothing": 0}
    if tag == "token-likelihood":
        data["text"] = "the cat sat on the mat ."
    subject = place(page, base_url, tag, data)
    assert messages(subject) == [
        "The data's smoothing must be a number greater than 0, not 0. The example is shown instead."
    ]
    assert subject.locator(".tok").count() > 0  # the example, drawn


def test_a_number_too_large_for_a_double_is_out_of_range_beside_its_field(
    page: Any, base_url: str, bare: str, watch: Watch
) -> None:
    # 1e999 is Infinity, which JSON sends as null: the service's "found null" named no number typed.
    open_bare(page, bare)
    subject = place(page, base_url, "softmax-temperature", {"logits": [2, 1]}, controls=True)
    sent = len(watch.posts_to("/v1/softmax"))
    subject.get_by_label("Logits").fill("2 1e999 0")
    message = "Logits: 1e999 is out of range: a number's magnitude must be below 1.8e308."
    subject.locator(".error", has_text="out of range").wait_for()
    assert messages(subject) == [message]
    assert subject.get_by_label("Logits").get_attribute("aria-invalid") == "true"
    assert len(watch.posts_to("/v1/softmax")) == sent  # nothing asked meanwhile
    subject.get_by_label("Logits").fill("2 1 0")  # fixed: asked again, and the message goes
    subject.locator(".row[data-token='#2']").wait_for()
    assert messages(subject) == []


def test_the_attention_matrices_report_a_number_out_of_range_too(
    page: Any, base_url: str, bare: str, watch: Watch
) -> None:
    open_bare(page, bare)
    data = {"query": [[0, 1]], "key": [[1, 0], [0, 1]], "value": [[6, 0], [0, 3]]}
    subject = place(page, base_url, "attention-heatmap", data, controls=True)
    subject.locator("[data-matrix=key]").fill("1 0\n0 -1e400")
    subject.locator(".error", has_text="out of range").wait_for()
    assert messages(subject) == [
        "Keys K (one row per key): -1e400 is out of range: a number's magnitude must be below 1.8e308."
    ]


def test_every_documented_seed_draws_every_step(page: Any, base_url: str, bare: str, watch: Watch) -> None:
    # Step i sent seed + i: 2^53 − 1 + 1 is past what /v1/sample takes, so step 2 was refused.
    open_bare(page, bare)
    top = 2**53 - 1
    data = {"seed": top - 1, "temperature": 1, "length": 4}
    subject = place(page, base_url, "text-generation", data)
    assert messages(subject) == []
    seeds = [json.loads(body or "{}")["seed"] for body in watch.posts_to("/v1/sample")]
    assert seeds == [top - 1, top, 0, 1]
    assert subject.locator("[data-step]").count() == 4
    summary = subject.locator(".summary").inner_text()
    assert f"seeds {top - 1} to 1 (after {top}, from 0)" in summary


# A fetch that records each request's AbortSignal, so that a test can see which were aborted.
RECORD_SIGNALS = """() => { window.__signals = []; const fetch = window.fetch;
    window.fetch = (url, init) => {
      window.__signals.push(init?.signal ?? null);
      return fetch(url, init);
    }; }"""


def hold_posts(page: Any, path: str) -> list[Any]:
    """POSTs to ``path`` are held, never answered (the preflight goes on); the held routes."""
    held: list[Any] = []
    page.route(
        f"**{path}", lambda route: held.append(route) if route.request.method == "POST" else route.continue_()
    )
    return held


def wait_for_held(page: Any, held: list[Any], count: int = 1) -> None:
    for _ in range(100):  # bounded: at most 10 s
        if len(held) >= count:
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"{len(held)} requests held, {count} expected")


def test_kv_cache_taken_out_of_the_page_aborts_its_step_in_flight(
    page: Any, base_url: str, bare: str, watch: Watch
) -> None:
    # Its disconnectedCallback() did not call the base class's, which aborts the request in flight.
    open_bare(page, bare)
    page.evaluate(RECORD_SIGNALS)
    held = hold_posts(page, "/v1/attention")
    page.evaluate(
        """(api) => { const node = document.createElement("kv-cache"); node.id = "subject";
             node.setAttribute("api", api); node.setAttribute("data", '{"steps": 1}');
             document.body.append(node); }""",
        base_url,
    )
    wait_for_held(page, held)
    assert page.evaluate("window.__signals.map(s => s.aborted)") == [False]
    page.evaluate("document.querySelector('#subject').remove()")
    assert page.evaluate("window.__signals.map(s => s.aborted)") == [True]
    with contextlib.suppress(PlaywrightError):
        held[0].continue_()


@pytest.mark.parametrize("how", ["a control changed", "a stage refused"])
def test_transformer_block_leaves_no_rejection_unhandled_when_a_round_fails(
    page: Any, base_url: str, bare: str, watch: Watch, how: str
) -> None:
    # Pre-norm awaited the whole block only after norm₁ and attention: when those failed first, its
    # rejection (AbortError) went unhandled, "Uncaught (in promise)" on the console (the watch fails on it).
    open_bare(page, bare)
    norm = hold_posts(page, "/v1/layer-norm")
    whole = hold_posts(page, "/v1/transformer-block")  # in flight while norm₁ fails
    page.evaluate(
        """(api) => { const node = document.createElement("transformer-block"); node.id = "subject";
             node.setAttribute("api", api); document.body.append(node); }""",
        base_url,
    )
    wait_for_held(page, norm)
    wait_for_held(page, whole)
    held = norm + whole
    subject = page.locator("#subject")
    if how == "a control changed":
        page.unroute("**/v1/layer-norm")
        page.unroute("**/v1/transformer-block")
        subject.get_by_label("Causal mask").uncheck()  # aborts the round in flight, asks again
        subject.locator("[data-stage=output]").wait_for()
        assert json.loads(watch.posts_to("/v1/transformer-block")[-1] or "{}")["attention"]["causal"] is False
    else:
        watch.expected.append("status of 500")
        problem = {
            "type": "about:blank",
            "title": "Internal Server Error",
            "status": 500,
            "detail": "Broken.",
        }
        norm[0].fulfill(
            status=500,
            headers={"Content-Type": "application/problem+json", "Access-Control-Allow-Origin": "*"},
            body=json.dumps(problem),
        )
        page.wait_for_selector("#subject[data-state=ready]", state="attached")
        assert messages(subject) == ["Broken."]
    page.wait_for_timeout(500)  # room for an unhandled rejection to be reported (the watch checks)
    assert subject.get_attribute("aria-busy") is None
    for route in held[1:] if how == "a stage refused" else held:
        with contextlib.suppress(PlaywrightError):  # aborted by the widget already
            route.continue_()


WIDGETS = [
    "attention-heatmap",
    "softmax-temperature",
    "token-likelihood",
    "text-generation",
    "multi-head-attention",
    "positional-encoding",
    "kv-cache",
    "transformer-block",
]


@pytest.mark.parametrize("controls", [False, True], ids=["plain", "controls"])
def test_every_widget_fits_a_300_px_wide_page(
    page: Any, base_url: str, bare: str, watch: Watch, controls: bool
) -> None:
    # <softmax-temperature>'s rows had column minimums of about 290 px: 313 px wide in a 300 px frame. Wide
    # matrices may scroll inside their own box (.scroll); the card and the page may not.
    page.set_viewport_size({"width": 300, "height": 800})
    open_bare(page, bare)
    page.evaluate(
        """([tags, api, controls]) => { for (const tag of tags) {
             const node = document.createElement(tag); node.setAttribute("api", api);
             if (controls) node.setAttribute("controls", "");
             document.body.append(node); } }""",
        [WIDGETS, base_url, controls],
    )
    for tag in WIDGETS:
        page.wait_for_selector(f"{tag}[data-state=ready]", state="attached")
    widths = page.evaluate(
        """(tags) => Object.fromEntries(tags.map((tag) => {
             const card = document.querySelector(tag).shadowRoot.querySelector(".card");
             return [tag, [card.scrollWidth, card.clientWidth]]; }))""",
        WIDGETS,
    )
    assert {tag: scroll for tag, (scroll, client) in widths.items() if scroll > client} == {}
    page_width = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert page_width[0] <= page_width[1]
