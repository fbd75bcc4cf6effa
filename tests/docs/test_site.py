"""The built site: both languages, every public name in the API reference, nothing fetched
from the network, no folder of the machine that built it, and the tutorial's embedded coref page
showing 他 → 小明 in Chromium."""

from __future__ import annotations

import html
import json
import re
import shutil
import sys
import sysconfig
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import attnlab
from attnlab import analysis, distributed, hf, live, models, nn, runner

pytestmark = pytest.mark.slow  # the build executes the tutorial's cells: about 30 s on 2 cores

PAGES = (
    "index",
    "tutorial/self-attention",
    "tutorial/multi-head",
    "tutorial/real-models",
    "tutorial/length",
    "tutorial/notebooks",
)
ROOT = Path(__file__).resolve().parents[2]


def test_the_tutorial_is_built_in_both_languages(built_site):
    for page in PAGES:
        english = (built_site / f"{page}.html").read_text(encoding="utf-8")
        chinese = (built_site / "zh" / f"{page}.html").read_text(encoding="utf-8")
        assert '<html lang="en"' in english and '<html lang="zh"' in chinese, page
    english = (built_site / "tutorial/self-attention.html").read_text(encoding="utf-8")
    chinese = (built_site / "zh/tutorial/self-attention.html").read_text(encoding="utf-8")
    assert "Why ÷√d_k" in english and "为什么 ÷√d_k" in chinese
    # the cells ran: the demo's numbers (the seed article's first output row) and the comparison
    said = {  # each language's words for the comparison and for the output's label
        "en": ("the same as the article's program: True", "output = weights @ V:"),
        "zh": ("与文章的程序完全相同：True", "输出 = 权重 @ V："),
    }
    for text, (same, output) in ((english, said["en"]), (chinese, said["zh"])):
        shown = html.unescape(re.sub(r"<[^>]+>", "", text))  # the page's text, as a reader sees it
        assert "[ 0.0576,  0.0910, -0.0678, -0.0103,  0.0031, -0.0566]" in shown
        assert same in shown
        assert text.count("data:image/png;base64,") >= 3  # RNN, scaling and normalization figures
        # a cell's output as Python prints it: print(..., sep="\n") puts the label and the array on lines of their own
        assert "Q (4, 6):\n[[" in shown and f"{output}\n[[" in shown
    assert "往回一步" in chinese and "one step back" not in chinese  # the Chinese page's outputs are Chinese
    assert (built_site / "tutorial/coref.html").exists() and (built_site / "zh/tutorial/coref.html").exists()


def test_the_length_chapter_computes_its_small_runs_and_shows_the_recorded_one(built_site):
    """Attention at length: the live cells ran (the random layer's scores' variance, the length-scaled
    weights) and the recorded run's figure and table came from docs/experiments/length/, in both languages."""
    recorded = json.loads((ROOT / "docs/experiments/length/results.json").read_text(encoding="utf-8"))
    rows = recorded["metrics"]["last_bin"]
    for language, words in (("", ("Var(q·k/√d_k)", "Recorded ")), ("zh/", ("Var(q·k/√d_k)", "记录于："))):
        text = (built_site / f"{language}tutorial/length.html").read_text(encoding="utf-8")
        shown = html.unescape(re.sub(r"<[^>]+>", "", text))
        assert all(word in shown for word in words), language
        assert re.search(r"4096 +0\.0018 +0\.5001", shown), language  # a key δ = 2 above 4,095: plain, × s·log n
        assert text.count("data:image/png;base64,") >= 2  # the live figure and the recorded one
        assert all(f"{v['entropy']:.2f}{v['max_weight']:.4f}{v['sink_share']:.4f}" in shown for v in rows.values())


def _public_names() -> dict[str, list[str]]:
    return {
        module.__name__: list(module.__all__)
        for module in (attnlab, models, nn, distributed, hf, analysis, live, runner)
    }


