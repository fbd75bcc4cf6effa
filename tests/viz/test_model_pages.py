"""The pages of an encoder-decoder model's trace and of a vision model's, in headless
Chromium: entries by name grouped by kind, each over its own two axes, and a ViT's
patches drawn as its tokens with a query's attention over the image."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import traces

pytest.importorskip("selenium")

from selenium.webdriver.common.by import By

import attnlab as al
from helpers import open_page

pytestmark = pytest.mark.browser


def view_and_open(browser, trace, path: Path, **opens) -> None:
    """Write trace's page with al.view, open it, wait for its image; no error in the console."""
    if trace.image is not None:
        pytest.importorskip("PIL")  # the image goes in as a PNG (the hf extra's Pillow)
    al.view(trace, path, **opens)
    open_page(browser, path, "window.attnlabView && attnlabView.imageReady", timeout=120)  # a hang, not a pace
    assert browser.get_log("browser") == []  # no error in the console


def view(browser, expression: str):
    return browser.execute_script(f"return window.attnlabView.{expression}")


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_an_encoder_decoder_page_shows_the_three_kinds_each_on_its_own_axes(browser, tmp_path):
    trace = traces.encoder_decoder()
    view_and_open(browser, trace, tmp_path / "ed.html")
    groups = browser.find_elements(By.CSS_SELECTOR, "#layer optgroup")
    assert [g.get_attribute("label") for g in groups] == ["encoder", "decoder", "cross-attention"]
    names = [[o.text for o in g.find_elements(By.TAG_NAME, "option")] for g in groups]
    assert names == [[traces.ENTRIES[i][0] for i in members] for members in ([0, 1], [2, 4], [3, 5])]
    headings = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#grid th.kind")]
    assert [h.split(":")[0] for h in headings] == [
        "encoder self-attention",
        "decoder self-attention",
        "cross-attention",
    ]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#grid canvas")) == 6 * 2
    for position, (rows, keys) in {0: (traces.SOURCE, traces.SOURCE), 2: (traces.TARGET, traces.TARGET),
                                   3: (traces.TARGET, traces.SOURCE)}.items():  # fmt: skip
        browser.execute_script("window.attnlabView.useLayer(arguments[0])", position)
        assert [t for _, t in view(browser, "axisLabels")] == rows  # the rows: the queries' tokens
        assert [t for _, t in view(browser, "keyAxisLabels")] == keys  # the columns: the keys'
        assert view(browser, "lengths") == [len(rows), len(keys)]
        one = trace[position]  # its weights recomputed by the page, against a softmax by hand
        z = one.scale * np.einsum("hie,hje->hij", one.Q, one.K)
        z[one.masked] = -np.inf
        shown = np.array(view(browser, "weights(1)")).reshape(len(rows), len(keys))
        np.testing.assert_allclose(shown, softmax(z)[1], atol=1e-12)
        margin, cell, rows_cell = (view(browser, f"geometry.{name}") for name in ("margin", "cell", "rowCell"))
        size = browser.execute_script("const c = document.getElementById('heatmap'); return [c.width, c.height]")
        assert size == [int(margin + len(keys) * cell), int(margin + len(rows) * rows_cell)]  # cross: not square
        labels = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#headview text")]
        assert labels == rows + keys  # the head view: queries on the left, keys on the right
        steps = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "#steps tr td:nth-child(2)")]
        assert steps == keys
    heading = browser.find_element(By.ID, "axes").text
    assert heading == "rows: 4 queries, decoder tokens; columns: 5 keys, encoder tokens"
    assert "4 queries (decoder) × 5 keys (encoder), 6 attention modules" in browser.find_element(By.ID, "summary").text


PATCH_PIXEL = """
const c = document.querySelectorAll('#patches canvas')[arguments[0]];
return Array.from(c.getContext('2d').getImageData(arguments[1], arguments[2], 1, 1).data);
"""
OVERLAY = "return document.getElementById('overlay').toDataURL()"


