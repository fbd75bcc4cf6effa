"""attnlab view and attnlab.view of a text past the page of weights' cap (PAGE_LIMITS["head_cells"],
lowered here to 8² cells so that builtin:coref's 27 tokens pass it): the statistics page instead of a
refusal, said in one line and at the page's top; its numbers checked against the weights of the
model's own trace of the text (each key's received attention, Σ over the queries)."""

from __future__ import annotations

import base64
import json
import re
import zlib

import numpy as np
import pytest

import attnlab as al
import attnlab.viz._page_size
from helpers import run_cli

TEXT = "小明是个运动达人，小红是个音乐迷，他平时很爱打篮球"  # 27 tokens through builtin:coref


def page_data(path) -> dict:
    html = path.read_text(encoding="utf-8")
    return json.loads(re.search(r'id="attnlab-data">(.*?)</script>', html, re.S)[1])


@pytest.fixture
def cap_of_8(monkeypatch):
    monkeypatch.setitem(attnlab.viz._page_size.PAGE_LIMITS, "head_cells", 64)


def test_view_past_the_cap_writes_the_statistics_page_and_says_so(tmp_path, monkeypatch, capsys, cap_of_8):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "view", "--model", "builtin:coref", "--text", TEXT, "-o", "x.html")
    line = "27 tokens: past the 8-token page of weights, this page shows statistics computed exactly from the tiles"
    assert code == 0 and f"attnlab view: {line}: wrote x.html" in err.splitlines()
    data = page_data(tmp_path / "x.html")
    assert data["kind"] == "statistics" and data["cap"] == 8  # the page says the line above in its own language
    trace = al.load_model("builtin:coref").trace(TEXT)  # the weights, dense: the oracle
    layers, heads, L = data["layers"], data["heads"], data["length"]
    heads_data = [zlib.decompress(base64.b64decode(text)) for text in data["head_data"]]  # each head's received first
    received = np.stack([np.frombuffer(h[: 2 * L], "<f2") for h in heads_data]).reshape(layers, heads, L)
    for i, layer in enumerate(trace.layers.values()):
        np.testing.assert_allclose(received[i], layer.weights.sum(axis=-2), rtol=2**-10, atol=2**-24)


def test_view_within_the_cap_and_views_of_weights_past_it_are_as_before(tmp_path, monkeypatch, capsys, cap_of_8):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "view", "--model", "builtin:coref", "--text", "小明", "-o", "short.html")
    assert code == 0 and "statistics" not in err and "window.attnlabView" in (tmp_path / "short.html").read_text()
    code, _, err = run_cli(capsys, "view", "--model", "builtin:coref", "--text", TEXT, "--layer", "1", "-o", "x.html")
    assert code == 2 and "for the page to compute, at most 64" in err  # one layer's weights: refused as before
    code, _, err = run_cli(capsys, "view", "--model", "builtin:coref", "--text", TEXT, "--causal", "-o", "x.html")
    assert code == 2 and "--causal: --model builtin:coref fixes the weights" in err
    assert not (tmp_path / "x.html").exists()


def test_the_api_view_of_a_model_past_the_cap_and_of_statistics(tmp_path, cap_of_8):
    model = al.load_model("builtin:coref")
    path = tmp_path / "api.html"
    al.view(model, path, text=TEXT, layer=1, head=0, query=20)
    data = page_data(path)
    assert data["kind"] == "statistics" and data["opens"] == {"layer": 1, "head": 0, "token": 20}
    assert data["cap"] == 8  # past the page of weights' 8 tokens: said at the page's top
    stats = model.statistics(TEXT)
    html = al.view(stats)  # a ModelStatistics: its page, as text
    assert '"kind":"statistics"' in html.replace(" ", "")
    with pytest.raises(al.ArgumentError, match=r"head: expected an index in 0\.\.3, got 9"):
        al.view(stats, head=9)
    with pytest.raises(al.ArgumentError, match="text: expected None for statistics"):
        al.view(stats, text=TEXT)
    with pytest.raises(al.ArgumentError, match="rollout: expected None with a model's statistics"):
        al.view(stats, rollout=np.zeros((2, 27, 27)))


def test_plot_draws_the_statistics_views_of_a_model_or_a_saved_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for stage in ("profiles", "received", "positions"):
        code, _, err = run_cli(
            capsys, "plot", "--model", "builtin:coref", "--text", TEXT, "--stage", stage, "-o", f"{stage}.png"
        )
        assert code == 0 and (tmp_path / f"{stage}.png").stat().st_size > 10_000, err
    stats = al.load_model("builtin:coref").statistics(TEXT)
    (tmp_path / "stats.json").write_text(stats.to_json())
    code, _, _ = run_cli(
        capsys, "plot", "stats.json", "--stage", "received", "--layer", "1", "--heads", "0", "-o", "r.svg"
    )
    assert code == 0 and (tmp_path / "r.svg").read_text().startswith("<?xml")


def test_plot_refuses_a_layer_or_head_the_model_lacks_before_it_runs(tmp_path, monkeypatch, capsys):
    import attnlab.runner

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(attnlab.runner.Runner, "statistics", lambda *a, **k: pytest.fail("the model ran"))
    code, _, err = run_cli(capsys, "plot", "--model", "builtin:coref", "--text", TEXT, "--stage", "received",
                           "--layer", "5", "-o", "x.png")  # fmt: skip
    assert code == 2 and "attnlab plot: error: --layer: expected layer indices in 0..1, got 5" in err
    code, _, err = run_cli(capsys, "plot", "--model", "builtin:coref", "--text", TEXT, "--stage", "profiles",
                           "--heads", "4", "-o", "x.png")  # fmt: skip
    assert code == 2 and "--heads: expected indices in 0..3, got '4'" in err
    code, _, err = run_cli(capsys, "plot", "--stage", "profiles", "--text", TEXT, "-o", "x.png")
    assert code == 2 and "--stage profiles: expected --model and --text, or a statistics JSON file" in err
