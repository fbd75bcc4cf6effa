"""attnlab evict: the table, JSON and figures of attnlab.analysis.evict, and bad input as
one line with exit status 2. The replay itself is checked in tests/analysis/test_eviction.py;
here, that the command prints and writes what the library computes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnlab import load_model
from attnlab.analysis import evict
from checkpoints import tiny_checkpoint_with_tokenizer
from helpers import run_cli

pytest.importorskip("torch")
pytest.importorskip("transformers")

TEXT = "The cat sat on the mat, and the dog sat on the log."
SETTINGS = ["--generate", "4", "--sinks", "1", "--window", "2", "--kernel", "3", "--budgets", "25,50"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_checkpoint_with_tokenizer(tmp_path_factory.mktemp("evict_cli"))


def test_the_table_json_and_figures_are_the_library_s_result(
    capsys: pytest.CaptureFixture[str], checkpoint: Path, tmp_path: Path
) -> None:
    out_dir = tmp_path / "eviction"
    code, out, err = run_cli(
        capsys, "evict", "--model", str(checkpoint), "--text", TEXT, *SETTINGS, "--out", str(out_dir)
    )
    assert code == 0, err
    expected = evict(load_model(checkpoint), TEXT, budgets=[0.25, 0.5], generate=4, sinks=1, window=2, kernel=3)
    assert out.strip() == expected.render()
    assert "wrote eviction.md, eviction.json, error.png, kept-25.png, kept-50.png" in err
    data = json.loads((out_dir / "eviction.json").read_text(encoding="utf-8"))
    np.testing.assert_allclose(np.array(data["kl"]), expected.kl, rtol=1e-6, atol=1e-12)
    assert [row["policy"] for row in data["rows"]] == ["streaming_llm"] * 2 + ["h2o"] * 2 + ["snapkv"] * 2
    for name in ("error.png", "kept-25.png", "kept-50.png"):
        assert (out_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tokens_and_a_text_file_give_the_prompt(
    capsys: pytest.CaptureFixture[str], checkpoint: Path, tmp_path: Path
) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(TEXT * 3, encoding="utf-8")
    argv = ["--text-file", str(prompt), "--tokens", "12", "--policies", "h2o", "--format", "json"]
    code, out, err = run_cli(capsys, "evict", "--model", str(checkpoint), *argv, *SETTINGS)
    assert code == 0, err
    assert json.loads(out)["prompt"] == 12


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--text", TEXT, "--budgets", "0"], "argument --budgets: expected percents in (0, 100]"),
        (["--text", TEXT, "--policies", "lru"], "argument --policies: expected distinct names among"),
        (["--text", TEXT, "--window", "9", "--budgets", "25"], "--window: expected 1 to"),
        (["--text", TEXT, "--sinks", "8", "--budgets", "25"], "--budgets: expected more keys than the 8 sinks"),
        (["--text", TEXT * 4], "--text: expected at most 40 tokens"),
        (["--text", TEXT, "--generate", "20"], "--generate: expected at most 11 tokens after the 29"),
        (["--text-file", "/nonexistent/prompt.txt"], "/nonexistent/prompt.txt: cannot read"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], checkpoint: Path, argv: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, "evict", "--model", str(checkpoint), "--generate", "4", *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err, err


def test_a_file_that_is_not_utf8_is_refused(
    capsys: pytest.CaptureFixture[str], checkpoint: Path, tmp_path: Path
) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_bytes(b"caf\xe9")
    code, _, err = run_cli(capsys, "evict", "--model", str(checkpoint), "--text-file", str(prompt))
    assert code == 2 and "--text-file: " in err and "expected UTF-8 text, got a byte 0xe9" in err
