"""attnlab view's views beyond a trace on the command line: two --text, --generate N,
--rollout (and plot --stage rollout), each bad input one line with exit status 2."""

from __future__ import annotations

import json
import re
import sys
import types

import numpy as np
import pytest

from attnlab import models
from helpers import run_cli

A = "小明是个运动达人，小红是个音乐迷，他平时很爱打篮球"
B = "小明是个运动达人，小红是个音乐迷，她平时很爱弹钢琴"


def views_of(path) -> dict:
    block = re.search(r'<script id="attnlab-views" type="application/json">(.*?)</script>', path.read_text(), re.S)
    assert block is not None
    return json.loads(block.group(1))


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    from checkpoints import tiny_checkpoint_with_tokenizer

    return tiny_checkpoint_with_tokenizer(tmp_path_factory.mktemp("gpt2-tokenizer"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["view", "--text", "a b", "--text", "c d"], "--text twice: expected --model with it"),
        (["trace", "--model", "builtin:coref", "--text", A, "--text", B], "--text: given 2 times; only 'attnlab view"),
        (["view", "--model", "builtin:coref", "--text", A, "--text", B, "--text", A], "expected one text or two"),
        (["view", "--text", "a b", "--generate", "3"], "--generate: expected --model with it"),
        (
            ["view", "--model", "builtin:coref", "--text", A, "--generate", "0"],
            "--generate: expected an integer in 1..256",
        ),
        (["view", "--model", "builtin:coref", "--text", A, "--generate", "257"], "in 1..256, got 257"),
        (
            ["view", "--model", "builtin:coref", "--text", A, "--generate", "3"],
            "--model: expected a causal language model, which generates text, got builtin:coref, a bert model",
        ),
        (
            ["view", "--model", "builtin:coref", "--text", A * 3, "--text", B],
            "--text: expected at most 64 tokens, the model's positions (--truncate cuts a text to them), got 77",
        ),
        (["view", "--model", "builtin:coref", "--text", A, "--text", B, "--generate", "2"], "expected one --text"),
    ],
)
def test_bad_views_are_one_line_errors(capsys, tmp_path, argv, message):
    code, _, err = run_cli(capsys, *argv, *(["-o", str(tmp_path / "p.html")] if argv[0] == "view" else []))
    assert code == 2 and message in err and err.count("\n") <= 2  # the backend line, then the error
    assert "Traceback" not in err


def test_two_texts_through_the_model_make_one_page_of_both(capsys, tmp_path):
    page = tmp_path / "two.html"
    code, _, _ = run_cli(capsys, "view", "--model", "builtin:coref", "--text", A, "--text", B, "-o", str(page))
    assert code == 0
    pair = views_of(page)["pair"]
    coref = models.load("builtin:coref")
    assert [t["tokens"] for t in pair["texts"]] == [coref.trace(A).tokens, coref.trace(B).tokens]


@pytest.mark.parametrize("backend", ["numpy", "transformers"])
def test_generate_past_the_models_positions_is_refused_before_it_runs(capsys, tmp_path, gpt2, backend):
    argv = ["view", "--model", str(gpt2), "--text", "The cat", "--generate", "60", "--backend", backend]
    code, _, err = run_cli(capsys, *argv, "-o", str(tmp_path / "g.html"))
    assert code == 2 and "the model's 40 positions" in err and "Traceback" not in err


@pytest.mark.parametrize("backend", ["numpy", "transformers"])
def test_generate_writes_the_recorded_rows_of_either_backend(capsys, tmp_path, gpt2, backend):
    page = tmp_path / "g.html"
    argv = ["view", "--model", str(gpt2), "--text", "The cat sat", "--generate", "4", "--backend", backend]
    code, _, err = run_cli(capsys, *argv, "-o", str(page))
    assert code == 0, err
    data = views_of(page)["generation"]
    expected = models.load(gpt2).trace_generation("The cat sat", 4)
    assert data["prompt"] == expected.prompt_length and len(data["tokens"]) == len(expected.ids)
    rows = np.frombuffer(__import__("base64").b64decode(data["layers"][1]["weights"]), "<f4")
    np.testing.assert_allclose(rows.reshape(expected.weights[1].shape), expected.weights[1], atol=1e-5)