def test_every_public_name_is_in_the_api_reference(built_site):
    anchors = set()
    for page in (built_site / "api").glob("*.html"):
        text = page.read_text(encoding="utf-8")
        anchors |= set(re.findall(r'id="(attnlab[\w.]*)"', text))
        assert not re.search(r":(func|class|meth):`", text), page.name  # the roles shown as code (sphinx_roles.py)
    missing = [f"{module}.{name}" for module, names in _public_names().items() for name in names
               if f"{module}.{name}" not in anchors]  # fmt: skip
    assert sum(map(len, _public_names().values())) > 60 and not missing, missing
    # a documented function shows its signature, its shapes and what it raises
    reference = (built_site / "api/attnlab.html").read_text(encoding="utf-8")
    section = reference[reference.index('id="attnlab.scaled_dot_product_attention"') :]
    section = section[: section.index('id="attnlab.scaled_dot_product_attention_backward"')]
    assert "is_causal" in section and "enable_gqa" in section and "Raises" in section and "(B…, L, E)" in section


class _Fetches(HTMLParser):
    """The addresses a browser would fetch on its own: scripts, styles, fonts, images, frames."""

    def __init__(self) -> None:
        super().__init__()
        self.addresses: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag in ("script", "img", "iframe", "source", "video", "audio", "embed") and values.get("src"):
            self.addresses.append(str(values["src"]))
        if (
            tag == "link"
            and values.get("href")
            and values.get("rel") in ("stylesheet", "preload", "icon", "preconnect")
        ):
            self.addresses.append(str(values["href"]))
        if tag == "object" and values.get("data"):
            self.addresses.append(str(values["data"]))


def test_the_site_fetches_nothing_from_the_network(built_site):
    pages = list(built_site.rglob("*.html"))
    remote = {}
    for page in pages:
        text = page.read_text(encoding="utf-8")
        parser = _Fetches()
        parser.feed(text)
        fetched = [a for a in parser.addresses if re.match(r"(https?:)?//", a)]
        fetched += re.findall(r"@import\s+url\([\"']?(https?:[^)\"']+)", text)  # styles inline
        fetched += re.findall(r"url\([\"']?(https?://[^)\"']+)", text)  # fonts or images from inline styles
        if fetched:
            remote[str(page.relative_to(built_site))] = fetched
    for sheet in built_site.rglob("*.css"):
        fetched = re.findall(r"url\([\"']?(https?://[^)\"']+)", sheet.read_text(encoding="utf-8"))
        if fetched:
            remote[str(sheet.relative_to(built_site))] = fetched
    assert len(pages) > 20 and not remote, remote


def test_no_file_of_the_site_holds_a_folder_of_the_machine_that_built_it(built_site):
    """The pages the tutorial embeds name their models (builtin:coref, MiniLM, SmolLM2's
    file), never the folders they were read from: not the checkout's, the environment's
    (its site-packages), nor the one the site was written to."""
    folders = {str(Path(__file__).resolve().parents[2]), sys.prefix, sysconfig.get_paths()["purelib"], str(built_site)}
    held = {}
    for path in built_site.rglob("*"):
        if path.suffix in (".html", ".json", ".js", ".svg", ".xml", ".txt"):
            text = path.read_text(encoding="utf-8", errors="replace")
            held.update({str(path.relative_to(built_site)): f for f in folders if f in text})
    assert not held, held
    for language in ("", "zh/"):
        minilm = (built_site / f"{language}tutorial/minilm-it.html").read_text(encoding="utf-8")
        assert '"model": "all-MiniLM-L6-v2"' in minilm, language


