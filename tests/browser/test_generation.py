"""<text-generation> in real Chromium: greedy decoding loops, a seed repeats a run exactly, and every
probability shown is the service's (checked by sending the same requests again with urllib).

The greedy text is checked against an independent trigram model written here from the widget's documented
rule (add-alpha counts of the next word after the last two words, backing off to the last word alone).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import Watch, serve_page
from tests.browser.test_playground import answered, post

GENERATION = "text-generation"


def widget(page: Any) -> Any:
    return page.locator(GENERATION)


def open_generation(page: Any, base_url: str) -> None:
    page.goto(base_url + "/")
    page.wait_for_selector(f"{GENERATION}[data-state=ready]", state="attached")


def generated(page: Any) -> list[str]:
    return page.locator(f"{GENERATION} .tok[data-step]").all_inner_texts()


def shown_distribution(page: Any) -> dict[str, str]:
    """The distribution panel: word → the probability it shows."""
    choices = page.locator(f"{GENERATION} .choice")
    return {
        choices.nth(i).get_attribute("data-token"): choices.nth(i).locator(".probability").inner_text()
        for i in range(choices.count())
    }


def greedy_trigram(corpus: str, prompt: list[str], length: int) -> list[str]:
    """Greedy decoding of the trigram model (the first word of the vocabulary wins ties)."""
    words = re.findall(r"[a-z0-9']+|[.,!?;:]", corpus.lower())
    vocabulary = list(dict.fromkeys(words + prompt))
    pairs = Counter(itertools.pairwise(words))
    triples = Counter(zip(words, words[1:], words[2:], strict=False))
    contexts = {(a, b) for a, b, _ in triples}
    text = list(prompt)
    for _ in range(length):
        a, b = text[-2], text[-1]
        counts = {
            word: triples[(a, b, word)] if (a, b) in contexts else pairs[(b, word)] for word in vocabulary
        }
        text.append(max(vocabulary, key=lambda word: (counts[word], -vocabulary.index(word))))
    return text[len(prompt) :]


def test_greedy_decoding_repeats_itself_one_sample_call_per_word(
    page: Any, base_url: str, watch: Watch
) -> None:
    open_generation(page, base_url)
    words = generated(page)
    corpus = page.evaluate("async () => (await import('/static/widgets/bigram.js')).CORPUS")
    assert words == greedy_trigram(corpus, ["the", "cat"], 24)
    assert " ".join(words[:12]) == "sat on the mat . the dog sat on the mat ."
    period = 7  # "the dog sat on the mat ." again and again
    assert words[-period:] == words[-2 * period : -period]
    assert "Repeating itself" in page.locator(f"{GENERATION} .loop").inner_text()
    samples = [json.loads(body or "{}") for body in watch.posts_to("/v1/sample")]
    assert len(samples) == 24
    assert all(body["temperature"] == 0 for body in samples)
    assert [body["seed"] for body in samples] == list(range(1, 25))


def test_a_seeded_run_repeats_exactly_and_another_seed_differs(
    page: Any, base_url: str, watch: Watch
) -> None:
    open_generation(page, base_url)
    answered(page, GENERATION, lambda: widget(page).get_by_role("slider", name="Temperature").fill("1"))
    first = generated(page)
    seed = widget(page).get_by_label("Seed", exact=True)
    answer = answered(page, GENERATION, lambda: seed.fill("2"))
    second = generated(page)
    assert second != first
    # Each word is the service's draw for that step's logits and seed: ask again, get the same token.
    for step in answer["steps"][:6]:
        again = post(
            base_url, "/v1/sample", {"logits": step["logits"], "temperature": 1, "seed": step["seed"]}
        )
        assert again["tokens"] == [step["token"]]
    answered(page, GENERATION, lambda: seed.fill("1"))
    assert generated(page) == first
    page.reload()
    page.wait_for_selector(f"{GENERATION}[data-state=ready]", state="attached")
    answered(page, GENERATION, lambda: widget(page).get_by_role("slider", name="Temperature").fill("1"))
    assert generated(page) == first


def test_hover_and_focus_show_the_services_distribution(page: Any, base_url: str, watch: Watch) -> None:
    open_generation(page, base_url)
    answered(page, GENERATION, lambda: widget(page).get_by_role("slider", name="Temperature").fill("1.5"))
    answered(page, GENERATION, lambda: widget(page).get_by_label("Min-p").fill("0.1"))
    answer = answered(page, GENERATION, lambda: widget(page).get_by_label("Top-k").fill("4"))
    vocabulary, steps = answer["vocabulary"], answer["steps"]
    options = {"temperature": 1.5, "top_k": 4, "min_p": 0.1}
    tokens = page.locator(f"{GENERATION} .tok[data-step]")

    def distribution(step: int) -> list[float]:
        answer = post(base_url, "/v1/softmax", {"logits": steps[step]["logits"], **options})
        probabilities: list[float] = answer["probabilities"]
        return probabilities

    def expected(step: int) -> dict[str, str]:
        """The panel's rows: the 8 most probable words (the first index on ties), and the one drawn."""
        probabilities = distribution(step)
        ranked = sorted(
            (i for i, p in enumerate(probabilities) if p > 0), key=lambda i: (-probabilities[i], i)
        )
        listed = ranked[:8] + ([steps[step]["token"]] if steps[step]["token"] not in ranked[:8] else [])
        return {vocabulary[i]: f"{probabilities[i]:.4f}" for i in listed}

    tokens.nth(3).hover()
    assert shown_distribution(page) == expected(3)
    # Keyboard: one Tab stop, arrows move along the words, and focus shows what hover shows.
    tokens.nth(0).focus()
    assert shown_distribution(page) == expected(0)
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert (
        page.evaluate("document.querySelector('text-generation').shadowRoot.activeElement.dataset.step")
        == "2"
    )
    assert shown_distribution(page) == expected(2)
    assert tokens.evaluate_all("spans => spans.filter(s => s.tabIndex === 0).length") == 1
    # Each word's colour stands for its probability under that distribution, as /v1/sample reported it.
    for step in range(len(steps)):
        shown = float(tokens.nth(step).get_attribute("data-probability") or "nan")
        assert math.isclose(shown, math.exp(steps[step]["logprob"]), rel_tol=1e-12)
        assert math.isclose(shown, distribution(step)[steps[step]["token"]], rel_tol=1e-12)
    # The panel says how many words had a chance: the ones /v1/softmax gives a probability.
    kept = sum(p > 0 for p in distribution(2))
    assert (
        f"{kept} of {len(vocabulary)} words could be drawn"
        in page.locator(f"{GENERATION} .step").inner_text()
    )


