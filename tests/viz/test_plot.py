"""attnlab plot: valid pictures, Chinese glyphs, heads, and bad input."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import attnlab as al
from attnlab.cli import main
from attnlab.engine.variants import Rules
from attnlab.viz import _plot
from helpers import run_cli
from oracles import requires

SENTENCE = "小明是个运动达人，他平时很爱打篮球"


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@requires("matplotlib")
@pytest.mark.slow
def test_png_svg_and_pdf_are_valid_and_sized_by_heads(tmp_path):
    for suffix in ("png", "svg", "pdf"):
        assert main(["plot", "--text", "a b c", "-o", str(tmp_path / f"one.{suffix}")]) == 0
    width, height = png_size((tmp_path / "one.png").read_bytes())
    assert 300 <= width <= 1400 and 300 <= height <= 1400
    root = ET.parse(tmp_path / "one.svg").getroot()
    assert root.tag.endswith("svg") and float(root.get("width").rstrip("pt")) > 100
    pdf = (tmp_path / "one.pdf").read_bytes()
    assert pdf.startswith(b"%PDF-") and b"/MediaBox" in pdf and pdf.rstrip().endswith(b"%%EOF")

    argv = ["--text", "a b c d", "--embed", "random", "--d-model", "8", "--num-heads", "4"]
    assert main(["plot", *argv, "-o", str(tmp_path / "four.png")]) == 0
    assert main(["plot", *argv, "--heads", "0,2", "-o", str(tmp_path / "two.png")]) == 0
    four, two = png_size((tmp_path / "four.png").read_bytes()), png_size((tmp_path / "two.png").read_bytes())
    assert four[0] > 1.6 * two[0] and four[1] == two[1]  # one row of panels, twice as many


@requires("matplotlib")
@pytest.mark.slow
def test_chinese_tokens_render_without_missing_glyphs(tmp_path):
    assert _plot.find_cjk_font() is not None, "CI installs fonts-wqy-zenhei; install a CJK font to run this"
    from attnlab.trace import Trace

    assert main(["plot", "--text", SENTENCE, "--stage", "scaled", "--causal", "-o", str(tmp_path / "zh.png")]) == 0
    capture = subprocess.run(
        [sys.executable, "-m", "attnlab.cli", "trace", "--text", SENTENCE, "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    trace = Trace.from_dict(json.loads(capture.stdout))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _plot.plot(trace, tmp_path / "zh.svg")
    assert not [w for w in caught if issubclass(w.category, _plot.MissingFontWarning)]
    assert not [w for w in caught if "missing from" in str(w.message)]


@requires("matplotlib")
def test_every_glyph_is_drawn_latin_signs_and_chinese_from_their_fonts(tmp_path, caplog):
    """A minus sign (U+2212), a superscript and Chinese in one figure: each from a font that has
    it (DejaVu Sans first, the CJK font after), so matplotlib reports no missing glyph."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    families = al.viz.font_families(["中"])
    assert families[0] == "DejaVu Sans" and len(families) == 2, "CI installs fonts-wqy-zenhei"
    cjk_file = font_manager.findfont(font_manager.FontProperties(family=families[1]), fallback_to_default=False)
    assert not FT2Font(cjk_file).get_char_index(0x2212)  # why the order matters: the CJK font has no minus sign
    trace = al.SelfAttention(4, 4).trace(np.eye(4), tokens=["他", "−1", "x²", "球"])
    with warnings.catch_warnings(record=True) as caught, caplog.at_level("WARNING", logger="matplotlib"):
        warnings.simplefilter("always")
        _plot.plot(trace, tmp_path / "signs.png", stage="scaled")  # scores below 0: "−0.1" on the colour bar
    assert not [str(w.message) for w in caught if "missing from" in str(w.message)]
    assert not [r.getMessage() for r in caplog.records if "glyph" in r.getMessage()]


