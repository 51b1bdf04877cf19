"""<positional-encoding> in real Chromium: every number it shows is the service's answer (sent again here with
urllib) and agrees with references written here from the papers' formulas, with the standard library only:

- the sinusoidal table, Attention Is All You Need §3.5: PE(pos, 2i) = sin(pos / base^(2i/d_model)),
  PE(pos, 2i+1) = cos(pos / base^(2i/d_model));
- rotary (RoFormer; GPT-NeoX's rotate_half pairs feature i with i + d/2, GPT-J's interleaved 2i with 2i + 1):
  pair i of a row at position p turns by p · base^(−2i/d), so (a, b) becomes (a·cos − b·sin, a·sin + b·cos).

Shown numbers have four decimals, so they are compared as the widget prints them; the readout line and the
circle's data attributes carry the service's numbers in full, compared to 1e-12.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import Watch, serve_page
from tests.browser.test_playground import answered, matrix, post

WIDGET = "positional-encoding"
TOLERANCE = 1e-12


def widget(page: Any) -> Any:
    return page.locator(WIDGET)


def open_widget(page: Any, base_url: str) -> None:
    page.goto(base_url + "/")
    page.wait_for_selector(f"{WIDGET}[data-state=ready]", state="attached")


def printed(value: float) -> str:
    """A number as the widgets print it (formatNumber): four decimals, a real minus sign, no −0.0000."""
    text = f"{value:.4f}"
    return text[1:] if text == "-0.0000" else text.replace("-", "−")


def printed_rows(rows: list[list[float]]) -> list[list[str]]:
    return [[printed(value) for value in row] for row in rows]


def shown_number(text: str) -> float:
    return float(text.replace("−", "-"))


def sinusoidal(length: int, d_model: int, base: float) -> list[list[float]]:
    """AIAYN §3.5 as written, one entry at a time."""
    table = []
    for pos in range(length):
        row = []
        for j in range(d_model):
            angle = pos / base ** ((j - j % 2) / d_model)
            row.append(math.sin(angle) if j % 2 == 0 else math.cos(angle))
        table.append(row)
    return table


def pair_of(style: str, i: int, d: int) -> tuple[int, int]:
    return (2 * i, 2 * i + 1) if style == "interleaved" else (i, i + d // 2)


def rotate(row: list[float], position: int, base: float, style: str) -> list[float]:
    """RoPE of one row at one position: every pair turned by its own angle, with explicit 2×2 rotations."""
    d = len(row)
    out = list(row)
    for i in range(d // 2):
        a, b = pair_of(style, i, d)
        angle = position * base ** (-2 * i / d)
        out[a] = row[a] * math.cos(angle) - row[b] * math.sin(angle)
        out[b] = row[a] * math.sin(angle) + row[b] * math.cos(angle)
    return out


def dot(u: list[float], v: list[float]) -> float:
    return math.fsum(x * y for x, y in zip(u, v, strict=True))


def diagonal_spread(rows: list[list[float]]) -> float:
    """The largest difference between two entries of one diagonal (same i − j)."""
    n = len(rows)
    spread = 0.0
    for offset in range(-(n - 1), n):
        entries = [rows[i][i - offset] for i in range(n) if 0 <= i - offset < n]
        spread = max(spread, max(entries) - min(entries))
    return spread


def readout(page: Any, part: int) -> str:
    text: str = widget(page).locator(".part").nth(part).locator(".readout").inner_text()
    return text


def refused(base_url: str, path: str, body: Any) -> Any:
    """The problem+json of a request the service refuses (the test fails if it answers)."""
    request = urllib.request.Request(
        base_url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    error = caught.value
    assert error.code == 422
    return json.load(error)


def test_the_table_is_the_services_and_aiayns_and_its_cells_are_reached_by_keyboard(
    page: Any, base_url: str, watch: Watch
) -> None:
    open_widget(page, base_url)
    expected = post(base_url, "/v1/positional-encoding", {"kind": "sinusoidal", "length": 8, "d_model": 8})
    encoding = expected["encoding"]
    assert matrix(page, "encoding", WIDGET) == printed_rows(encoding)
    assert matrix(page, "encoding", WIDGET) == printed_rows(sinusoidal(8, 8, 10000))
    # Other sizes and base: the widget asks again, and the answer still matches both.
    answered(
        page, WIDGET, lambda: widget(page).get_by_label("Positions (length)").fill("11"), "answer.n === 11"
    )
    answered(
        page, WIDGET, lambda: widget(page).get_by_label("Dimensions (d_model)").fill("6"), "answer.d === 6"
    )
    answered(page, WIDGET, lambda: widget(page).get_by_label("Base").fill("100"), "answer.base === 100")
    body = {"kind": "sinusoidal", "length": 11, "d_model": 6, "base": 100}
    assert body in [json.loads(sent or "{}") for sent in watch.posts_to("/v1/positional-encoding")]
    encoding = post(base_url, "/v1/positional-encoding", body)["encoding"]
    reference = sinusoidal(11, 6, 100)
    assert matrix(page, "encoding", WIDGET) == printed_rows(encoding)
    assert matrix(page, "encoding", WIDGET) == printed_rows(reference)
    # Keyboard: the table is one Tab stop; arrows move; the readout gives the formula and the full value.
    widget(page).locator("table[data-matrix=encoding] td[tabindex='0']").focus()
    for key in ("ArrowDown", "ArrowDown", "ArrowDown", "ArrowRight", "ArrowRight", "ArrowRight"):
        page.keyboard.press(key)
    formula, value = readout(page, 0).rsplit(" = ", 1)
    assert formula == "PE(3, 3) = cos(3 / 100^(2/6))"
    assert float(value) == encoding[3][3]
    assert math.isclose(float(value), math.cos(3 / 100 ** (2 / 6)), rel_tol=TOLERANCE)
    page.keyboard.press("End")
    formula, value = readout(page, 0).rsplit(" = ", 1)
    assert formula == "PE(3, 5) = cos(3 / 100^(4/6))"
    assert math.isclose(float(value), reference[3][5], rel_tol=TOLERANCE)


def test_rotary_scores_are_equal_along_each_diagonal_and_added_ones_are_not(
    page: Any, base_url: str, watch: Watch
) -> None:
    open_widget(page, base_url)
    for style in ("half", "interleaved"):
        answer = answered(
            page,
            WIDGET,
            lambda style=style: widget(page).get_by_label("Rotary style").select_option(style),
            f"answer.style === '{style}'",
        )
        q, k, n = answer["q"], answer["k"], answer["n"]
        assert n == 8
        assert len(q) == len(k) == 8
        rotary = post(
            base_url,
            "/v1/attention",
            {
                "query": [q] * n,
                "key": [k] * n,
                "value": [k] * n,
                "scale": 1,
                "include": ["scores"],
                "rotary": {"base": 10000, "style": style},
            },
        )["scores"]
        shown = matrix(page, "rotary-scores", WIDGET)
        assert shown == printed_rows(rotary)
        # The property, on the service's numbers and on the numbers shown (one unit of the last digit).
        size = math.hypot(*q) * math.hypot(*k)
        assert diagonal_spread(rotary) <= TOLERANCE * size
        assert diagonal_spread([[shown_number(text) for text in row] for row in shown]) <= 1e-4 + 1e-12
        # Independently: q rotated at i, k rotated at j, dotted.
        for i in range(n):
            for j in range(n):
                expected = dot(rotate(q, i, 10000, style), rotate(k, j, 10000, style))
                assert math.isclose(rotary[i][j], expected, rel_tol=1e-9, abs_tol=TOLERANCE * size)
        # Without rotary, with the table added to q and k: the scores depend on more than i − j.
        table = post(base_url, "/v1/positional-encoding", {"kind": "sinusoidal", "length": n, "d_model": 8})
        plus = [
            [a + b for a, b in zip(vector, row, strict=True)]
            for vector in (q, k)
            for row in table["encoding"]
        ]
        added = post(
            base_url,
            "/v1/attention",
            {"query": plus[:n], "key": plus[n:], "value": plus[n:], "scale": 1, "include": ["scores"]},
        )["scores"]
        assert matrix(page, "added-scores", WIDGET) == printed_rows(added)
        for i in range(n):
            for j in range(n):
                assert math.isclose(added[i][j], dot(plus[i], plus[n + j]), rel_tol=1e-9, abs_tol=1e-12)
        assert diagonal_spread(added) > 0.1
    # The readout names the distance, with the service's full value.
    widget(page).locator("table[data-matrix=rotary-scores] td[data-row='5'][data-col='2']").hover()
    label, value = readout(page, 2).rsplit(": ", 1)
    assert label == "Rotary q at 5 · k at 2 (distance i − j = 3)"
    assert float(value) == rotary[5][2]


def circle_points(page: Any) -> list[tuple[int, float, float]]:
    points = widget(page).locator("svg.circle circle.point")
    return [
        (
            int(points.nth(p).get_attribute("data-position") or "-1"),
            float(points.nth(p).get_attribute("data-x") or "nan"),
            float(points.nth(p).get_attribute("data-y") or "nan"),
        )
        for p in range(points.count())
    ]


def test_the_rotating_pair_is_the_services_rotation(page: Any, base_url: str, watch: Watch) -> None:
    open_widget(page, base_url)
    answer = answered(page, WIDGET, lambda: widget(page).get_by_label("Seed").fill("5"), "true")
    x, n, d = answer["x"], answer["n"], answer["d"]
    slider = widget(page).get_by_role("slider", name="Pair i")
    for style, pair in (("half", 0), ("half", 2), ("interleaved", 1), ("interleaved", 3)):
        if widget(page).get_by_label("Rotary style").input_value() != style:
            answered(
                page,
                WIDGET,
                lambda style=style: widget(page).get_by_label("Rotary style").select_option(style),
            )
        if slider.input_value() != str(pair):
            answered(page, WIDGET, lambda pair=pair: slider.fill(str(pair)))
        a, b = pair_of(style, pair, d)
        assert slider.get_attribute("aria-valuetext") == f"pair {pair}: dimensions {a} and {b}"
        body = {"kind": "rotary", "x": [x] * n, "base": 10000, "style": style, "include": ["tables"]}
        rotated = post(base_url, "/v1/positional-encoding", body)
        output = rotated["output"]
        # Each point sits at the service's coordinates, exactly.
        assert circle_points(page) == [(p, output[p][a], output[p][b]) for p in range(n)]
        shown = matrix(page, "pair", WIDGET)
        table = [
            [output[p][a], output[p][b], rotated["cos"][p][pair], rotated["sin"][p][pair]] for p in range(n)
        ]
        assert shown == printed_rows(table)
        # And they are x's pair turned by p · θ: the same length at every position.
        for p in range(n):
            turned = rotate(x, p, 10000, style)
            assert math.isclose(output[p][a], turned[a], rel_tol=1e-9, abs_tol=TOLERANCE)
            assert math.isclose(output[p][b], turned[b], rel_tol=1e-9, abs_tol=TOLERANCE)
            assert math.isclose(math.hypot(output[p][a], output[p][b]), math.hypot(x[a], x[b]), rel_tol=1e-12)
    # The point of the row under the pointer is marked on the circle.
    widget(page).locator("table[data-matrix=pair] td[data-row='3'][data-col='1']").hover()
    marked = widget(page).locator("svg.circle circle.point.current")
    assert marked.count() == 1
    assert marked.get_attribute("data-position") == "3"


def test_an_odd_d_model_shows_the_services_error_beside_its_control(
    page: Any, base_url: str, watch: Watch
) -> None:
    watch.expected.append("status of 422")  # Chromium logs every refused fetch; the refusal is the point here
    open_widget(page, base_url)
    d_model = widget(page).get_by_label("Dimensions (d_model)")
    d_model.fill("7")
    page.wait_for_selector(f"{WIDGET} input[aria-invalid=true]")
    assert d_model.get_attribute("aria-invalid") == "true"
    message = refused(base_url, "/v1/positional-encoding", {"kind": "sinusoidal", "length": 8, "d_model": 7})
    beside = widget(page).locator(".control:has(input[aria-invalid=true]) .error").inner_text()
    assert beside == f"Dimensions (d_model): {message['errors']['d_model'][0]}"
    assert "even" in beside
    assert widget(page).get_by_label("Positions (length)").get_attribute("aria-invalid") is None
    # Tables too large to read are not drawn, and the widget says why (the service would allow them).
    widget(page).get_by_label("Positions (length)").fill("40")
    general = widget(page).locator(".error.general")
    general.filter(has_text="at most 32 positions").wait_for()
    assert widget(page).locator("table").count() == 0
    widget(page).get_by_label("Positions (length)").fill("8")
    # Mended, the error goes and the table is drawn again.
    answered(page, WIDGET, lambda: d_model.fill("4"), "answer.d === 4")
    assert d_model.get_attribute("aria-invalid") is None
    assert matrix(page, "encoding", WIDGET) == printed_rows(sinusoidal(8, 4, 10000))


EMBEDDED = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Someone else's page</title>
<script type="module" src="BASE/static/widgets.js"></script></head><body><h1>Elsewhere</h1>
<positional-encoding api="BASE"
  data='{"length": 5, "d_model": 6, "base": 50, "style": "interleaved", "pair": 2, "seed": 9}'>
</positional-encoding>
</body></html>"""


