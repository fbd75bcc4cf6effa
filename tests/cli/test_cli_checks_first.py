"""A command's defaults fit the model, and every option is checked against the model (its
layers, heads, positions) before the model runs: an option it cannot take costs no
forward, no generation, no ablation; a --model that names a file names no hub id."""

from __future__ import annotations

from pathlib import Path

import pytest

import attnlab.analysis
import attnlab.models
from attnlab.models._model import Model
from attnlab.viz import _page_size
from checkpoints import smollm2_gguf
from helpers import run_cli

A = "小明是个运动达人，小红是个音乐迷，他平时很爱打篮球"


def never(what: str):
    """A stand-in for work that must not start: it fails the test if called."""

    def called(*_args, **_kwargs):
        raise AssertionError(f"{what} ran before the options were checked")

    return called


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GPT-2 with a head to the vocabulary (ablate's, --generate's) and a tokenizer."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from checkpoints import tiny_checkpoint_with_tokenizer

    return tiny_checkpoint_with_tokenizer(tmp_path_factory.mktemp("checks-first"))


def test_heads_default_repeat_fits_a_model_of_few_positions(capsys) -> None:
    # builtin:coref has 64 positions: [CLS] + 2n tokens take n ≤ 31, fewer than the default's 50
    code, out, err = run_cli(capsys, "heads", "--model", "builtin:coref")
    assert code == 0, err
    assert "induction on 31 random tokens twice" in out


def test_the_help_says_what_repeat_s_default_follows(capsys) -> None:
    code, out, _ = run_cli(capsys, "heads", "--help")
    assert code == 0 and "default: 50, or the most the model's" in " ".join(out.split())


def test_view_rollout_refuses_layer_before_the_model_loads_or_generates(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(attnlab.models, "load", never("the model's load"))
    argv = ["view", "--model", str(smollm2_gguf()), "--text", "The cat sat on the", "--rollout", "--layer", "16,18"]
    code, out, err = run_cli(capsys, *argv, "--generate", "4", "-o", str(tmp_path / "page.html"))
    assert code == 2 and out == ""  # nothing generated, nothing printed
    assert err == "attnlab view: error: --rollout: expected every layer traced (drop --layer), got --layer 16,18\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--heads", "0,9"], "--heads: expected indices in 0..3, got '0,9'"),
        (["--stage", "rollout", "--layer", "5"], "--layer: expected a layer in -2..1, got 5"),
    ],
)
def test_plot_checks_heads_and_the_drawn_layer_before_the_model_runs(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.setattr(Model, "trace", never("the model's forward"))
    code, _, err = run_cli(
        capsys, "plot", "--model", "builtin:coref", "--text", A, *argv, "-o", str(tmp_path / "p.png")
    )
    assert code == 2 and err.endswith(f"error: {message}\n") and err.count("\n") == 1


@pytest.mark.parametrize(("command", "work"), [("heads", "head_types"), ("ablate", "ablate")])
def test_heads_and_ablate_check_their_page_before_the_work(capsys, tmp_path, monkeypatch, gpt2, command, work) -> None:
    monkeypatch.setitem(_page_size.PAGE_LIMITS, "page", 1000)  # a page of this text is over it
    monkeypatch.setattr(attnlab.analysis, work, never(f"analysis.{work}"))
    code, out, err = run_cli(
        capsys, command, "--model", str(gpt2), "--text", "The cat sat", "-o", str(tmp_path / "p.html")
    )
    assert code == 2 and out == ""
    assert "--text: expected a page that a browser opens in a few seconds" in err and err.count("\n") == 1


def test_a_generation_on_transformers_checks_its_page_before_it_generates(capsys, tmp_path, monkeypatch, gpt2) -> None:
    import attnlab.hf

    monkeypatch.setitem(_page_size.PAGE_LIMITS, "page", 1000)
    monkeypatch.setattr(attnlab.hf, "trace_generation", never("the generation"))
    argv = ["view", "--model", str(gpt2), "--backend", "transformers", "--text", "The cat sat", "--generate", "3"]
    code, out, err = run_cli(capsys, *argv, "-o", str(tmp_path / "p.html"))
    assert code == 2 and out == ""
    assert "--text and --generate: expected a page that a browser opens in a few seconds" in err


@pytest.mark.parametrize("command", ["serve", "heads", "view"])
def test_a_gguf_name_that_is_no_file_says_so_and_advises_no_download(capsys, tmp_path, monkeypatch, command) -> None:
    monkeypatch.chdir(tmp_path)  # no SmolLM2-135M-Instruct.Q4_1.gguf here
    view = ["--text", "a", "-o", "p.html"] if command == "view" else []
    code, _, err = run_cli(capsys, command, "--model", "SmolLM2-135M-Instruct.Q4_1.gguf", *view)
    assert code == 2 and err.count("\n") == 1
    assert "--model: expected a checkpoint folder, a .gguf file, builtin:NAME or a hub id, got " in err
    assert err.endswith("'SmolLM2-135M-Instruct.Q4_1.gguf' (no such file)\n") and "download" not in err


def test_view_rollout_too_large_for_the_page_is_refused_before_the_model_runs(capsys, tmp_path, monkeypatch) -> None:
    """By hand: builtin:coref's text A is 27 tokens on 2 layers, within flow's limit (110):
    rollout and flow are 2·4·⌈2·27²·8 / 3⌉ = 31,104 base64 characters."""
    import attnlab.viz._views

    monkeypatch.setattr(attnlab.viz._views, "MAX_VIEWS_BYTES", 31_103)
    monkeypatch.setattr(Model, "trace", never("the model's forward"))
    code, out, err = run_cli(
        capsys, "view", "--model", "builtin:coref", "--text", A, "--rollout", "-o", str(tmp_path / "p.html")
    )
    assert code == 2 and out == ""
    assert err == (
        "attnlab view: error: --rollout: expected at most 0.031103 MB of the views' data, got 0.0311 MB for 27 tokens "
        "on 2 layers; use fewer tokens\n"
    )
