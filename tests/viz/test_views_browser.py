"""The page's views beyond a trace in a real browser (headless Chromium driven by
Selenium): two texts, generated tokens, rollout and flow, ablation. Each number read off
the page is checked against one computed here (transformers' eager attention for the
generation, the arrays written in the test for rollout and ablation)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("selenium")

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

import attnlab as al
from attnlab import models
from attnlab.cli import main
from helpers import open_page

pytestmark = pytest.mark.browser

A = "小明是个运动达人，小红是个音乐迷，他平时很爱打篮球"
B = "小明是个运动达人，小红是个音乐迷，她平时很爱弹钢琴"


# the page has every view ready, and one set of them
READY = "window.attnlabView.ready && window.attnlabViews.ready && window.attnlabViews.count === 1"


def hover(browser, canvas_id: str, i: int, j: int, readout: str) -> str:
    """Move the mouse over cell (i, j) of a view's canvas; the readout's number (data-value)."""
    canvas = browser.find_element(By.ID, canvas_id)
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
    margin, cell = (float(canvas.get_attribute(f"data-{name}")) for name in ("margin", "cell"))
    width, height = canvas.size["width"], canvas.size["height"]
    x, y = margin + (j + 0.5) * cell - width / 2, margin + (i + 0.5) * cell - height / 2
    ActionChains(browser).move_to_element_with_offset(canvas, int(x), int(y)).perform()
    return browser.find_element(By.ID, readout).get_attribute("data-value")


def click(browser, canvas_id: str, i: int, j: int) -> None:
    canvas = browser.find_element(By.ID, canvas_id)
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
    margin, cell = (float(canvas.get_attribute(f"data-{name}")) for name in ("margin", "cell"))
    x = margin + (j + 0.5) * cell - canvas.size["width"] / 2
    y = margin + (i + 0.5) * cell - canvas.size["height"] / 2
    ActionChains(browser).move_to_element_with_offset(canvas, int(x), int(y)).click().perform()


@pytest.mark.slow
def test_two_texts_side_by_side_and_their_difference_where_tokens_align(browser, tmp_path, coref):
    first, second = coref.trace(A), coref.trace(B)
    page = tmp_path / "two.html"
    al.view((first, second), page)
    open_page(browser, page, READY)
    assert browser.find_element(By.ID, "pair-view-title").text == "layer 1, head 0"  # coref's answering head
    q, red = first.tokens.index("他"), second.tokens.index("红")  # one length: position i aligns with i
    wA, wB = (t.layers[1].weights[0].astype(np.float32).astype(np.float64) for t in (first, second))
    assert hover(browser, "pair-a", q, 1, "pair-value") == f"{wA[q, 1]:.4f}"  # 他 → 小 (小明)
    assert hover(browser, "pair-b", q, red, "pair-value") == f"{wB[q, red]:.4f}"  # 她 → 红 (小红)
    assert wA[q, 1] > 0.9 and wB[q, red] > 0.9  # the trained head's answers, as the page shows them
    assert hover(browser, "pair-diff", q, red, "pair-value") == f"{wB[q, red] - wA[q, red]:.4f}"
    assert "他|她" in browser.find_element(By.ID, "pair-value").text
    Select(browser.find_element(By.ID, "head")).select_by_value("2")  # the page's own controls drive both
    assert browser.find_element(By.ID, "pair-view-title").text == "layer 1, head 2"
    w2 = second.layers[1].weights[2].astype(np.float32)
    assert hover(browser, "pair-b", 3, 4, "pair-value") == f"{w2[3, 4]:.4f}"


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    from checkpoints import tiny_checkpoint_with_tokenizer

    return tiny_checkpoint_with_tokenizer(tmp_path_factory.mktemp("gpt2-tokenizer"))


@pytest.mark.slow
def test_each_generated_tokens_row_is_transformers_full_forward_row(browser, tmp_path, gpt2, capsys):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    page = tmp_path / "generated.html"
    assert main(["view", "--model", str(gpt2), "--text", "The cat sat", "--generate", "5", "-o", str(page)]) == 0
    capsys.readouterr()
    record = models.load(gpt2).trace_generation("The cat sat", 5)
    eager = transformers.AutoModelForCausalLM.from_pretrained(gpt2, attn_implementation="eager").eval()
    with torch.no_grad():
        full = eager(torch.tensor([record.ids[:-1]]), output_attentions=True).attentions
    open_page(browser, page, READY)
    P = record.prompt_length
    browser.execute_script("window.attnlabView.useLayer(1); window.attnlabView.setHead(3)")
    assert browser.find_element(By.ID, "generation-view-title").text.startswith("layer 1, head 3")
    oracle = full[1][0, 3].numpy()  # (T, T): query P - 1 + n chose token P + n
    for n, j in [(0, 0), (0, P - 1), (2, P + 1), (4, P + 3)]:
        assert hover(browser, "generation", n, j, "generation-value") == f"{oracle[P - 1 + n, j]:.4f}"
    hover(browser, "generation", 0, P + 2, "generation-value")  # past the step's keys: it had none there
    assert "not yet a key" in browser.find_element(By.ID, "generation-value").text


@pytest.mark.slow
def test_rollout_and_flow_show_the_given_numbers_and_a_row_chooses_the_query(browser, tmp_path, coref):
    trace = coref.trace("小明很高兴")
    L = len(trace.tokens)
    rollout = np.full((2, L, L), 1 / L)
    rollout[1, 2, 4] = 0.25  # drawn by hand: layer 1, position 2, token 4 (高)
    page = tmp_path / "rollout.html"
    al.view(trace, page, query=2, rollout=rollout, flow=rollout / 2)
    open_page(browser, page, READY)
    cells = {
        (td.get_attribute("data-kind"), i): td.get_attribute("data-value")
        for i, row in enumerate(browser.find_elements(By.CSS_SELECTOR, "#flows-table tr")[1:])
        for td in row.find_elements(By.CSS_SELECTOR, "td[data-kind]")
    }
    assert cells["rollout", 4] == "0.2500" and cells["flow", 4] == "0.1250" and cells["rollout", 0] == f"{1 / L:.4f}"
    assert hover(browser, "rollout", 2, 4, "flows-value") == "0.2500"
    click(browser, "rollout", 5, 0)  # a row of the matrix is the page's query
    assert browser.execute_script("return window.attnlabView.query") == 5
    assert "query 5" in browser.find_element(By.ID, "flows-view-title").text
    Select(browser.find_element(By.ID, "flows-layer")).select_by_value("0")
    assert hover(browser, "rollout", 2, 4, "flows-value") == f"{1 / L:.4f}"


@pytest.mark.slow
def test_the_ablation_heatmap_shows_each_effect_and_a_cell_opens_its_head(browser, tmp_path, coref):
    trace = coref.trace("小明很高兴")
    effect = [[0.5, -0.25, None, 0.0], [0.125, -1.0, 1.0, 0.0625]]
    page = tmp_path / "ablation.html"
    al.view_ablation(trace, {"effect": effect, "metric": "logprob", "target": "明", "mode": "zero"}, page)
    open_page(browser, page, READY)
    assert hover(browser, "ablation", 1, 2, "ablation-value") == "1.0000"
    assert hover(browser, "ablation", 0, 2, "ablation-value") == ""  # not ablated: no number
    assert "Δ log p(target)" in browser.find_element(By.ID, "ablation-value").text
    click(browser, "ablation", 0, 3)
    assert browser.execute_script("return [window.attnlabView.layer, window.attnlabView.head]") == [0, 3]
    assert browser.find_element(By.ID, "head").get_attribute("value") == "3"


@pytest.mark.slow
def test_a_kl_ablation_heatmap_runs_from_white_at_0_never_from_blue(browser, tmp_path, coref):
    """KL is never negative: its scale is 0 (white) → the largest KL (red), said so; Δ log p keeps −top..top."""
    trace = coref.trace("小明很高兴")
    page = tmp_path / "kl.html"
    al.view_ablation(trace, {"effect": [[0.5, 0.0, None, 0.25], [0.125, 1.0, 0.0, 0.0625]], "metric": "KL",
                             "target": None, "mode": "zero"}, page)  # fmt: skip
    open_page(browser, page, READY)
    title = browser.find_element(By.ID, "ablation-view-title").text
    assert "colour 0 (white) → 1.00 (red), the largest KL" in title and "blue" not in title


@pytest.mark.slow
def test_a_heads_page_labels_each_head_of_the_model_view_by_its_kind(browser, tmp_path):
    """attnlab heads -o on all-MiniLM-L6-v2: each thumbnail of a head with a kind carries a
    label of that kind and its outline, the others none; the legend lists every kind scored."""
    from attnlab.analysis import head_types
    from checkpoints import minilm_dir

    page, text = tmp_path / "heads.html", "The animal didn't cross the street because it was too tired."
    assert main(["heads", "--model", str(minilm_dir()), "--text", text, "--repeat", "8", "-o", str(page)]) == 0
    open_page(browser, page, READY, timeout=120)  # a hang, not a pace
    expected = head_types(models.load(minilm_dir()), text, repeat=8, seed=0)
    dominant = expected.dominant()
    for canvas in browser.find_elements(By.CSS_SELECTOR, "#grid canvas[data-layer]"):
        layer, head = int(canvas.get_attribute("data-layer")), int(canvas.get_attribute("data-head"))
        labels = canvas.find_elements(By.XPATH, "following-sibling::div[contains(@class, 'head-type')]")
        kind = dominant[layer][head]
        assert [label.get_attribute("data-kind") for label in labels] == ([kind] if kind else []), (layer, head)
        assert ("solid" in (canvas.get_attribute("style") or "")) == bool(kind)
    legend = browser.find_elements(By.CSS_SELECTOR, "#head-types-legend .head-type")
    assert [item.text for item in legend] == expected.kinds
    assert any(kind for row in dominant for kind in row)  # the test sees at least one label
    assert browser.get_log("browser") == []
