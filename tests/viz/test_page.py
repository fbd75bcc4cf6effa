"""The page's HTML and data, checked without a browser (tests/viz/test_view.py opens it in one)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import attnlab as al
from attnlab.cli import main
from attnlab.engine.variants import Rules


def test_view_returns_the_page_or_writes_it(tmp_path):
    trace = al.SelfAttention(3, 2).trace(np.eye(3))
    page = al.view(trace)
    assert page is not None and page.startswith("<!DOCTYPE html>")
    assert al.view(trace, tmp_path / "t.html") is None and (tmp_path / "t.html").read_text() == page
    with pytest.raises(
        TypeError, match=r"^trace: expected a Trace, a ModelTrace, a pair of them, or a model .*got dict$"
    ):
        al.view({})


def test_only_a_trace_a_pair_or_a_model_is_drawn_and_anything_else_is_named_as_the_trace() -> None:
    """A layer has a ``trace`` too (of an array): it is not a model a text runs on; nor is
    any object; the first argument is named, not the text."""
    from attnlab import analysis, models

    expected = r"^trace: expected a Trace, a ModelTrace, a pair of them, or a model from attnlab\.load_model, got "
    for subject in (al.MultiheadAttention(8, 2), object()):
        for draw in (al.view, al.show, analysis.rollout, analysis.flow):
            with pytest.raises(al.ArgumentTypeError, match=expected + type(subject).__name__ + "$"):
                draw(subject, text="the cat")
    model = models.load("builtin:coref")  # an attnlab model runs a text as its runner does
    assert al.view(model, text="the cat") == al.view(al.load_model(model), text="the cat")


def test_the_page_is_self_contained(tmp_path):
    page = tmp_path / "p.html"
    assert main(["view", "--text", "a b", "-o", str(page)]) == 0
    html = page.read_text()
    assert (
        "<script src" not in html
        and "<link" not in html
        and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    )


def test_page_data_has_a_head_axis_for_one_head_or_many():
    import base64

    from attnlab.viz._page import page_data

    for trace in (
        al.SelfAttention(4, 3).trace(np.eye(4)),
        al.MultiheadAttention(4, 1, seed=0, dtype=np.float64).trace(np.eye(4)),
        al.MultiheadAttention(4, 2, seed=0, dtype=np.float64).trace(np.eye(4)),
    ):
        (data,) = page_data(trace)["layers"]
        assert data["heads"] == trace.num_heads and data["dtype"] == "float64"
        scores = np.frombuffer(base64.b64decode(data["scores"]), "<f8").reshape(trace.num_heads, 4, 4)
        np.testing.assert_array_equal(scores, trace.scores.reshape(scores.shape))  # exact, as the trace has them
        q = np.frombuffer(base64.b64decode(data["q"]), "<f8")
        assert q.size == trace.num_heads * 4 * data["d_k"]


def test_overflow_is_not_mistaken_for_a_mask():
    from attnlab.viz._page import page_data

    trace = al.SelfAttention(2, 2).trace(np.array([[1e200, 1e200], [1e200, -1e200]]))
    assert page_data(trace)["layers"][0]["masks"] == [[[2], [2]]]  # one mask, shared by every head: no key masked


def test_the_page_inlines_its_assets_and_leaves_tokens_that_name_a_slot_as_data():
    from attnlab.viz._page import asset_files

    slots = ["__ATTNLAB_STYLE__", "__ATTNLAB_SCRIPT__", "__ATTNLAB_DATA__"]
    page = al.view(al.SelfAttention(3, 2).trace(np.eye(3), tokens=slots))
    assert page is not None
    csp = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:"
    assert f'<meta http-equiv="Content-Security-Policy" content="{csp}">' in page
    for name, text in asset_files().items():  # page.css, views.css and every module of the script
        tag = "style" if name.endswith(".css") else "script"
        assert text in page and f"</{tag}" not in text.lower()  # inline, and cannot end its own block
    assert [page.count(slot) for slot in slots] == [1, 1, 1]  # each token once, in the data; no slot left


def test_view_and_show_check_the_layer_head_and_query_they_open_on(monkeypatch):
    from attnlab.viz._page import opening, page_data

    trace = al.MultiheadAttention(4, 2, seed=0, dtype=np.float64).trace(np.eye(4))
    assert opening(trace) == {"layer": 0, "head": 0, "query": 0}
    assert opening(trace, 0, 1, 3) == {"layer": 0, "head": 1, "query": 3}
    assert page_data(trace, opening(trace, head=1, query=2))["opens"] == {"layer": 0, "head": 1, "query": 2}
    for kwargs, message in (
        ({"head": 2}, "head: expected an index in 0..1, got 2"),
        ({"query": 4}, "query: expected an index in 0..3, got 4"),
        ({"query": -1}, "query: expected an index in 0..3, got -1"),
        ({"head": True}, "head: expected an index in 0..1, got True"),
        ({"layer": 1}, r"layer: expected a traced layer \(0\), got 1"),
    ):
        with pytest.raises(al.ArgumentError, match=message):
            al.view(trace, **kwargs)
        with pytest.raises(al.ArgumentError, match=message):
            al.show(trace, **kwargs)  # checked before IPython is needed


def test_view_and_show_refuse_a_language_the_page_does_not_speak(tmp_path):
    trace = al.SelfAttention(3, 2).trace(np.eye(3))
    calls = (lambda: al.view(trace, lang="fr"), lambda: al.view(trace, tmp_path / "p.html", lang="fr"),
             lambda: al.show(trace, lang="fr"))  # fmt: skip
    for call in calls:
        with pytest.raises(al.ArgumentError, match=r"^lang: expected one of en, zh, got 'fr'$"):
            call()
    assert not (tmp_path / "p.html").exists()
    assert '"lang": "zh"' in al.view(trace, lang="zh") and '"lang": "en"' in al.view(trace)


def test_a_models_config_names_the_view_its_page_opens_on():
    pytest.importorskip("tokenizers")
    from attnlab import models
    from attnlab.trace import ModelTrace
    from attnlab.viz._page import opening

    model = models.load("builtin:coref")
    trace = model.trace("小明是个运动达人，小红是个画家，他平时很爱打篮球")
    # config.json: "attnlab": {"task": "coref", "answer_head": {"layer": 1, "head": 0}}; 他 is token 17
    assert model.config.raw["attnlab"]["answer_head"] == {"layer": 1, "head": 0}
    assert trace.tokens[17] == "他" and trace.opens == {"layer": 1, "head": 0, "query": 17}
    assert opening(trace) == {"layer": 1, "head": 0, "query": 17}  # layer 1 is the page's second
    assert opening(trace, layer=0, query=2) == {"layer": 0, "head": 0, "query": 2}
    with pytest.raises(al.ArgumentError, match=r"layer: expected a traced layer \(0, 1\), got 2"):
        opening(trace, layer=2)
    again = ModelTrace.from_dict(trace.to_dict())
    assert again.opens == trace.opens
    old = trace.to_dict()
    del old["opens"]  # a trace saved before the field: it opens on layer 0, head 0, query 0
    assert ModelTrace.from_dict(old).opens is None and opening(ModelTrace.from_dict(old))["query"] == 0
    only_first = model.trace("小明是个运动达人，他平时很爱打篮球", layers=0)  # its answering layer not traced
    assert opening(only_first) == {"layer": 0, "head": 0, "query": 0}
    with pytest.raises(al.ArgumentError, match="opens: expected null or whole numbers"):
        ModelTrace.from_dict({**trace.to_dict(), "opens": {"layer": "1"}})


def test_random_weights_are_carried_by_the_trace_and_said_on_the_page(tmp_path, capsys):
    from attnlab.viz._page import page_data

    assert main(["trace", "--text", "a b c", "--seed", "7", "--format", "json"]) == 0
    saved = json.loads(capsys.readouterr().out)
    assert saved["random_seed"] == 7
    assert al.Trace.from_dict(saved).random_seed == 7
    assert page_data(al.Trace.from_dict(saved))["random_seed"] == 7
    del saved["random_seed"]  # a trace saved before the field still loads, not known to be random
    assert al.Trace.from_dict(saved).random_seed is None
    assert page_data(al.Trace.from_dict(saved))["random_seed"] is None
    with pytest.raises(al.ArgumentError, match="random_seed: expected a whole number ≥ 0 or null, got 'x'"):
        al.Trace.from_dict({**saved, "random_seed": "x"})
    assert main(["trace", "--text", "a b c", "--num-heads", "3", "--embed", "random", "--d-model", "6",
                 "--format", "json"]) == 0  # fmt: skip
    heads = json.loads(capsys.readouterr().out)
    assert heads["random_seed"] == 42 and al.Trace.from_dict(heads).head(1).random_seed == 42


def test_a_windowed_pages_data_carries_its_band_rules_and_variants():
    import base64

    from attnlab.viz._page import PageShape, page_data

    trace = al.SelfAttention(5, 3, seed=1).trace(np.eye(5), rules=Rules(window=(1, 0), softcap=2.0))
    (data,) = page_data(trace)["layers"]
    # by hand: query i sees keys i − 1 and i (runs: unmasked first; "01111", "00111", "10011", "11001", "11100")
    assert data["masks"] == [[[1, 4], [2, 3], [0, 1, 2, 2], [0, 2, 2, 1], [0, 3, 2]]]
    assert data["rules"] == (
        "sliding window (1, 0): query i sees keys i − 1 … i; softcap 2: scores become 2·tanh(z/2), within ±2"
    )
    assert data["softcap"] == 2.0 and data["bias"] is None and data["sinks"] is None
    rules = Rules(alibi_slopes=[0.5, 0.25], sinks=[0.0, 1.0], mask_mod=lambda b, h, i, j: (j != 0) | (h == 0))
    heads = al.MultiheadAttention(4, 2, seed=0, dtype=np.float64).trace(np.eye(4), rules=rules)
    (data,) = page_data(heads)["layers"]
    assert data["masks"] == [[[4]] * 4, [[0, 1, 3]] * 4]  # one mask a head where they differ: "0000", "1000"
    bias = np.frombuffer(base64.b64decode(data["bias"]), "<f8").reshape(2, 4, 4)
    distance = np.abs(np.arange(4)[None, :] - np.arange(4)[:, None])
    np.testing.assert_array_equal(bias, -np.array([0.5, 0.25])[:, None, None] * distance)
    assert data["bias_heads"] == 2 and data["sinks"] == [0.0, 1.0]
    assert PageShape.of(heads).bias_heads == 2 and PageShape.of(trace).bias_heads == 0


def test_a_pages_tokens_escape_control_characters_and_lone_surrogates(tmp_path, capsys):
    from attnlab.viz._page import page_data

    trace = al.SelfAttention(2, 2, seed=0).trace(np.eye(2), tokens=["a\udcff", "b\x1b[0m"])
    assert page_data(trace)["sequences"][0]["tokens"] == ["a\\udcff", "b\\x1b[0m"]
    assert main(["view", "--text", "a\udcff b\x07", "-o", str(tmp_path / "s.html")]) == 0, capsys.readouterr().err
    page = (tmp_path / "s.html").read_text(encoding="utf-8")  # a surrogate used to fail the UTF-8 write
    assert "a\\\\udcff" in page and "b\\\\x07" in page  # the escapes, as JSON strings in the page
    assert trace.tokens == ["a\udcff", "b\x1b[0m"]  # the trace keeps them as given
