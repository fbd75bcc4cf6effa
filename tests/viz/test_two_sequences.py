"""The page's data and the plots of traces over two sequences (cross-attention, an
encoder-decoder model's) and of a vision model's image, without a browser
(tests/viz/test_model_pages.py opens the pages in one)."""

from __future__ import annotations

import base64
import io
import sys

import numpy as np
import pytest

import attnlab as al
import traces
from attnlab.trace import build_trace
from attnlab.viz._page import PageShape, check_page_size, opening, page_data


def decoded(text: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), "<f8").reshape(shape)


def test_an_encoder_decoder_page_carries_both_sequences_and_each_entrys_axes():
    trace = traces.encoder_decoder()
    data = page_data(trace)
    assert [s["name"] for s in data["sequences"]] == ["decoder", "encoder"]
    assert data["sequences"][0]["tokens"] == traces.TARGET and data["sequences"][1]["tokens"] == traces.SOURCE
    assert data["sequences"][1]["special"] == [False] * 4 + [True]
    kinds = [(layer["name"], layer["kind"], layer["rows"], layer["cols"]) for layer in data["layers"]]
    assert kinds == [
        ("model.encoder.layers.0.self_attn", "encoder", 1, 1), ("model.encoder.layers.1.self_attn", "encoder", 1, 1),
        ("model.decoder.layers.0.self_attn", "decoder", 0, 0), ("model.decoder.layers.0.encoder_attn", "cross", 0, 1),
        ("model.decoder.layers.1.self_attn", "decoder", 0, 0), ("model.decoder.layers.1.encoder_attn", "cross", 0, 1),
    ]  # fmt: skip
    cross = data["layers"][3]
    np.testing.assert_array_equal(decoded(cross["q"], (2, 4, 4)), trace[3].Q)  # (H, L, E)
    np.testing.assert_array_equal(decoded(cross["k"], (2, 5, 4)), trace[3].K)  # (H, S, E)
    np.testing.assert_array_equal(decoded(cross["scores"], (2, 4, 5)), trace[3].scores)
    assert cross["masks"] == [[[5]] * 4] and data["image"] is None  # 4 rows of 5 keys, none masked
    assert opening(trace, layer=0, query=4) == {"layer": 0, "head": 0, "query": 4}  # an encoder's 5 queries
    with pytest.raises(al.ArgumentError, match=r"query: expected an index in 0\.\.3, got 4"):
        opening(trace, layer=3, query=4)  # the decoder's 4


def test_a_cross_attention_trace_alone_has_its_queries_and_keys_as_two_sequences():
    rng = np.random.default_rng(0)
    Q, K, V = rng.normal(size=(3, 4)), rng.normal(size=(6, 4)), rng.normal(size=(6, 2))
    trace = build_trace(np.eye(3), Q, K, V, scale=None, is_causal=False, tokens=list("abc"), key_tokens=list("uvwxyz"))
    data = page_data(trace)
    assert [s["tokens"] for s in data["sequences"]] == [list("abc"), list("uvwxyz")]
    assert (data["layers"][0]["rows"], data["layers"][0]["cols"]) == (0, 1)
    shape = PageShape.of(trace)
    assert (shape.scores, shape.cells, shape.numbers) == (18, 18, 3 * 4 + 6 * 4 + 6 * 2)  # L·S·H; q, k, v numbers
    check_page_size(trace)
    assert al.view(trace).startswith("<!DOCTYPE html>")


def test_the_page_size_check_counts_an_encoder_decoders_entries_exactly():
    shape = PageShape.of(traces.encoder_decoder())
    # 2 encoder entries 5 × 5, 2 decoder 4 × 4, 2 cross 4 × 5; 2 heads each
    assert shape.cells == 2 * 25 + 2 * 16 + 2 * 20 and shape.scores == 2 * shape.cells
    assert shape.numbers == 2 * 2 * (5 * 4 * 3) + 2 * 2 * (4 * 4 * 3) + 2 * 2 * (4 * 4 + 5 * 8)


def test_a_vision_page_carries_its_image_as_a_png_and_its_patches():
    pil = pytest.importorskip("PIL.Image")
    image = page_data(traces.vit())["image"]
    assert image["grid"] == [7, 7] and (image["height"], image["width"]) == (112, 112) and image["sequence"] == 0
    assert image["patches"] == list(range(2, 51))  # [CLS] and [REG] are apart
    png = pil.open(io.BytesIO(base64.b64decode(image["png"])))
    assert png.format == "PNG" and png.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(png), traces.picture())  # lossless
    page = al.view(traces.vit())
    assert page.count("data:image/png;base64,") == 1  # the one URL the page makes: its own image, nothing fetched
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page


def test_a_vision_page_without_pillow_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL fails as if it were not installed
    trace = traces.vit()
    with pytest.raises(al.MissingDependencyError, match=r"Pillow: pip install 'attnlab\[hf\]'"):
        al.view(trace)
    assert trace._repr_html_() is None  # Jupyter shows the text repr instead
    assert traces.encoder_decoder()._repr_html_().startswith("<div><iframe")  # no image, no Pillow needed


@pytest.mark.slow
def test_cross_attention_plots_its_queries_on_the_rows_and_its_keys_on_the_columns(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    trace = traces.encoder_decoder()
    ax = Figure().subplots()
    al.plot(trace[3], ax, heads=[1])
    assert [t.get_text() for t in ax.get_xticklabels()] == traces.SOURCE
    assert [t.get_text() for t in ax.get_yticklabels()] == traces.TARGET
    np.testing.assert_array_equal(ax.images[0].get_array(), trace[3].weights[1])  # (L, S): 4 rows, 5 columns
    figure = al.plot(trace, tmp_path / "ed.png")
    titles = [a.get_title() for a in figure.axes if a.get_title()]
    assert "model.decoder.layers.0.encoder_attn · head 1" in titles and len(titles) == 12
    shapes = [a.images[0].get_array().shape for a in figure.axes if a.images]
    assert shapes == [(5, 5)] * 4 + [(4, 4), (4, 4), (4, 5), (4, 5)] * 2
    assert (tmp_path / "ed.png").stat().st_size > 0