@pytest.fixture
def elsewhere(base_url: str) -> Iterator[str]:
    """A second loopback origin with a page that embeds the widget, pointed at the service."""
    yield from serve_page(EMBEDDED.replace("BASE", base_url))


def test_embedded_on_another_origin_it_draws_the_services_answers(
    page: Any, base_url: str, elsewhere: str, watch: Watch
) -> None:
    assert elsewhere != base_url
    page.goto(elsewhere + "/")
    page.wait_for_selector(f"{WIDGET}[data-state=ready]", state="attached")
    body = {"kind": "sinusoidal", "length": 5, "d_model": 6, "base": 50}
    assert json.loads(watch.posts_to("/v1/positional-encoding")[0] or "{}") == body
    assert matrix(page, "encoding", WIDGET) == printed_rows(
        post(base_url, "/v1/positional-encoding", body)["encoding"]
    )
    assert matrix(page, "encoding", WIDGET) == printed_rows(sinusoidal(5, 6, 50))
    rotary = next(json.loads(sent or "{}") for sent in watch.posts_to("/v1/attention"))
    assert rotary["rotary"] == {"base": 50, "style": "interleaved"}
    assert matrix(page, "rotary-scores", WIDGET) == printed_rows(
        post(base_url, "/v1/attention", rotary)["scores"]
    )
    # Pair 2 of d = 6, interleaved: features 4 and 5, at the service's coordinates.
    sent = json.loads(watch.posts_to("/v1/positional-encoding")[1] or "{}")
    assert (sent["kind"], sent["base"], sent["style"]) == ("rotary", 50, "interleaved")
    output = post(base_url, "/v1/positional-encoding", sent)["output"]
    points = circle_points(page)
    assert points == [(p, output[p][4], output[p][5]) for p in range(5)]
    for p, px, py in points:
        turned = rotate(sent["x"][0], p, 50, "interleaved")
        assert math.isclose(px, turned[4], rel_tol=1e-9, abs_tol=TOLERANCE)
        assert math.isclose(py, turned[5], rel_tol=1e-9, abs_tol=TOLERANCE)
    posts = [url for method, url, _ in watch.requests if method == "POST"]
    assert len(posts) == 4
    assert all(url.startswith(base_url) for url in posts)
