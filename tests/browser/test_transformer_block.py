"""<transformer-block> in real Chromium: every stage it shows is the service's answer.

The block's body is read off the wire (the loopback guard records every request); the stages are asked of the
layers' own endpoints here, as the widget asks them (each fed the answer before it), and the block itself of
/v1/transformer-block; each shown cell must equal those answers at the precision shown. Independently of the
browser, the stages add up to the block: h = x + attention and y = h + feed-forward (pre-norm), to rel 1e-12.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from tests.browser.conftest import Watch
from tests.browser.test_playground import answered, matrix, post

WIDGET = "transformer-block"
PATH = "/v1/transformer-block"


def widget(page: Any) -> Any:
    return page.locator(WIDGET)


def open_widget(page: Any, base_url: str) -> None:
    page.goto(base_url + "/")
    page.wait_for_selector(f"{WIDGET}[data-state=ready]", state="attached")


def shown(values: list[list[float]]) -> list[list[str]]:
    """Numbers as formatNumber (base.js) prints them: four decimals, a real minus sign, no "−0.0000"."""

    def one(value: float) -> str:
        text = f"{value:.4f}"
        return "0.0000" if text == "-0.0000" else text.replace("-", "−")

    return [[one(v) for v in row] for row in values]


def last_sent(watch: Watch) -> dict[str, Any]:
    bodies = watch.posts_to(PATH)
    assert bodies, "the widget sent nothing to " + PATH
    sent: dict[str, Any] = json.loads(bodies[-1] or "{}")
    return sent


def stages(base_url: str, sent: dict[str, Any]) -> dict[str, Any]:
    """The service's answers for each stage, asked as the widget asks them."""
    block = post(base_url, PATH, sent)
    body = {name: value for name, value in sent.items() if name != "include"}
    attention = {**body["attention"], "include": ["weights"]}
    feed = {**body["feed_forward"], "include": ["hidden"]}
    found: dict[str, Any] = {"block": block}
    if body["norm_position"] == "pre":
        found["norm_1"] = post(base_url, "/v1/layer-norm", {"x": body["x"], **body["norm_1"]})
        found["attention"] = post(
            base_url, "/v1/multi-head-attention", {"query": found["norm_1"]["output"], **attention}
        )
        found["norm_2"] = post(base_url, "/v1/layer-norm", {"x": block["residual"], **body["norm_2"]})
        found["feed_forward"] = post(base_url, "/v1/feed-forward", {"x": found["norm_2"]["output"], **feed})
    else:
        found["attention"] = post(base_url, "/v1/multi-head-attention", {"query": body["x"], **attention})
        found["feed_forward"] = post(base_url, "/v1/feed-forward", {"x": block["residual"], **feed})
    return found


def check_shown(page: Any, base_url: str, sent: dict[str, Any]) -> dict[str, Any]:
    answers = stages(base_url, sent)
    block = answers["block"]
    assert matrix(page, "x", WIDGET) == shown(sent["x"])
    for head, weights in enumerate(block["weights"]):
        assert matrix(page, f"weights-{head}", WIDGET) == shown(weights), head
    assert matrix(page, "attention", WIDGET) == shown(answers["attention"]["output"])
    assert matrix(page, "residual", WIDGET) == shown(block["residual"])
    assert matrix(page, "hidden", WIDGET) == shown(answers["feed_forward"]["hidden"])
    assert matrix(page, "feed_forward", WIDGET) == shown(answers["feed_forward"]["output"])
    assert matrix(page, "output", WIDGET) == shown(block["output"])
    if sent["norm_position"] == "pre":
        assert matrix(page, "norm_1", WIDGET) == shown(answers["norm_1"]["output"])
        assert matrix(page, "norm_2", WIDGET) == shown(answers["norm_2"]["output"])
    return answers


def test_every_stage_shown_is_the_services_answer_and_they_add_up_to_the_block(
    page: Any, base_url: str, watch: Watch
) -> None:
    open_widget(page, base_url)
    sent = last_sent(watch)
    assert sent["norm_position"] == "pre"
    assert sent["feed_forward"]["activation"] == "gelu"
    assert sorted(sent["include"]) == ["residual", "weights"]
    assert np.shape(sent["x"]) == (3, 4)
    answers = check_shown(page, base_url, sent)
    block = answers["block"]
    # The stages, each its own endpoint's answer, are the block's: the residual adds are exact sums.
    np.testing.assert_allclose(
        block["residual"], np.add(sent["x"], answers["attention"]["output"]), rtol=1e-12, atol=1e-13
    )
    np.testing.assert_allclose(
        block["output"], np.add(block["residual"], answers["feed_forward"]["output"]), rtol=1e-12, atol=1e-13
    )
    weights = np.asarray(block["weights"])
    assert weights.shape == (2, 3, 3)
    assert np.all(np.triu(weights, 1) == 0)  # causal
    np.testing.assert_allclose(weights, answers["attention"]["weights"], rtol=1e-12, atol=1e-13)


def test_post_norm_and_a_gated_activation_are_the_services_answers_too(
    page: Any, base_url: str, watch: Watch
) -> None:
    open_widget(page, base_url)
    answered(page, WIDGET, lambda: widget(page).get_by_label("Normalization").select_option("post"))
    sent = last_sent(watch)
    assert sent["norm_position"] == "post"
    check_shown(page, base_url, sent)
    assert widget(page).locator("[data-stage=norm_1]").count() == 0  # post-norm shows h = norm(x + attention)

    answered(page, WIDGET, lambda: widget(page).get_by_label("Activation").select_option("swiglu"))
    sent = last_sent(watch)
    assert sent["feed_forward"]["activation"] == "swiglu"
    assert np.shape(sent["feed_forward"]["w_3"]) == (4, 8)
    check_shown(page, base_url, sent)

    answered(page, WIDGET, lambda: widget(page).get_by_label("Norm", exact=True).select_option("rms"))
    sent = last_sent(watch)
    assert sent["norm_1"]["kind"] == sent["norm_2"]["kind"] == "rms"
    assert "bias" not in sent["norm_1"]
    check_shown(page, base_url, sent)


def test_each_stage_states_its_shape(page: Any, base_url: str) -> None:
    open_widget(page, base_url)
    shapes = widget(page).locator("section.stage .shape").all_inner_texts()
    assert shapes == [
        "[3 × 4]",
        "[3 × 4]",
        "[2 × 3 × 3]",
        "[3 × 4]",
        "[3 × 4]",
        "[3 × 4]",
        "[3 × 8]",
        "[3 × 4]",
        "[3 × 4]",
    ]
