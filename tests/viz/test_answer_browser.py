"""The page's first screen in a real browser (headless Chromium): the answer line above the fold,
with the numbers the trace holds; a model view of many layers folded to five and unfolded by a
click; every head of a 12-head model inside an 820 px frame."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("selenium")

from selenium.webdriver.common.by import By

import attnlab as al
from attnlab.trace import ModelTrace
from attnlab.viz._page import opening
from helpers import open_page

pytestmark = pytest.mark.browser

TOKENS = ["<s>", "the", "cat", "sat", "on", "it"]


def _model_trace(layers: int, heads: int) -> ModelTrace:
    """A causal model's trace of ``layers`` layers of ``heads`` heads (random weights, float64)."""
    traced = {
        i: al.MultiheadAttention(2 * heads, heads, seed=i, dtype=np.float64).trace(
            np.random.default_rng(i).standard_normal((len(TOKENS), 2 * heads)), is_causal=True
        )
        for i in range(layers)
    }
    special = [True] + [False] * (len(TOKENS) - 1)
    return ModelTrace("m", list(range(len(TOKENS))), TOKENS, traced, layers, heads, special=special)


def test_the_answer_line_is_above_the_fold_with_the_query_its_strongest_key_and_weight(browser, tmp_path):
    trace = _model_trace(3, 2)
    opens = opening(trace)  # the last token, the strongest previous-token head
    row = trace[opens["layer"]].weights[opens["head"], opens["query"]]  # (L,)
    key = int(np.argmax(row))
    expected = f"{TOKENS[opens['query']]} → {TOKENS[key]}, {row[key]:.4f}, layer {opens['layer']}, head {opens['head']}"
    page = tmp_path / "answer.html"
    al.view(trace, page)
    open_page(browser, page)
    line = browser.find_element(By.ID, "answer-text")
    assert line.text == expected
    assert line.rect["y"] + line.rect["height"] < 200  # the first lines of a 1400 × 1000 window
    al.view(trace, page, lang="zh")
    open_page(browser, page)
    assert browser.find_element(By.ID, "answer-text").text == (
        f"{TOKENS[opens['query']]} → {TOKENS[key]}，{row[key]:.4f}，第 {opens['layer']} 层，头 {opens['head']}"
    )


def test_thirty_layers_fold_to_five_around_the_layer_on_show_and_a_click_unfolds_them(browser, tmp_path):
    trace = _model_trace(30, 2)
    trace.opens = {"layer": 16, "head": 0, "query": 5}
    page = tmp_path / "folded.html"
    al.view(trace, page)
    open_page(browser, page)
    shown = lambda: [  # noqa: E731
        int(row.get_attribute("data-layer")) for row in browser.find_elements(By.CSS_SELECTOR, "#grid tr[data-layer]")
        if row.is_displayed()
    ]  # fmt: skip
    assert shown() == [14, 15, 16, 17, 18]
    fold = browser.find_element(By.ID, "fold")
    assert fold.text == "+ 25 more layers"
    fold.click()
    assert shown() == list(range(30)) and fold.text == "fold to 5 layers"
    fold.click()
    browser.execute_script("window.attnlabView.useLayer(29)")
    assert shown() == [25, 26, 27, 28, 29]  # folded, the rows follow the layer on show


def test_twelve_heads_fit_an_820_px_frame(browser, tmp_path):
    page = tmp_path / "wide.html"
    al.view(_model_trace(2, 12), page)
    size = browser.get_window_size()
    try:
        browser.set_window_size(820, 1000)
        open_page(browser, page)
        right = browser.execute_script("return document.getElementById('grid-box').getBoundingClientRect().right")
        edges = browser.execute_script(
            "return [...document.querySelectorAll('#grid canvas')].map((c) => c.getBoundingClientRect().right)"
        )
        assert len(edges) == 24 and max(edges) <= right
    finally:
        browser.set_window_size(size["width"], size["height"])