def test_a_refused_option_is_shown_beside_its_control(page: Any, base_url: str, watch: Watch) -> None:
    watch.expected.append("status of 422")  # Chromium logs every refused fetch; the refusal is the point here
    open_generation(page, base_url)
    widget(page).get_by_label("Min-p").fill("2")
    page.wait_for_selector(f"{GENERATION} input[aria-invalid=true]")
    assert widget(page).get_by_label("Min-p").get_attribute("aria-invalid") == "true"
    errors = [text for text in page.locator(f"{GENERATION} .error").all_inner_texts() if text.strip()]
    assert any(text.startswith("Min-p:") for text in errors), errors


EMBEDDED = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Someone else's page</title>
<script type="module" src="BASE/static/widgets.js"></script></head><body><h1>Elsewhere</h1>
<text-generation api="BASE"
  data='{"prompt": "the dog", "temperature": 0.8, "top_p": 0.9, "seed": 7, "length": 12}'></text-generation>
</body></html>"""


@pytest.fixture
def elsewhere(base_url: str) -> Iterator[str]:
    """A second loopback origin with a page that embeds the widget, pointed at the service."""
    yield from serve_page(EMBEDDED.replace("BASE", base_url))


def test_embedded_on_another_origin_each_word_is_the_services_draw(
    page: Any, base_url: str, elsewhere: str, watch: Watch
) -> None:
    assert elsewhere != base_url
    page.goto(elsewhere + "/")
    page.wait_for_selector(f"{GENERATION}[data-state=ready]", state="attached")
    sent = [json.loads(body or "{}") for body in watch.posts_to("/v1/sample")]
    assert [body["seed"] for body in sent] == list(range(7, 19))  # seed 7, twelve words
    assert all(body["temperature"] == 0.8 and body["top_p"] == 0.9 for body in sent)
    drawn = [post(base_url, "/v1/sample", body)["tokens"][0] for body in sent]
    vocabulary = page.evaluate(
        """async base => {
             const { ngramModel, CORPUS } = await import(base + "/static/widgets/bigram.js");
             return ngramModel(CORPUS, { extra: ["the", "dog"] }).vocabulary; }""",
        base_url,
    )
    assert generated(page) == [vocabulary[token] for token in drawn]
    assert all(url.startswith(base_url) for method, url, _ in watch.requests if method == "POST")


def test_the_js_client_samples(page: Any, base_url: str) -> None:
    page.goto(base_url + "/")
    body = {"logits": [[2.0, 1.0, 0.1]], "num_samples": 6, "seed": 5}
    result = page.evaluate(
        """async body => (await import("/static/client.js")).sample(body)""",
        body,
    )
    assert result == post(base_url, "/v1/sample", body)
    assert result["seed"] == 5
