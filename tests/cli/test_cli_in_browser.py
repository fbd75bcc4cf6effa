"""attnlab view --in-browser on the command line: the page that carries builtin:coref and runs it, named
on stdout with its size; every option it cannot honour and every model it cannot run refused in one
line with exit status 2, a GGUF decoder before its weights load."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest

from attnlab import models
from checkpoints import smollm2_gguf
from helpers import run_cli

SHE = "小明喜欢打球，小红喜欢唱歌，她"


def test_view_in_browser_writes_one_page_that_carries_the_model_and_says_so(capsys, tmp_path):
    page = tmp_path / "typed.html"
    code, out, err = run_cli(capsys, "view", "--model", "builtin:coref", "--text", SHE, "--in-browser", "-o", str(page))
    assert (code, out) == (0, "")
    size = page.stat().st_size / 1e6
    said = (
        f"attnlab view: wrote {page} ({size:.1f} MB): builtin:coref runs in the page; open it in a browser, no server"
    )
    assert err == said + "\n"
    text = page.read_text(encoding="utf-8")
    assert "default-src 'none'" in text and not re.search(r"(src|href)=[\"']?https?:|fetch\(|XMLHttpRequest", text)
    block = re.search(r'<script id="attnlab-model" type="application/json">(.*?)</script>', text, re.S)
    assert block is not None
    spec = json.loads(block.group(1))
    coref = models.load("builtin:coref")
    word = np.frombuffer(base64.b64decode(spec["weights"]["word"]["data"]), "<f4").reshape(
        spec["weights"]["word"]["shape"]
    )
    np.testing.assert_array_equal(word, coref.network.embed.weight.value)  # the checkpoint's own float32 numbers
    assert spec["tokenizer"]["vocab"] == [coref.tokenizer.backend.id_to_token(i) for i in range(101)]
    skeleton = re.search(r'<script id="attnlab-skeleton" type="application/json">(.*?)</script>', text, re.S)
    assert json.loads(skeleton.group(1))["text"] == SHE


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--model", "builtin:coref", "--image", "cat.png"], "--in-browser: expected --model and --text"),
        (["--text", SHE], "--in-browser: expected --model and --text"),
        (
            ["--model", "builtin:coref", "--text", SHE, "--layer", "1"],
            "--layer: not with --in-browser: the page runs every layer",
        ),
        (["--model", "builtin:coref", "--text", SHE, "--rollout"], "--rollout: not with --in-browser"),
        (["--model", "builtin:coref", "--text", SHE, "--text", "他"], "--in-browser: expected one --text"),
    ],
)
def test_view_in_browser_refuses_what_it_cannot_do_in_one_line(capsys, tmp_path, options, message):
    code, out, err = run_cli(capsys, "view", *options, "--in-browser", "-o", str(tmp_path / "p.html"))
    assert (code, out) == (2, "")
    assert err.startswith(f"attnlab view: error: {message}") and err.count("\n") == 1, err
    assert not (tmp_path / "p.html").exists()


def test_view_in_browser_refuses_a_causal_model_before_it_loads(capsys, tmp_path, monkeypatch):
    from attnlab.runner import _open

    monkeypatch.setattr(_open.Checkpoint, "load", lambda *a, **k: pytest.fail("the weights were loaded"))
    gguf = str(smollm2_gguf())
    code, out, err = run_cli(
        capsys, "view", "--model", gguf, "--text", "hi", "--in-browser", "-o", str(tmp_path / "p.html")
    )
    assert (code, out) == (2, "")
    assert err == (
        f"attnlab view: error: --model: expected a BERT encoder with a WordPiece tokenizer whose page fits "
        f"(builtin:coref, all-MiniLM-L6-v2), got {gguf}: a GGUF file's causal decoder; "
        "the page runs BERT encoders only\n"
    )