def _chromium() -> Any:
    """A headless Chromium (Debian's chromium and chromium-driver, as the README's test command installs them)
    at 1300 × 1000."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "the browser tests need Debian's chromium and chromium-driver (see README)"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--window-size=1300,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver), options=options)


@pytest.mark.browser
def test_the_tutorial_embeds_the_coref_page_on_he_and_xiaoming(built_site):
    pytest.importorskip("selenium")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser = _chromium()
    try:
        for language in ("", "zh/"):
            browser.get((built_site / f"{language}tutorial/self-attention.html").as_uri())
            (frame,) = browser.find_elements(By.CSS_SELECTOR, "iframe.attnlab-page")
            assert frame.get_attribute("src") == (built_site / f"{language}tutorial/coref.html").as_uri()
            browser.switch_to.frame(frame)
            WebDriverWait(browser, 120).until(  # a hang, not a pace
                lambda b: b.execute_script("return !!(window.attnlabView && attnlabView.ready)")
            )
            view = browser.execute_script(
                "const v = window.attnlabView, S = v.lengths[1]; return {layer: v.layer, head: v.head,"
                " query: v.query, labels: v.axisLabels, row: v.weights(v.head).slice(v.query * S, (v.query + 1) * S)}"
            )
            tokens = {position: label for position, label in view["labels"]}
            row = np.array(view["row"])  # the page's own weights of its query: (L,)
            assert (view["layer"], view["head"]) == (1, 0) and tokens[view["query"]] == "他"
            xiaoming = [position for position, label in tokens.items() if label in ("小", "明")]
            assert len(xiaoming) == 2
            assert row[xiaoming].sum() > 0.9  # 他 → 小明: the page opens on its answer
            assert "他" in browser.find_element(By.TAG_NAME, "body").text
            button = browser.find_element(By.ID, "export-png").text  # the page speaks its tutorial's language
            assert button == ("导出 PNG" if language else "export PNG")
            browser.switch_to.default_content()
    finally:
        browser.quit()


def test_no_code_block_scrolls_sideways_and_the_reference_is_every_commands_help(built_site):
    """The guides, the tutorial and the generated command-line reference, in both languages, at
    a laptop's width: every code block fits the text column (a long line wraps)."""
    pytest.importorskip("selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from attnlab.cli._main import build_parser

    reference = (built_site / "reference/cli.html").read_text(encoding="utf-8")
    for command in ("demo", "trace", "plot", "view", "serve", "ablate", "heads", "bench", "experiment", "ring"):
        assert f"attnlab {command}</h2>" in reference or f"attnlab {command}<a" in reference, command
    assert "--causal-alignment" in reference and "--generate" in reference and "--repeat" in reference
    assert build_parser().prog == "attnlab"
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--window-size=1280,1000"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    pages = [*PAGES, "reference/cli", *(f"guides/{p.stem}" for p in (built_site / "guides").glob("*.html"))]
    try:
        for language in ("", "zh/"):
            for page in pages:
                browser.get((built_site / f"{language}{page}.html").as_uri())
                wide = browser.execute_script(
                    "return [...document.querySelectorAll('.md-content pre > code')]"
                    ".filter((c) => c.scrollWidth > c.clientWidth + 1).length"
                )
                assert wide == 0, f"{language}{page}: {wide} code blocks scroll sideways"
    finally:
        browser.quit()


@pytest.mark.browser
def test_the_tutorial_embeds_builtin_coref_running_in_the_page_where_a_reader_types(built_site):
    """The 他 → 小明 section's second frame runs builtin:coref itself: typing 她 and 画画 moves the
    answer to 小红's 红, in both languages (numbers: attnlab's NumPy forward of the same weights)."""
    pytest.importorskip("selenium")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    coref = models.load("builtin:coref", dtype=np.float64)
    typed = "小明是个运动达人，小红是个画家，她平时很爱画画"
    trace = coref.trace(typed)
    she = trace.tokens.index("她")
    row = trace[1].weights[0, she]  # the answering head, layer 1 head 0
    drawn = "return window.attnlabInPage ? window.attnlabInPage.timing.redraws : 0"
    browser = _chromium()
    try:
        for language in ("", "zh/"):
            browser.get((built_site / f"{language}tutorial/self-attention.html").as_uri())
            (frame,) = browser.find_elements(By.CSS_SELECTOR, "iframe.attnlab-inpage")
            assert frame.get_attribute("src") == (built_site / f"{language}tutorial/coref-typed.html").as_uri()
            browser.switch_to.frame(frame)
            WebDriverWait(browser, 120).until(lambda b: b.execute_script(drawn) >= 1)  # a hang, not a pace
            browser.execute_script(f"window.attnlabInPage.type({typed!r})")
            WebDriverWait(browser, 120).until(lambda b: b.execute_script(drawn) >= 2)
            answer = browser.execute_script("return window.attnlabInPage.answer")
            assert trace.tokens[int(answer["key"])] == "红" and int(answer["key"]) == int(np.argmax(row))
            assert float(answer["weight"]) == pytest.approx(float(row.max()), abs=1e-9)
            title = browser.find_element(By.ID, "inpage-title").text  # the page speaks its tutorial's language
            assert title == ("模型就在这个页面里运行" if language else "the model runs in this page")
            browser.switch_to.default_content()
    finally:
        browser.quit()