@requires("matplotlib")
def test_without_a_cjk_font_it_says_so_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_plot, "find_cjk_font", lambda: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["plot", "--text", SENTENCE, "-o", str(tmp_path / "boxes.png")]) == 0
    # the warning lines only: a slow run (a fresh matplotlib builds its font cache) also says how long it took
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "warning:" in line]
    assert len(err) == 1 and "fonts-noto-cjk" in err[0] and "boxes" in err[0]
    assert not [w for w in caught if "missing from" in str(w.message)]


@requires("matplotlib")
def test_values_are_written_in_small_matrices(tmp_path):
    from attnlab import SelfAttention

    trace = SelfAttention(2, 2).trace(np.eye(2), tokens=["x", "y"])
    _plot.plot(trace, tmp_path / "small.svg")
    svg = (tmp_path / "small.svg").read_text()
    assert svg.count("<!-- 0.") + svg.count("<!-- 1.") >= 4  # matplotlib keeps each text as a comment


def test_select_heads():
    assert _plot.select_heads("all", 3) == [0, 1, 2]
    assert _plot.select_heads("2,0", 3) == [2, 0]
    with pytest.raises(ValueError, match=r"^heads: expected indices in 0\.\.2, got '3'"):
        _plot.select_heads("3", 3)
    with pytest.raises(ValueError, match=r"^heads: expected 'all' or indices"):
        _plot.select_heads("first", 3)


