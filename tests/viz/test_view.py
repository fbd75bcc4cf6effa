"""attnlab view: the page in a real browser (headless Chromium driven by Selenium)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("selenium")

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

import attnlab as al
from attnlab.cli import main
from attnlab.engine.variants import Rules
from helpers import open_page

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).parents[2] / "test-artifacts"
XSS = "<img/src=x/onerror=window.__xss=1>"


def write_and_open_page(browser, tmp_path: Path, capsys, *argv: str) -> dict:
    """Write the page with the CLI, open it, and return the trace it was made from."""
    assert main(["trace", *argv, "--format", "json"]) == 0
    trace = json.loads(capsys.readouterr().out)
    page = tmp_path / "view.html"
    assert main(["view", *argv, "-o", str(page)]) == 0
    open_page(browser, page)
    return trace


def hover_cell(browser, i: int, j: int, L: int) -> str:
    """Move the mouse over cell (i, j) of the heatmap, past its label margins."""
    canvas = browser.find_element(By.ID, "heatmap")
    size = canvas.size["width"]
    margin, cell = browser.execute_script("const g = window.attnlabView.geometry; return [g.margin, g.cell]")
    x, y = margin + (j + 0.5) * cell - size / 2, margin + (i + 0.5) * cell - size / 2
    ActionChains(browser).move_to_element_with_offset(canvas, int(x), int(y)).perform()
    return browser.find_element(By.ID, "cell-value").get_attribute("data-value")


@pytest.mark.slow
def test_a_cell_shows_the_python_weight(browser, tmp_path, capsys):
    trace = write_and_open_page(
        browser, tmp_path, capsys, "--text", "小明是个运动达人，他平时很爱打篮球", "--scale", "3"
    )
    weights = np.array(trace["weights"])
    for i, j in [(0, 0), (3, 7), (16, 16), (9, 0)]:
        assert hover_cell(browser, i, j, 17) == f"{weights[i, j]:.4f}"
    assert "小" in browser.find_element(By.ID, "cell-value").text
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "view.png"))


@pytest.mark.parametrize("position", [None, -200, 0, 100, 200])
def test_b_the_scale_slider_recomputes_the_softmax(browser, tmp_path, capsys, position):
    trace = write_and_open_page(
        browser,
        tmp_path,
        capsys,
        "--text",
        "the cat sat on the mat because it was warm",
        "--embed",
        "random",
        "--d-model",
        "8",
        "--causal",
    )
    if position is None:  # the box: any scale, 0 included
        browser.execute_script(
            "const b = document.getElementById('scale-input'); b.value = '0'; b.dispatchEvent(new Event('change'));"
        )
    else:
        browser.execute_script(
            "const s = document.getElementById('scale');"
            "s.value = String(arguments[0]); s.dispatchEvent(new Event('input'));",
            position,
        )
    scale = browser.execute_script("return window.attnlabView.scale")
    assert float(browser.find_element(By.ID, "scale-value").get_attribute("data-scale")) == scale
    scaled = np.array(trace["scores"]) * scale
    scaled[np.isnan(np.array(trace["scaled_scores"], dtype=float))] = -np.inf  # None: masked by --causal
    expected = al.softmax(scaled)
    shown = np.array(browser.execute_script("return window.attnlabView.weights(0)")).reshape(expected.shape)
    np.testing.assert_allclose(shown, expected, atol=1e-12)
    np.testing.assert_allclose(shown.sum(axis=1), 1.0, atol=1e-12)
    table = [float(td.text) for td in browser.find_elements(By.CSS_SELECTOR, "#steps tr td:nth-child(6)")]
    assert table == [float(f"{w:.4f}") for w in expected[-1]]  # a causal page opens on its last query
    d_k = len(trace["Q"][0])
    expected_scale = {None: 0.0, -200: 0.01 / d_k**0.5, 0: 1 / d_k**0.5, 100: 10 / d_k**0.5, 200: 100 / d_k**0.5}
    assert scale == pytest.approx(expected_scale[position], rel=1e-12)
    if position == 0:
        assert scale == 1 / d_k**0.5  # exactly: the slider's middle stop
        assert browser.find_element(By.ID, "scale-value").text == "= 1/√d_k"
    if position is None:
        np.testing.assert_allclose(shown[-1], 1 / shown.shape[1], atol=1e-15)  # flat
    if position == 200:  # 100 × 1/√d_k: far sharper rows than at 1/√d_k
        default = np.array(trace["scores"]) / d_k**0.5
        default[np.isnan(np.array(trace["scaled_scores"], dtype=float))] = -np.inf
        assert shown.max(axis=1).mean() > al.softmax(default).max(axis=1).mean() + 0.3


@pytest.mark.slow
def test_c_the_head_selector_switches_heads(browser, tmp_path, capsys):
    trace = write_and_open_page(
        browser,
        tmp_path,
        capsys,
        "--text",
        "a b c d e f",
        "--embed",
        "random",
        "--d-model",
        "8",
        "--num-heads",
        "4",
        "--scale",
        "2",
    )
    weights = np.array(trace["weights"])  # (4, 6, 6)
    assert len(Select(browser.find_element(By.ID, "head")).options) == 4
    for head in (0, 2, 3):
        Select(browser.find_element(By.ID, "head")).select_by_value(str(head))
        assert browser.execute_script("return window.attnlabView.head") == head
        assert hover_cell(browser, 2, 4, 6) == f"{weights[head, 2, 4]:.4f}"
        assert f"head {head}" in browser.find_element(By.ID, "steps-token").text
    assert not np.allclose(weights[0], weights[3])


def test_d_tokens_are_text_and_no_script_runs(browser, tmp_path, capsys):
    tokens = f"a {XSS} </script><script>window.__xss=2</script> b"
    sequence = tmp_path / "x.json"
    sequence.write_text(json.dumps([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, 0.0]]))
    write_and_open_page(browser, tmp_path, capsys, str(sequence), "--tokens", tokens)
    assert browser.execute_script("return window.__xss") is None
    assert browser.find_elements(By.CSS_SELECTOR, "img") == []
    labels = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#steps td.token")]
    assert labels == tokens.split()


@pytest.mark.slow
def test_e_a_512_token_page_loads_and_draws_its_cells_without_a_node_each(browser, tmp_path):
    rng = np.random.default_rng(0)
    sequence = tmp_path / "long.npy"
    np.save(sequence, rng.standard_normal((512, 16)))
    page = tmp_path / "long.html"
    assert main(["view", str(sequence), "--d-k", "16", "-o", str(page)]) == 0
    browser.get(page.as_uri())
    assert browser.execute_script("return window.attnlabView.ready") is True
    # what keeps it quick, asserted instead of a time that a busy machine would break: 512² cells
    # drawn, not a DOM node each
    nodes = browser.execute_script("return document.querySelectorAll('*').length")
    print(f"512-token page: {nodes} DOM nodes")
    assert nodes < 512 * 512 // 10, nodes
    assert hover_cell(browser, 300, 100, 512) is not None
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "view-512.png"))


def test_export_png_and_svg(browser, tmp_path, capsys):
    write_and_open_page(browser, tmp_path, capsys, "--text", "a b c")
    png = browser.execute_script("return window.attnlabView.exportPNG()")
    svg = browser.execute_script("return window.attnlabView.exportSVG()")
    assert png.startswith("data:image/png;base64,") and len(png) > 100
    assert svg.startswith("<svg") and svg.count("<rect") - svg.count('class="bar"') == 9
    for token in "abc":
        assert f">{token}</text>" in svg  # the labels travel with the picture
    assert svg.count('class="bar"') == 50 and ">1.00</text>" in svg and "attention weights, head 0" in svg


def test_a_link_opens_a_query_head_and_scale(browser, tmp_path, capsys):
    trace = write_and_open_page(
        browser, tmp_path, capsys, "--text", "a b c d", "--embed", "random", "--d-model", "4", "--num-heads", "2"
    )
    browser.get((tmp_path / "view.html").as_uri() + "#query=3&head=1&scale=0.25")
    assert browser.execute_script("return [window.attnlabView.head, window.attnlabView.scale]") == [1, 0.25]
    assert browser.find_element(By.ID, "steps-token").text.startswith("3 (d), head 1")
    scaled = np.array(trace["scores"])[1] * 0.25
    shown = np.array(browser.execute_script("return window.attnlabView.weights(1)")).reshape(4, 4)
    np.testing.assert_allclose(shown, al.softmax(scaled), atol=1e-12)


def test_f_scores_that_overflow_are_shown_as_not_numbers(browser, tmp_path, capsys):
    rows = tmp_path / "overflow.json"
    rows.write_text("[[1e200, 1e200], [1e200, -1e200]]")  # finite input, scores beyond float range
    trace = write_and_open_page(browser, tmp_path, capsys, str(rows))
    assert trace["weights"] == [["NaN", "NaN"], ["NaN", "NaN"]]  # the engine's NaN, as valid JSON
    assert hover_cell(browser, 0, 1, 2) == "NaN"
    assert "4 weights that are not numbers" in browser.find_element(By.ID, "legend").text
    canvas_red = browser.execute_script(
        "const c = document.getElementById('heatmap'), m = window.attnlabView.geometry.margin + 1;"
        "return Array.from(c.getContext('2d').getImageData(m, m, 1, 1).data)"
    )
    assert canvas_red[:3] == [220, 30, 30]


def test_g_axis_labels_colour_scale_and_readout(browser, tmp_path, capsys):
    """Labels on both axes; the colour is the weight itself (uniform attention is dark,
    not the top colour); the readout follows the slider and the head."""
    sequence = tmp_path / "same.json"
    sequence.write_text(json.dumps([[1.0, 2.0, 0.5, 1.0]] * 6))  # equal rows: every weight is 1/6
    write_and_open_page(browser, tmp_path, capsys, str(sequence), "--tokens", "a b 小 c d e", "--num-heads", "2")
    labels = browser.execute_script("return window.attnlabView.axisLabels")
    assert labels == [[i, t] for i, t in enumerate(["a", "b", "小", "c", "d", "e"])]
    assert hover_cell(browser, 2, 3, 6) == f"{1 / 6:.4f}"
    margin, cell = browser.execute_script("const g = window.attnlabView.geometry; return [g.margin, g.cell]")
    pixel = browser.execute_script(
        "return Array.from(document.getElementById('heatmap').getContext('2d')"
        ".getImageData(arguments[0], arguments[0], 1, 1).data).slice(0, 3)",
        margin + cell // 2,
    )
    assert pixel == browser.execute_script("return window.attnlabView.colour(1 / 6)")
    assert pixel != browser.execute_script("return window.attnlabView.colour(1)")
    readout = browser.find_element(By.ID, "cell-value").text
    browser.execute_script("window.attnlabView.setScale(0.1)")
    moved = browser.find_element(By.ID, "cell-value").text
    assert moved != readout and moved.startswith("head 0, scale 0.1000")
    Select(browser.find_element(By.ID, "head")).select_by_value("1")
    assert browser.find_element(By.ID, "cell-value").text.startswith("head 1, scale 0.1000")


def long_page(tmp_path: Path, rows: int) -> Path:
    """The page of a random sequence of ``rows`` tokens of width 8, as `attnlab view` writes it."""
    sequence = tmp_path / "long.npy"
    np.save(sequence, np.random.default_rng(1).standard_normal((rows, 8)))
    page = tmp_path / "long.html"
    assert main(["view", str(sequence), "-o", str(page)]) == 0
    return page


def test_h_a_link_scrolls_the_head_view_to_its_query(browser, tmp_path):
    browser.get(long_page(tmp_path, 200).as_uri() + "#query=150")
    assert browser.execute_script("return window.attnlabView.ready") is True
    visible = browser.execute_script(
        "const box = document.getElementById('headview-box').getBoundingClientRect();"
        "const t = document.querySelectorAll('#headview text')[150].getBoundingClientRect();"
        "return t.top >= box.top && t.bottom <= box.bottom && t.top >= 0 && t.bottom <= window.innerHeight;"
    )
    assert visible
    labels = browser.execute_script("return window.attnlabView.axisLabels")
    assert labels[1][0] - labels[0][0] > 1 and labels[0] == [0, "0"]  # 200 labels thinned to stay readable


def test_i_the_notebook_iframe_runs_the_page(browser, tmp_path):
    from attnlab.viz._page import notebook_html

    host = tmp_path / "notebook.html"
    host.write_text(
        "<!DOCTYPE html><html><body>" + notebook_html(al.SelfAttention(3, 2).trace(np.eye(3))) + "</body></html>"
    )
    browser.get(host.as_uri())
    browser.switch_to.frame(browser.find_element(By.TAG_NAME, "iframe"))
    try:
        assert browser.execute_script("return window.attnlabView && window.attnlabView.ready") is True
        assert browser.execute_script("return window.attnlabView.axisLabels.length") == 3
    finally:
        browser.switch_to.default_content()


def test_j_the_scale_box_keeps_the_scale_on_bad_input(browser, tmp_path, capsys):
    write_and_open_page(browser, tmp_path, capsys, "--text", "a b c")
    browser.execute_script("window.attnlabView.setScale(0.5)")
    for text in ("", "abc", "-1"):
        browser.execute_script(
            "const b = document.getElementById('scale-input'); b.value = arguments[0];"
            "b.dispatchEvent(new Event('change'));",
            text,
        )
        assert browser.execute_script("return window.attnlabView.scale") == 0.5
    browser.get((tmp_path / "view.html").as_uri() + "#scale=")
    assert browser.execute_script("return window.attnlabView.scale") > 0


def test_k_control_characters_make_valid_svg(browser, tmp_path, capsys):
    sequence = tmp_path / "x.json"
    sequence.write_text(json.dumps([[1.0, 0.0], [0.0, 1.0]]))
    assert main(["trace", str(sequence), "--format", "json"]) == 0
    saved = json.loads(capsys.readouterr().out)
    saved["tokens"] = ["a\x01b", "<&>"]
    (tmp_path / "t.json").write_text(json.dumps(saved))
    assert main(["view", str(tmp_path / "t.json"), "-o", str(tmp_path / "t.html")]) == 0
    browser.get((tmp_path / "t.html").as_uri())
    svg = browser.execute_script("return window.attnlabView.exportSVG()")
    ET.fromstring(svg)  # parses: no control character, everything escaped


def test_g_a_models_page_switches_layers_by_selector_and_link(browser, tmp_path, capsys):
    from checkpoints import SENTENCE, tiny_checkpoint_with_tokenizer

    checkpoint = str(tiny_checkpoint_with_tokenizer(tmp_path))
    assert main(["trace", "--model", checkpoint, "--text", SENTENCE, "--layer", "all", "--format", "json"]) == 0
    trace = json.loads(capsys.readouterr().out)
    page = tmp_path / "model.html"
    assert main(["view", "--model", checkpoint, "--text", SENTENCE, "-o", str(page)]) == 0  # all layers by default
    browser.get(page.as_uri() + "#layer=1&head=2&query=5")
    view = "return window.attnlabView"
    assert browser.execute_script(f"{view}.ready") is True
    assert browser.execute_script(f"{view}.layer") == 1 and browser.execute_script(f"{view}.head") == 2
    layer = Select(browser.find_element(By.ID, "layer"))
    assert [o.text for o in layer.options] == ["layer 0", "layer 1"]
    L = len(trace["tokens"])
    shown = np.array(browser.execute_script(f"{view}.weights(2)")).reshape(L, L)
    np.testing.assert_allclose(shown, trace["layers"]["1"]["weights"][2], atol=5e-5)
    layer.select_by_visible_text("layer 0")
    assert browser.execute_script(f"{view}.layer") == 0
    shown = np.array(browser.execute_script(f"{view}.weights(3)")).reshape(L, L)
    np.testing.assert_allclose(shown, trace["layers"]["0"]["weights"][3], atol=5e-5)
    assert "2 layers, 4 heads" in browser.find_element(By.ID, "summary").text
    assert "小" in browser.find_element(By.ID, "headview").text  # tokens as text, not bytes


def model_page(browser, tmp_path: Path, trace, link: str = "", name: str = "model.html") -> None:
    page = tmp_path / name
    al.view(trace, page)
    browser.get(page.as_uri() + link)
    assert browser.execute_script("return window.attnlabView.ready") is True


def test_h_the_model_view_has_a_cell_per_layer_and_head_that_opens_it(browser, tmp_path):
    from attnlab import models
    from checkpoints import SENTENCE, tiny_checkpoint_with_tokenizer

    trace = models.load(tiny_checkpoint_with_tokenizer(tmp_path)).trace(SENTENCE)
    model_page(browser, tmp_path, trace)
    cells = browser.find_elements(By.CSS_SELECTOR, "#grid canvas")
    assert len(cells) == 2 * 4
    (cell,) = [c for c in cells if c.get_attribute("data-layer") == "1" and c.get_attribute("data-head") == "3"]
    cell.click()
    view = "return window.attnlabView"
    assert browser.execute_script(f"{view}.layer") == 1 and browser.execute_script(f"{view}.head") == 3
    L = len(trace.tokens)
    shown = np.array(browser.execute_script(f"{view}.weights(3)")).reshape(L, L)
    np.testing.assert_allclose(shown, trace[1].weights[3], atol=5e-5)  # to 4 decimals
    assert "current" in cell.get_attribute("class")
    # the page's tokens are the sentence's characters in order, nothing else; split pieces are marked
    left = browser.execute_script(
        "return [...document.querySelectorAll('#headview text')].slice(0, arguments[0])"
        ".map((t) => [...t.childNodes].filter((n) => n.nodeType === 3).map((n) => n.nodeValue).join(''))",
        L,
    )
    assert "".join(left) == SENTENCE
    assert browser.find_elements(By.CSS_SELECTOR, "#headview line.part-mark")
    assert browser.find_elements(By.CSS_SELECTOR, "#headview text.part")


def test_i_the_five_steps_of_a_llama_use_the_rotated_q_and_k(browser, tmp_path):
    from attnlab import models
    from checkpoints import tiny_model

    tiny_model("llama").save_pretrained(tmp_path / "llama")
    trace = models.load(tmp_path / "llama").trace(np.array([5, 17, 33, 2, 99, 120, 7, 250, 64]))
    model_page(browser, tmp_path, trace, "#layer=1&head=3&query=6")
    cells = browser.find_elements(By.CSS_SELECTOR, "#steps tr")[1 + 2].find_elements(By.TAG_NAME, "td")  # key 2
    layer = trace[1]
    dot = float(layer.Q[3, 6] @ layer.K[3, 2])  # the rotated q and k the trace holds
    assert float(cells[3].text) == pytest.approx(dot, abs=5e-5)
    shown_q = browser.find_element(By.ID, "query-vector").text
    assert shown_q == "q = [" + ", ".join(f"{x:.3f}" for x in layer.Q[3, 6]) + "]"


def test_j_model_tokens_with_markup_stay_text(browser, tmp_path):
    from attnlab import models
    from checkpoints import tiny_checkpoint_with_tokenizer

    text = "<b>x</b> & <img src=x onerror=alert(1)>"
    trace = models.load(tiny_checkpoint_with_tokenizer(tmp_path)).trace(text)
    model_page(browser, tmp_path, trace)
    assert not browser.find_elements(By.CSS_SELECTOR, "#headview b, #headview img, #steps img, img")
    left = browser.execute_script(
        "return [...document.querySelectorAll('#headview text')].slice(0, arguments[0])"
        ".map((t) => [...t.childNodes].filter((n) => n.nodeType === 3).map((n) => n.nodeValue).join(''))",
        len(trace.tokens),
    )
    assert "".join(left) == text


@pytest.mark.slow
def test_k_a_gpt2_small_page_of_128_tokens_is_small_and_draws_a_canvas_per_head(browser, tmp_path, capsys):
    import time

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    from checkpoints import SENTENCE, train_tokenizers

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=512, n_positions=256, n_embd=768, n_layer=12, n_head=12)
    checkpoint = tmp_path / "gpt2-small"
    transformers.GPT2LMHeadModel(config).save_pretrained(checkpoint)
    layouts = train_tokenizers(tmp_path / "tokenizer")
    for name in ("vocab.json", "merges.txt"):
        (checkpoint / name).write_bytes((layouts["vocab+merges"] / name).read_bytes())
    page = tmp_path / "small.html"
    text = SENTENCE * 4
    assert main(["view", "--model", str(checkpoint), "--text", text, "-o", str(page)]) == 0, capsys.readouterr().err
    size = page.stat().st_size
    start = time.perf_counter()
    browser.get(page.as_uri())
    assert browser.execute_script("return window.attnlabView.ready") is True
    seconds = time.perf_counter() - start
    print(f"GPT-2-small-shaped page, 12 layers × 12 heads, 128 tokens: {size / 1e6:.1f} MB, ready in {seconds:.2f} s")
    assert browser.execute_script("return document.querySelectorAll('#headview text').length") == 2 * 128
    assert size <= 16 * 10**6  # its time is printed, not asserted: a busy machine would fail it
    assert len(browser.find_elements(By.CSS_SELECTOR, "#grid canvas")) == 144  # (tests/viz/test_long_pages.py: longer)
    browser.execute_script("window.scrollTo(0, document.body.scrollHeight)")  # far from the head's view
    browser.execute_script("location.hash = '#layer=11&head=8'")  # a link to a head scrolls to it
    WebDriverWait(browser, 120).until(lambda b: b.execute_script("return window.attnlabView.head") == 8)  # a hang
    top = browser.execute_script("return document.getElementById('head-panel').getBoundingClientRect().top")
    assert -1 <= top < browser.execute_script("return window.innerHeight"), top  # at the top, to a pixel
    # the page names the model's architecture (GPT-2: a key/value head per query head, so none shared)
    summary = browser.find_element(By.ID, "summary").text
    assert "gpt2-small (gpt2): 128 tokens" in summary and "sharing" not in summary, summary


def test_l_a_layer_opens_at_its_own_scale_and_links_name_model_layers(browser, tmp_path):
    from attnlab import models
    from checkpoints import tiny_model

    tiny_model("gpt2", scale_attn_by_inverse_layer_idx=True).save_pretrained(tmp_path / "gpt2")
    model = models.load(tmp_path / "gpt2")
    trace = model.trace(np.arange(12), layers=[1])  # layer 1 alone: scale 1/(√8·2)
    model_page(browser, tmp_path, trace, "#layer=1&head=2")
    view = "return window.attnlabView"
    assert browser.execute_script(f"{view}.head") == 2
    assert browser.execute_script(f"{view}.scale") == pytest.approx(trace[1].scale)
    shown = np.array(browser.execute_script(f"{view}.weights(2)")).reshape(12, 12)
    np.testing.assert_allclose(shown, trace[1].weights[2], atol=5e-5)
    both = model.trace(np.arange(12), layers=[0, 1])
    model_page(browser, tmp_path, both, "#layer=0", "both.html")
    browser.execute_script("window.attnlabView.useLayer(1)")  # from layer 0's scale to layer 1's
    assert browser.execute_script(f"{view}.scale") == pytest.approx(both[1].scale)
    shown = np.array(browser.execute_script(f"{view}.weights(3)")).reshape(12, 12)
    np.testing.assert_allclose(shown, both[1].weights[3], atol=5e-5)


def test_m_float32_scores_the_page_computes_overflow_as_in_python(browser, tmp_path):
    x = np.full((520, 4), 3e20)
    x[::2] *= -1
    trace = al.SelfAttention(4, 4, dtype=np.float32).trace(x)
    bad = int((~np.isfinite(trace.weights)).sum())
    assert bad > 0
    page = tmp_path / "overflow.html"
    al.view(trace, page)
    browser.get(page.as_uri())
    assert browser.execute_script("return window.attnlabView.ready") is True
    assert f"red: {bad} weights that are not numbers" in browser.find_element(By.ID, "legend").text


COREF_SENTENCE = "小明是个运动达人，小红是个画家，他平时很爱打篮球"  # the README's: two people, one pronoun


def test_n_the_coref_page_opens_on_its_answering_head_at_the_pronoun(browser, tmp_path):
    pytest.importorskip("tokenizers")
    page = tmp_path / "coref.html"
    assert main(["view", "--model", "builtin:coref", "--text", COREF_SENTENCE, "-o", str(page)]) == 0
    browser.get(page.as_uri())
    view = "return window.attnlabView"
    assert browser.execute_script(f"{view}.ready") is True
    # config.json's attnlab.answer_head: layer 1, head 0; the query is 他, token 17 after [CLS]
    assert browser.execute_script(f"{view}.layer") == 1 and browser.execute_script(f"{view}.head") == 0
    assert Select(browser.find_element(By.ID, "layer")).first_selected_option.text == "layer 1"
    assert Select(browser.find_element(By.ID, "head")).first_selected_option.text == "head 0"
    assert browser.find_element(By.ID, "steps-token").text.startswith("17")
    assert "他" in browser.find_element(By.ID, "steps-token").text
    selected = browser.find_elements(By.CSS_SELECTOR, "#headview text.selected")
    assert [t.text for t in selected] == ["他"]
    weights = np.array(browser.execute_script(f"{view}.weights(0)")).reshape(26, 26)
    assert weights[17].argmax() == 1  # 他 → 小 of 小明 (token 1), not 小 of 小红 (token 10)
    browser.get(page.as_uri() + "#layer=0&head=2&query=3")  # a link still wins
    assert browser.execute_script(f"{view}.ready") is True
    assert [browser.execute_script(f"{view}.{x}") for x in ("layer", "head")] == [0, 2]
    assert browser.find_element(By.ID, "steps-token").text.startswith("3")


def test_o_view_opens_on_the_layer_head_and_query_it_is_given(browser, tmp_path):
    trace = al.MultiheadAttention(8, 4, seed=1, dtype=np.float64).trace(
        np.random.default_rng(0).standard_normal((6, 8))
    )
    page = tmp_path / "given.html"
    al.view(trace, page, head=3, query=4)
    browser.get(page.as_uri())
    assert browser.execute_script("return window.attnlabView.head") == 3
    assert browser.find_element(By.ID, "steps-token").text.startswith("4")


def test_p_a_single_layer_page_shows_no_layer_selector_and_says_its_weights_are_random(browser, tmp_path, capsys):
    write_and_open_page(browser, tmp_path, capsys, "--text", "小明 是 个 运动 达人")
    assert not browser.find_element(By.ID, "layer-label").is_displayed()
    assert browser.find_element(By.ID, "layer-label").size["width"] == 0
    note = browser.find_element(By.ID, "random-note")
    assert note.is_displayed() and "random weights (seed 42)" in note.text and "not trained" in note.text


def test_q_a_trained_models_page_has_no_random_weights_note(browser, tmp_path):
    pytest.importorskip("tokenizers")
    page = tmp_path / "coref.html"
    text = "小明是个运动达人，他平时很爱打篮球"  # one person: still a trained model, two layers
    assert main(["view", "--model", "builtin:coref", "--text", text, "-o", str(page)]) == 0
    browser.get(page.as_uri())
    assert browser.execute_script("return window.attnlabView.ready") is True
    assert not browser.find_element(By.ID, "random-note").is_displayed()
    assert browser.find_element(By.ID, "layer-label").is_displayed()  # two layers: the selector shows


def test_r_the_controls_stay_in_view_after_a_link_scrolls_a_long_page(browser, tmp_path):
    browser.get(long_page(tmp_path, 600).as_uri() + "#query=550")
    assert browser.execute_script("return window.attnlabView.ready") is True
    assert browser.execute_script("return window.scrollY") == 0  # only the head view's box scrolled
    for control in ("head", "scale", "scale-input"):
        box = browser.find_element(By.ID, control).rect
        assert box["y"] >= 0 and box["y"] + box["height"] <= browser.execute_script("return window.innerHeight")
    visible = browser.execute_script(
        "const box = document.getElementById('headview-box').getBoundingClientRect();"
        "const t = document.querySelectorAll('#headview text')[550].getBoundingClientRect();"
        "return t.top >= box.top && t.bottom <= box.bottom;"
    )
    assert visible


@pytest.mark.parametrize(("length", "every"), [(600, "13th"), (200, "5th"), (20, None)])
def test_s_thinned_axis_labels_say_how_they_were_thinned(browser, tmp_path, length, every):
    sequence = tmp_path / "seq.npy"
    np.save(sequence, np.random.default_rng(2).standard_normal((length, 8)))
    page = tmp_path / "seq.html"
    assert main(["view", str(sequence), "-o", str(page)]) == 0
    browser.get(page.as_uri())
    assert browser.execute_script("return window.attnlabView.ready") is True
    note = browser.find_element(By.ID, "axis-note").text
    labels = browser.execute_script("return window.attnlabView.axisLabels")
    # by hand: a cell is floor(640 / L) pixels (at least 1) and every ceil(13 / cell)-th token is labelled:
    # 600 tokens, 1 px, every 13th; 200 tokens, 3 px, every 5th; 20 tokens, 32 px, all
    if every is None:
        assert note == "" and len(labels) == length
    else:
        n = int(every[:-2])
        assert f"every {every} token labelled" in note and f"of {length}" in note
        assert [i for i, _ in labels] == list(range(0, length, n))


def test_t_full_width_punctuation_is_drawn_in_a_cjk_font_in_the_head_view(browser, tmp_path, capsys):
    write_and_open_page(browser, tmp_path, capsys, "--text", "小明是个运动达人，他平时很爱打篮球")
    commas = [t for t in browser.find_elements(By.CSS_SELECTOR, "#headview text") if t.text == "，"]
    assert len(commas) == 2  # one a side
    for comma in commas:
        assert "wide" in comma.get_attribute("class").split()
        family = browser.execute_script("return getComputedStyle(arguments[0]).fontFamily", comma)
        assert family.startswith('"Noto Sans CJK SC"')
        assert comma.size["width"] >= 8  # a glyph as wide as a character's cell's half, not a speck


def pixel_at(browser, i: int, j: int, dx: int = 2, dy: int = 2) -> list[int]:
    """The heatmap's colour near the top left corner of cell (i, j), clear of a masked cell's stroke."""
    return browser.execute_script(
        "const g = window.attnlabView.geometry, c = document.getElementById('heatmap');"
        "return Array.from(c.getContext('2d').getImageData(g.margin + arguments[1] * g.cell + arguments[2],"
        " g.margin + arguments[0] * g.cell + arguments[3], 1, 1).data).slice(0, 3)",
        i, j, dx, dy,
    )  # fmt: skip


@pytest.mark.slow
def test_u_a_windowed_page_shows_its_band_masked_and_says_its_rules(browser, tmp_path, capsys):
    argv = ["--text", "a b c d e f", "--embed", "random", "--d-model", "8", "--window", "2,0", "--softcap", "0.5"]
    trace = write_and_open_page(browser, tmp_path, capsys, *argv)
    note = browser.find_element(By.ID, "rules-note")
    assert note.is_displayed() and "sliding window (2, 0): query i sees keys i − 2 … i" in note.text
    assert "softcap 0.5" in note.text and "Grey, struck-through cells are masked keys" in note.text
    legend = browser.find_element(By.ID, "mask-legend")
    # by hand: query i sees min(i, 2) + 1 keys, 15 of the 36 cells; the other 21 are masked
    assert legend.is_displayed() and "masked (21 cells)" in legend.text and "weight is exactly 0" in legend.text
    weights = np.array(trace["weights"], dtype=float)
    shown = np.array(browser.execute_script("return window.attnlabView.weights(0)")).reshape(6, 6)
    np.testing.assert_allclose(shown, weights, atol=1e-12)
    assert browser.execute_script("return window.attnlabView.colour(0)") != [224, 224, 224]
    for i, j in ((0, 5), (5, 0), (5, 2), (1, 2)):  # outside the band: grey, not the colour of weight 0
        assert pixel_at(browser, i, j) == [224, 224, 224]
    for i, j in ((0, 0), (5, 3), (3, 1)):
        assert pixel_at(browser, i, j) == browser.execute_script(f"return window.attnlabView.colour({weights[i, j]})")
    assert hover_cell(browser, 0, 4, 6) == "0.0000" and "(masked" in browser.find_element(By.ID, "cell-value").text
    browser.execute_script("window.attnlabView.select(4)")
    rows = browser.find_elements(By.CSS_SELECTOR, "#steps tr")
    assert [th.text for th in rows[0].find_elements(By.TAG_NAME, "th")][4] == "② z_j"
    column = [tr.find_elements(By.TAG_NAME, "td")[4].text for tr in rows[1:]]
    scaled = trace["scaled_scores"][4]
    assert column == [("masked" if z is None else f"{z:.4f}") for z in scaled]
    assert "② here z_j = 0.5·tanh(scale·q·k_j / 0.5)" in browser.find_element(By.ID, "steps-rules").text
    browser.execute_script("window.attnlabView.setScale(2)")  # the slider keeps the softcap and the band
    z = 0.5 * np.tanh(2 * np.array(trace["scores"]) / 0.5)
    z[np.array([[x is None for x in row] for row in trace["scaled_scores"]])] = -np.inf
    shown = np.array(browser.execute_script("return window.attnlabView.weights(0)")).reshape(6, 6)
    np.testing.assert_allclose(shown, al.softmax(z), atol=1e-12)
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "view-window.png"))
    write_and_open_page(browser, tmp_path, capsys, "--text", "a b c")  # a plain page: neither note
    assert not browser.find_element(By.ID, "rules-note").is_displayed()
    assert not browser.find_element(By.ID, "mask-legend").is_displayed()


def test_v_alibi_sinks_and_a_per_head_mask_function_give_the_engines_weights(browser, tmp_path):
    x = np.random.default_rng(8).standard_normal((7, 8))
    rules = Rules(alibi_slopes=[0.5, 0.125], sinks=[0.5, -1.0], is_causal=True,
                  mask_mod=lambda b, h, i, j: (h == 0) | (j != 0))  # fmt: skip
    trace = al.MultiheadAttention(8, 2, seed=2, dtype=np.float64).trace(x, rules=rules)
    page = tmp_path / "alibi.html"
    al.view(trace, page, head=0)  # (a causal page would open on its strongest previous-token head)
    browser.get(page.as_uri())
    assert browser.execute_script("return window.attnlabView.ready") is True
    for h in (0, 1):
        shown = np.array(browser.execute_script(f"return window.attnlabView.weights({h})")).reshape(7, 7)
        np.testing.assert_allclose(shown, trace.weights[h], atol=1e-12)
        assert (shown.sum(axis=1) < 1).all()  # the sink takes its share
    assert pixel_at(browser, 3, 0) != [224, 224, 224]  # head 0 may attend key 0
    browser.execute_script("window.attnlabView.setHead(1)")
    assert pixel_at(browser, 3, 0) == [224, 224, 224]  # head 1's mask function rules key 0 out
    assert "ALiBi" in browser.find_element(By.ID, "rules-note").text


def test_w_a_scale_at_which_the_scores_overflow_is_refused_by_the_link_and_the_box(browser, tmp_path, capsys):
    rows = tmp_path / "big.json"
    rows.write_text(json.dumps((np.eye(3) * 100).tolist()))  # raw scores of about 100: 1e308 · 100 overflows
    trace = write_and_open_page(browser, tmp_path, capsys, str(rows))
    largest = np.abs(np.array(trace["scores"])).max()
    with np.errstate(over="ignore"):
        assert largest * 1e308 == np.inf  # the engine at scale 1e308 gives NaN weights: nothing to show
    near_the_limit = f"#scale={1.7e308 / largest:.6e}".replace("e+", "e")  # in a link "+" is a space
    for link in ("#scale=1e308", "#scale=0.5", near_the_limit):
        browser.get((tmp_path / "view.html").as_uri() + "#scale=0.25")
        browser.get((tmp_path / "view.html").as_uri() + link)
        wanted = float(link.removeprefix("#scale="))
        scale = browser.execute_script("return window.attnlabView.scale")
        assert scale == (0.25 if link == "#scale=1e308" else wanted)  # refused: the one in use is kept
        shown = np.array(browser.execute_script("return window.attnlabView.weights(0)"))
        assert np.isfinite(shown).all()
        np.testing.assert_allclose(shown.reshape(3, 3), al.softmax(np.array(trace["scores"]) * scale), atol=1e-12)
    browser.execute_script(
        "const b = document.getElementById('scale-input'); b.value = '1e308'; b.dispatchEvent(new Event('change'));"
    )
    assert browser.execute_script("return window.attnlabView.scale") == pytest.approx(1.7e308 / largest, rel=1e-6)


def test_x_a_chinese_page_speaks_chinese_and_shows_the_same_weights(browser, tmp_path):
    X = np.random.default_rng(2).standard_normal((5, 8))
    trace = al.MultiheadAttention(8, 2, seed=0, dtype=np.float64).trace(X, tokens=list("小明爱打球"), is_causal=True)
    shown = {}
    for lang in ("en", "zh"):
        al.view(trace, tmp_path / f"{lang}.html", query=3, lang=lang)
        open_page(browser, tmp_path / f"{lang}.html")
        text = {name: browser.find_element(By.ID, name).text for name in ("export-png", "rules-note")}
        text["h2"] = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "h2") if h.is_displayed()]
        text["head"] = Select(browser.find_element(By.ID, "head")).first_selected_option.text
        text["lang"] = browser.execute_script("return document.documentElement.lang")
        text["columns"] = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#steps th")]
        shown[lang] = (np.array(browser.execute_script("return window.attnlabView.weights(0)")), text)
    (english, en), (chinese, zh) = shown["en"], shown["zh"]
    np.testing.assert_array_equal(chinese, english)  # the same numbers, in other words
    assert (en["export-png"], en["head"], en["lang"]) == ("export PNG", "head 0", "en")
    assert (zh["export-png"], zh["head"], zh["lang"]) == ("导出 PNG", "头 0", "zh-CN")
    assert en["h2"][0].startswith("attention weights (rows: queries, columns: keys)")
    assert zh["h2"][0] == "注意力权重 (行：查询，列：键)" and zh["h2"][1].startswith("头视图：")
    assert zh["h2"][-1] == "逐步计算：查询 3（打），头 0" and en["h2"][-1] == "step by step for query 3 (打), head 0"
    assert zh["rules-note"].startswith("注意力规则：因果：查询 i 只看键 j ≤ i。") and "causal" in en["rules-note"]
    assert zh["columns"][:2] == ["j", "词元"] and en["columns"][:2] == ["j", "token"]