def test_a_vision_page_draws_its_patches_as_tokens_and_a_patchs_attention_over_the_image(browser, tmp_path):
    trace, image = traces.vit(), traces.picture()
    view_and_open(browser, trace, tmp_path / "vit.html", query=26)
    thumbnails = browser.find_elements(By.CSS_SELECTOR, "#patches canvas")
    assert len(thumbnails) == 49  # 7 × 7 patches
    assert [b.text for b in browser.find_elements(By.CSS_SELECTOR, "#apart button")] == ["[CLS]", "[REG]"]
    for p, (x, y) in [(0, (0, 0)), (5, (3, 12)), (24, (8, 8)), (48, (15, 15)), (10, (7, 2))]:
        row, col = divmod(p, 7)
        pixel = browser.execute_script(PATCH_PIXEL, p, x, y)
        assert pixel == [*image[row * 16 + y, col * 16 + x], 255], p  # the patch's own pixels, exactly
    assert thumbnails[24].get_attribute("class") == "selected"  # token 26 is patch 24, (3, 3)
    before = browser.execute_script(OVERLAY)
    np.testing.assert_allclose(view(browser, "overlayWeights()"), trace[0].weights[0, 26, 2:], atol=1e-12)
    colour = np.array(view(browser, "colour(1)"))  # the brightest: the patch of the largest weight
    top = int(np.argmax(trace[0].weights[0, 26, 2:]))
    centre = browser.execute_script(
        "return Array.from(document.getElementById('overlay').getContext('2d')"
        ".getImageData(arguments[0], arguments[1], 1, 1).data)",
        (top % 7) * 16 + 4,
        (top // 7) * 16 + 4,
    )  # a pixel of that patch, away from the red frame: 0.6 of the colour over 0.4 of the image
    expected = 0.6 * colour + 0.4 * image[(top // 7) * 16 + 4, (top % 7) * 16 + 4]
    np.testing.assert_allclose(centre[:3], expected, atol=2)
    thumbnails[0].click()  # patch (0, 0), token 2
    assert view(browser, "query") == 2 and thumbnails[0].get_attribute("class") == "selected"
    np.testing.assert_allclose(view(browser, "overlayWeights()"), trace[0].weights[0, 2, 2:], atol=1e-12)
    assert browser.execute_script(OVERLAY) != before
    browser.find_element(By.CSS_SELECTOR, "#apart button").click()  # [CLS]
    assert view(browser, "query") == 0
    np.testing.assert_allclose(view(browser, "overlayWeights()"), trace[0].weights[0, 0, 2:], atol=1e-12)
    browser.execute_script("window.attnlabView.setHead(1)")  # another head, another overlay
    np.testing.assert_allclose(view(browser, "overlayWeights()"), trace[0].weights[1, 0, 2:], atol=1e-12)


def test_an_image_to_text_page_shows_a_decoder_tokens_attention_over_the_encoders_patches(browser, tmp_path):
    trace = traces.image_to_text()
    view_and_open(browser, trace, tmp_path / "trocr.html")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#patches canvas")) == 49
    assert (
        view(browser, "layer") == 0 and view(browser, "overlayWeights()") is not None
    )  # the encoder: patches × patches
    browser.execute_script("window.attnlabView.useLayer(2); window.attnlabView.select(3)")  # cross, "sleeps"
    assert [t for _, t in view(browser, "axisLabels")] == traces.TARGET  # 4 rows, each labelled
    keys = view(browser, "keyAxisLabels")  # 51 keys make narrow columns: every 2nd labelled
    assert keys == [[j, traces.VIT_TOKENS[j]] for j in range(0, 51, 2)] and view(browser, "lengths") == [4, 51]
    assert view(browser, "geometry.rowCell") == 4 * view(browser, "geometry.cell")  # 48 pixels a row, 12 a column
    np.testing.assert_allclose(view(browser, "overlayWeights()"), trace[2].weights[0, 3, 2:], atol=1e-12)
    assert "inert" in browser.find_element(By.ID, "patches").get_attribute("class")  # the queries are the decoder's
    browser.execute_script("window.attnlabView.useLayer(1)")  # the decoder's self-attention: no patch among its keys
    assert view(browser, "overlayWeights()") is None
    assert "not the image's patches" in browser.find_element(By.ID, "overlay-note").text


def test_a_chat_page_draws_the_template_tokens_apart_and_says_why(browser, tmp_path):
    """In headless Chromium: the head view's labels of the template's tokens carry their own
    class (blue), the user's words none, and the note above the page says what blue means."""
    from attnlab import models
    from checkpoints import chat_model_folder

    trace = models.load(chat_model_folder(tmp_path)).trace("Hello there", layers=0, chat=True)
    page = tmp_path / "chat.html"
    al.view(trace, page)
    browser.get(page.as_uri())
    labels = browser.find_elements(By.CSS_SELECTOR, "#headview text")
    left = labels[: len(trace.tokens)]  # the queries' column
    marked = [label.get_attribute("class") == "template" for label in left]
    assert [label.text for label in left] == trace.tokens
    assert marked == [t and not s for t, s in zip(trace.template, trace.special, strict=True)]
    note = browser.find_element(By.ID, "random-note").text
    assert "chat template" in note and "blue tokens" in note
    assert browser.get_log("browser") == []