def stub_analysis(monkeypatch, calls: list) -> None:
    """attnlab.analysis as a stub: rollout and flow of a known shape, recording their calls."""
    stub = types.ModuleType("attnlab.analysis")

    def rollout(trace):
        calls.append("rollout")
        L = len(trace.tokens)
        return np.full((trace.num_layers, L, L), 1 / L)

    def flow(trace, progress=False):
        calls.append("flow")
        return rollout(trace) * 0.5

    stub.rollout, stub.flow = rollout, flow
    monkeypatch.setitem(sys.modules, "attnlab.analysis", stub)


def test_rollout_without_attnlab_analysis_is_a_one_line_error_before_the_model_runs(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "attnlab.analysis", None)  # import attnlab.analysis raises ImportError
    for argv in (
        ["view", "--rollout", "-o", str(tmp_path / "r.html")],
        ["plot", "--stage", "rollout", "-o", str(tmp_path / "r.png")],
    ):
        code, _, err = run_cli(capsys, *argv, "--model", "builtin:coref", "--text", A)
        assert code == 2 and "attention rollout needs attnlab.analysis" in err
        assert "ran in" not in err  # refused before the model ran


@pytest.mark.slow
def test_rollout_is_computed_by_attnlab_analysis_for_the_page_and_the_plot(capsys, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    calls: list = []
    stub_analysis(monkeypatch, calls)
    page = tmp_path / "r.html"
    assert run_cli(capsys, "view", "--model", "builtin:coref", "--text", A, "--rollout", "-o", str(page))[0] == 0
    flows = views_of(page)["flows"]
    assert flows["layers"] == 2 and flows["rollout"] and flows["flow"] and calls == ["rollout", "flow", "rollout"]
    picture = tmp_path / "r.png"
    assert (
        run_cli(capsys, "plot", "--model", "builtin:coref", "--text", A, "--stage", "rollout", "-o", str(picture))[0]
        == 0
    )
    assert picture.stat().st_size > 0
    code, _, err = run_cli(capsys, "plot", "--text", "a b", "--stage", "rollout", "-o", str(picture))
    assert code == 2 and "--stage rollout: expected --model" in err
    code, _, err = run_cli(capsys, "view", "--text", "a b", "--rollout", "-o", str(page))
    assert code == 2 and "--rollout: expected --model" in err


def test_view_lang_zh_writes_the_page_in_chinese_and_en_is_the_default(capsys, tmp_path):
    def data_of(path) -> dict:
        block = re.search(r'<script id="attnlab-data" type="application/json">(.*?)</script>', path.read_text(), re.S)
        assert block is not None
        return json.loads(block.group(1))

    for lang in ("zh", None):
        page = tmp_path / f"{lang}.html"
        chosen = ["--lang", lang] if lang else []
        assert run_cli(capsys, "view", "--text", "a b c", "--causal", *chosen, "-o", str(page))[0] == 0
        data = data_of(page)
        assert data["lang"] == (lang or "en")
        rules = "因果：查询 i 只看键 j ≤ i" if lang else "causal: query i sees keys j ≤ i"  # the variants' own words
        assert data["layers"][0]["rules"] == rules
    code, _, err = run_cli(capsys, "view", "--text", "a b", "--lang", "fr", "-o", str(tmp_path / "fr.html"))
    assert code == 2 and "--lang: invalid choice: 'fr'" in err and not (tmp_path / "fr.html").exists()


def test_view_says_it_wrote_its_page_and_where_truncate_cut_the_text(tmp_path, monkeypatch, capsys):
    """As plot does: one line naming the file; with --truncate, one more saying how the text was cut."""
    pytest.importorskip("tokenizers")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "view", "--text", "a b", "-o", "x.html")
    size = (tmp_path / "x.html").stat().st_size
    assert code == 0 and out == "" and err == f"attnlab view: wrote x.html ({size / 1e6:.1f} MB)\n"
    text = "小明是个运动达人，" * 8  # 72 characters, [CLS] and [SEP]: 74 tokens; builtin:coref has 64 positions
    code, _, err = run_cli(capsys, "view", "--model", "builtin:coref", "--text", text, "--truncate", "-o", "c.html")
    assert code == 0
    assert "attnlab view: the text was cut to its first 64 of 74 tokens (the model's positions)\n" in err
    assert err.endswith(f"attnlab view: wrote c.html ({(tmp_path / 'c.html').stat().st_size / 1e6:.1f} MB)\n")