BAD = {
    "plot suffix": (["plot", "--text", "a b", "-o", "x.gif"], "-o: expected a file ending in .png, .svg, .pdf"),
    "view suffix": (["view", "--text", "a b", "-o", "x.png"], "-o: expected a file ending in .html"),
    "unreadable trace": (["plot", "broken.json", "-o", "x.png"], "not valid JSON"),
    "not a trace": (["view", "object.json", "-o", "x.html"], "not a trace, missing"),
    "mismatched tokens": (["plot", "trace.json", "--tokens", "a b c", "-o", "x.png"], "--tokens: expected 2 labels"),
    "bad heads": (["plot", "trace.json", "--heads", "5", "-o", "x.png"], "--heads"),
    "missing directory": (["view", "--text", "a b", "-o", "no/such/dir/x.html"], "a folder that exists"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_input_is_one_line_and_exit_status_2(tmp_path, case, monkeypatch, capsys):
    """In-process (the process's own exit status: tests/cli/test_cli.py's python -m test)."""
    argv, message = BAD[case]
    if case == "bad heads":
        pytest.importorskip("matplotlib")  # without it, plot says so before it reads --heads
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.json").write_text('{"weights": [[1')
    (tmp_path / "object.json").write_text('{"weights": [[1.0]]}')
    code, trace, _ = run_cli(capsys, "trace", "--text", "a b", "--format", "json")
    assert code == 0
    (tmp_path / "trace.json").write_text(trace)
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert message in err
    assert not (tmp_path / "x.png").exists()


def test_a_saved_trace_round_trips(tmp_path, capsys):
    assert main(["trace", "--text", "a b c", "--causal", "--format", "json"]) == 0
    saved = capsys.readouterr().out
    (tmp_path / "t.json").write_text(saved)
    assert main(["trace", str(tmp_path / "t.json"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(saved)


@requires("matplotlib")
@pytest.mark.slow
def test_four_heads_fit_inside_the_figure_and_chinese_stands_upright(tmp_path):
    trace = al.MultiheadAttention(8, 4, seed=0, dtype=np.float64).trace(
        np.random.default_rng(0).standard_normal((6, 8)), tokens=list("小明是个运动")
    )
    figure = al.plot(trace, tmp_path / "four.png")
    page = figure.bbox
    for ax in figure.axes:
        box = ax.get_tightbbox()
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
    for ax in figure.axes[:4]:
        assert {label.get_rotation() for label in ax.get_xticklabels()} == {0.0}
        assert [label.get_text() for label in ax.get_xticklabels()] == list("小明是个运动")


@pytest.mark.parametrize("length", [200, 1000])
@requires("matplotlib")
@pytest.mark.slow
def test_long_sequences_are_labelled_readably_and_said_to_be_drawing(length, tmp_path, capsys):
    rng = np.random.default_rng(1)
    np.save(tmp_path / "x.npy", rng.standard_normal((length, 8)))
    assert main(["plot", str(tmp_path / "x.npy"), "-o", str(tmp_path / "long.png")]) == 0
    assert f"attnlab plot: drawing 1 head of {length} tokens" in capsys.readouterr().err
    trace = al.SelfAttention(8, 8).trace(rng.standard_normal((length, 8)))
    figure = al.plot(trace, tmp_path / "again.png")
    labels = [label.get_text() for label in figure.axes[0].get_xticklabels()]
    assert len(labels) <= 60 and labels[0] == "0" and len(figure.axes[0].texts) == 0  # no per-cell numbers


@requires("matplotlib")
def test_plot_into_an_axes(tmp_path):
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    trace = al.SelfAttention(3, 2).trace(np.eye(3), tokens=["x", "y", "z"])
    assert al.plot(trace, ax) is ax
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x", "y", "z"]
    with pytest.raises(ValueError, match="heads: expected one head of one layer to draw into an Axes"):
        al.plot(al.MultiheadAttention(4, 2, seed=0).trace(np.eye(4, dtype=np.float32)), ax)


@requires("matplotlib")
def test_bad_plot_arguments_name_themselves(tmp_path):
    trace = al.MultiheadAttention(4, 2, seed=0, dtype=np.float64).trace(np.eye(4))
    with pytest.raises(TypeError, match=r"trace: expected an attnlab\.Trace or attnlab\.models\.ModelTrace, got str"):
        al.plot("x", tmp_path / "p.png")
    with pytest.raises(TypeError, match="target: expected a file path"):
        al.plot(trace, None)
    with pytest.raises(ValueError, match="heads: expected each head once"):
        al.plot(trace, tmp_path / "p.png", heads="0,0")
    with pytest.raises(TypeError, match="heads: expected 'all', indices"):
        al.plot(trace, tmp_path / "p.png", heads=[True])
    assert al.plot(trace, tmp_path / "p.png", heads=(1, 0)) is not None


@requires("matplotlib")
def test_weights_are_coloured_from_0_to_1_unless_relative(tmp_path):
    trace = al.SelfAttention(4, 3).trace(np.ones((4, 4)))  # equal rows: every weight is 1/4
    figure = al.plot(trace, tmp_path / "p.png")
    assert figure.axes[0].images[0].get_clim() == (0.0, 1.0)
    figure = al.plot(trace, tmp_path / "p.png", relative=True)
    assert figure.axes[0].images[0].get_clim() == pytest.approx((0.0, 0.25))


def test_korean_needs_a_cjk_font_too():
    assert _plot.needs_cjk(["한국어"]) and _plot.needs_cjk(["かな"]) and not _plot.needs_cjk(["abc", "é"])


@pytest.mark.slow
@pytest.mark.parametrize("layers", [2, 12])
@requires("matplotlib")
def test_no_title_falls_outside_the_figure_at_any_number_of_layers(tmp_path, layers):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from attnlab.trace import ModelTrace

    tokens = [f"token{i}" for i in range(12)]
    one = al.MultiheadAttention(8, 4, seed=0, dtype=np.float64).trace(
        np.random.default_rng(0).standard_normal((12, 8)), tokens=tokens
    )
    trace = ModelTrace("m", list(range(12)), tokens, dict.fromkeys(range(layers), one), layers, 4)
    figure = al.plot(trace, tmp_path / "grid.png")
    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw(renderer)  # the layout as savefig drew it
    page = figure.bbox
    titles = [ax.title.get_window_extent(renderer) for ax in figure.axes if ax.get_title()]
    assert len(titles) == 4 * layers
    for box in titles:
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
    for n, box in enumerate(titles):  # and none over another
        assert not any(box.overlaps(other) for other in titles[n + 1 :])


@requires("matplotlib")
def test_a_plot_of_random_weights_says_so_in_its_title(tmp_path):
    from matplotlib.figure import Figure

    given = al.SelfAttention(3, 2, weights=[np.eye(3, 2)] * 3).trace(np.eye(3))
    assert al.plot(given, tmp_path / "trained.png").get_suptitle() == ""  # not known to be random
    trace = al.SelfAttention(3, 2, seed=5).trace(np.eye(3))  # drawn from seed 5: random, said so
    figure = al.plot(trace, tmp_path / "random.png")
    assert figure.get_suptitle().startswith("random weights (seed 5), not trained")
    ax = Figure().subplots()
    al.plot(trace, ax)
    assert ax.get_title().replace("\n", " ").endswith("random weights (seed 5), not trained: the pattern is chance")
    assert main(["plot", "--text", "a b", "-o", str(tmp_path / "cli.svg")]) == 0
    assert "random weights (seed 42)" in (tmp_path / "cli.svg").read_text()


@requires("matplotlib")
def test_a_windowed_plot_draws_its_masked_cells_grey_with_a_legend(tmp_path):
    from matplotlib.image import imread

    png = tmp_path / "window.png"
    argv = ["--text", "a b c d e f", "--embed", "random", "--d-model", "8", "--window", "2,0"]
    assert main(["plot", *argv, "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from attnlab.cli._inputs import embed_tokens

    tokens = list("abcdef")
    x = embed_tokens(tokens, "random", 8, 42)  # the command's input and layer
    trace = al.SelfAttention(8, 8, seed=42).trace(x, rules=Rules(window=(2, 0)), tokens=tokens)
    figure = al.plot(trace, png)
    ax = figure.axes[0]
    (grey,) = ax.collections  # one rectangle per run of masked keys in a row: by hand, 5 above and 3 below
    assert len(grey.get_paths()) == 5 + 3 and grey.get_hatch() == "///"
    masked = trace.masked
    assert masked.sum() == 15 + 6 and len(ax.texts) == 36 - 21  # no number in a masked cell
    (legend,) = figure.legends
    assert [t.get_text() for t in legend.get_texts()] == [_plot.MASKED_LABEL]
    assert "sliding window (2, 0): query i sees keys i − 2 … i" in legend.get_title().get_text().replace("\n", " ")
    pixels = imread(png)  # the picture as written: (height, width, RGBA), rows from the top
    height = pixels.shape[0]

    def colour_at(i: int, j: int) -> np.ndarray:
        x, y = ax.transData.transform((j + 0.3, i - 0.3))  # off the centre: clear of the hatch's middle line
        return pixels[int(height - y), int(x), :3]

    for i, j in ((0, 5), (5, 0), (1, 4)):  # masked: light grey (or the hatch's darker grey), R = G = B
        r, g, b = colour_at(i, j)
        assert r == g == b and r > 0.5
    r, g, b = colour_at(0, 0)  # query 0 sees only itself: weight 1, viridis' yellow
    assert r > 0.9 and b < 0.3


@requires("matplotlib")
@pytest.mark.parametrize("token", ["$x^2$", "$\\frac$", "a_b^c"])
def test_a_token_with_dollars_is_drawn_as_typed_with_mathtext_off(tmp_path, token):
    trace = al.SelfAttention(2, 2, seed=0).trace(np.eye(2), tokens=[token, "b"])
    figure = al.plot(trace, tmp_path / "math.svg")  # "$\frac$" used to be a mathtext ParseException
    (ax,) = [ax for ax in figure.axes if ax.get_title()]
    for label in (*ax.get_xticklabels(), *ax.get_yticklabels()):
        assert label.get_parse_math() is False
    assert [t.get_text() for t in ax.get_yticklabels()] == [token, "b"]
    svg = (tmp_path / "math.svg").read_text(encoding="utf-8")
    assert "DejaVuSans-Oblique" not in svg and "DejaVuSerif-Italic" not in svg  # no math italics drawn


@requires("matplotlib")
def test_control_characters_and_lone_surrogates_in_a_plots_tokens_are_escaped(tmp_path, capsys):
    code = main(["plot", "--text", "a\udcff b\x1b[1m c", "-o", str(tmp_path / "bad.png")])
    assert code == 0, capsys.readouterr().err  # a surrogate used to be a traceback in FreeType
    trace = al.SelfAttention(2, 2, seed=0).trace(np.eye(2), tokens=["a\udcff", "b\x1b"])
    figure = al.plot(trace, tmp_path / "bad.svg")
    (ax,) = [ax for ax in figure.axes if ax.get_title()]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a\\udcff", "b\\x1b"]


@requires("matplotlib")
@pytest.mark.slow
def test_a_models_heads_wrap_into_a_grid_that_names_the_model_and_labels_what_matters(tmp_path):
    from attnlab import models
    from checkpoints import tiny_model

    tiny_model("llama", num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=128).save_pretrained(
        tmp_path / "llama"
    )
    trace = models.load(tmp_path / "llama").trace(np.arange(90) % 50, layers=[1])  # 90 tokens: labels thinned
    figure = _plot.plot(trace, tmp_path / "heads.png")
    shown = [ax for ax in figure.axes if ax.get_visible() and ax.get_images()]
    assert len(shown) == 8 and len({round(ax.get_position().y0, 3) for ax in shown}) == 2  # 2 rows of 4, not a strip
    heading = figure._suptitle.get_text()
    assert heading == "llama (llama) · 2 layers, 8 heads sharing 2 key/value heads", heading
    # the last query's row and the three keys it weighs most, in this head: labelled, in bold
    ax, head = shown[0], 0
    weights = trace[1].weights[head][89]  # (90,), the last token's row
    strongest = sorted(int(j) for j in np.argsort(-weights, kind="stable")[:3])
    bold_rows = [int(t.get_position()[1]) for t in ax.get_yticklabels() if t.get_fontweight() == "bold"]
    bold_keys = [int(t.get_position()[0]) for t in ax.get_xticklabels() if t.get_fontweight() == "bold"]
    labelled_keys = [int(t.get_position()[0]) for t in ax.get_xticklabels() if t.get_text()]
    assert bold_rows == [89] and bold_keys == strongest, (bold_rows, bold_keys, strongest)
    assert len(labelled_keys) < 90 and set(strongest) <= set(labelled_keys)


def test_the_python_apis_plot_and_page_of_drawn_weights_say_they_are_random_within_the_picture(tmp_path):
    """SelfAttention's drawn weights (seed 42) are random: the trace carries the seed, the page and the
    plot say so, and the plot's title is wrapped inside the figure (it was cut at both edges)."""
    trace = al.SelfAttention(4, 3).trace(np.eye(4), tokens=list("我爱打球"))
    assert trace.random_seed == 42
    assert al.SelfAttention(4, 3, weights=[np.eye(4, 3)] * 3).trace(np.eye(4)).random_seed is None  # given: not said
    assert '"random_seed": 42' in al.view(trace)
    figure = al.plot(trace, tmp_path / "p.png")
    title = figure._suptitle
    assert "random weights (seed 42), not trained: the pattern is chance" in title.get_text().replace("\n", " ")
    figure.canvas.draw()
    box = title.get_window_extent()
    assert box.x0 >= 0 and box.x1 <= figure.bbox.width and box.y1 <= figure.bbox.height


@requires("matplotlib")
def test_a_chinese_figure_draws_without_matplotlibs_findfont_chatter(tmp_path, caplog):
    """font_families gives a CJK family that matplotlib finds at weight normal (WenQuanYi Zen Hei is 500):
    the site's build log has no "findfont: Failed to find font weight normal" lines."""
    import logging

    from matplotlib.figure import Figure

    from attnlab.viz import font_families
    from attnlab.viz._plot import find_cjk_font

    if find_cjk_font() is None:
        pytest.skip("no CJK font installed")
    figure = Figure()
    figure.subplots().set_title("中文", family=font_families(["中"]))
    with caplog.at_level(logging.INFO, logger="matplotlib.font_manager"):
        figure.savefig(tmp_path / "zh.png")
    assert not [r for r in caplog.records if "Failed to find font" in r.getMessage()]
