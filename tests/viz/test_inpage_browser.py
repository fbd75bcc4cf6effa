"""The page that runs its model (attnlab view --in-browser) in a real browser (headless Chromium driven
by Selenium), from file://: typing, the scale and an ablation each redraw the page, and the answer and
the frame's weights it then shows are attnlab's NumPy forward of builtin:coref in float64 on the same
weights (its scale changed, its heads' outputs zeroed through the forward's own hook)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

pytest.importorskip("selenium")

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

import attnlab as al
from attnlab import models
from attnlab.models._network import Recorder
from helpers import open_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FIRST = "小明是个运动达人，小红是个画家，他平时很爱打篮球"
SHE = "小明喜欢打球，小红喜欢唱歌，她"


def numpy_weights(model: models.Model, text: str, multiplier: float = 1.0, ablated: tuple = ()) -> list[np.ndarray]:
    """Each layer's weights (H, L, L) of ``text``, every scale times ``multiplier``, the ``ablated``
    (layer, head) outputs zero."""
    network = copy.deepcopy(model.network)
    for block in network.blocks:
        block.attn.scale *= multiplier

    def zeroed(layer: int, out: np.ndarray) -> np.ndarray:  # (B, H, L, E)
        out = out.copy()
        for at, head in ablated:
            if at == layer:
                out[:, head] = 0.0
        return out

    record = Recorder(trace_layers=frozenset(range(len(network.blocks))), head_outputs=zeroed)
    network.forward(model.tokenizer.encode(text)[None], None, None, None, record, None)
    return [record.traces[i].weights for i in range(len(network.blocks))]


def redrawn(browser, count: int) -> None:
    WebDriverWait(browser, 20).until(lambda b: b.execute_script("return window.attnlabInPage.timing.redraws") >= count)


def answer(browser) -> tuple[int, float]:
    found = browser.execute_script("return window.attnlabInPage.answer")
    return int(found["key"]), float(found["weight"])


def test_typing_scaling_and_ablating_redraw_the_page_with_numpys_numbers(browser, tmp_path):
    oracle = models.load("builtin:coref", dtype=np.float64)  # the page's float32 weights, computed in float64
    page = tmp_path / "typed.html"
    al.view(al.load_model("builtin:coref"), page, text=FIRST, in_browser=True)
    open_page(browser, page, "window.attnlabInPage && window.attnlabInPage.timing.redraws >= 1", timeout=20)
    tokens = oracle.tokenizer.pieces(oracle.tokenizer.encode(FIRST))[0]
    he = tokens.index("他")
    w = numpy_weights(oracle, FIRST)[1][0, he]  # the answering head, layer 1 head 0, at 他
    key, weight = answer(browser)
    assert (key, weight) == pytest.approx((int(np.argmax(w)), float(w.max())), abs=1e-9)
    assert tokens[key] == "小" and weight > 0.99  # 他 → 小明's 小

    browser.execute_script(f"window.attnlabInPage.type({SHE!r})")  # a keystroke's input event
    redrawn(browser, 2)
    tokens = oracle.tokenizer.pieces(oracle.tokenizer.encode(SHE))[0]
    she = tokens.index("她")
    plain = numpy_weights(oracle, SHE)
    key, weight = answer(browser)
    assert (key, weight) == pytest.approx((int(np.argmax(plain[1][0, she])), float(plain[1][0, she].max())), abs=1e-9)
    browser.switch_to.frame(browser.find_element(By.ID, "inpage-view"))
    shown = browser.execute_script("return [attnlabView.layer, attnlabView.head, attnlabView.query]")
    assert shown == [1, 0, she]  # a new text opens on the answering head at the pronoun
    row = browser.execute_script(f"return attnlabView.weightRows(0, [{she}])")[0]
    np.testing.assert_allclose(row, plain[1][0, she], atol=1e-9)
    browser.execute_script("attnlabView.setHead(2)")  # the reader's place, kept across the redraws below
    browser.switch_to.default_content()

    browser.execute_script(
        "const s = document.getElementById('inpage-scale'); s.value = '-100'; s.dispatchEvent(new Event('input'))"
    )  # every layer's scale × 0.1
    redrawn(browser, 3)
    flat = numpy_weights(oracle, SHE, 0.1)
    assert answer(browser)[1] == pytest.approx(float(flat[1][0, she].max()), abs=1e-9)
    assert answer(browser)[1] < plain[1][0, she].max() / 2  # the scale moves the answer

    for head in range(4):  # every head of layer 0 ablated, one click each
        browser.find_element(By.CSS_SELECTOR, f"#inpage-heads tr:nth-child(1) td:nth-child({head + 2}) button").click()
        redrawn(browser, 4 + head)
    ablated = numpy_weights(oracle, SHE, 0.1, tuple((0, h) for h in range(4)))
    assert answer(browser)[1] == pytest.approx(float(ablated[1][0, she].max()), abs=1e-9)
    assert answer(browser)[1] != pytest.approx(float(flat[1][0, she].max()), abs=1e-6)
    browser.switch_to.frame(browser.find_element(By.ID, "inpage-view"))
    assert browser.execute_script("return [attnlabView.layer, attnlabView.head]") == [1, 2]
    row = browser.execute_script(f"return attnlabView.weightRows(2, [{she}])")[0]
    np.testing.assert_allclose(row, ablated[1][2, she], atol=1e-9)
    browser.switch_to.default_content()
