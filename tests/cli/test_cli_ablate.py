"""attnlab ablate: the layers × heads table of attnlab.analysis.ablate on both backends,
its JSON, and bad input as one line with exit status 2. The numbers themselves are
checked against transformers in tests/analysis/test_ablate.py; here, that the command
prints what the library computes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from attnlab import models
from attnlab.analysis import ablate
from checkpoints import tiny_checkpoint_with_tokenizer
from helpers import run_cli

pytest.importorskip("torch")
pytest.importorskip("transformers")

TEXT = "The cat sat on the"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_checkpoint_with_tokenizer(tmp_path_factory.mktemp("ablate_cli"))


def test_the_table_is_the_library_s_result(capsys: pytest.CaptureFixture[str], checkpoint: Path) -> None:
    code, out, err = run_cli(capsys, "ablate", "--model", str(checkpoint), "--text", TEXT, "--target", " the")
    assert code == 0, err
    assert "ran in attnlab's NumPy model" in err
    expected = ablate(models.load(checkpoint), TEXT, heads="all", target=" the")
    assert out.strip() == expected.render()
    lines = out.splitlines()
    assert lines[0].startswith("change in log p(' the') at the last position") and len(lines) == 4


@pytest.mark.parametrize("backend", ["numpy", "transformers"])
def test_json_gives_every_field_on_either_backend(
    capsys: pytest.CaptureFixture[str], checkpoint: Path, backend: str
) -> None:
    argv = ["ablate", "--model", str(checkpoint), "--text", TEXT, "--heads", "0:1,1:3", "--backend", backend]
    code, out, err = run_cli(capsys, *argv, "--mode", "mean", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["metric"] == "kl" and data["mode"] == "mean" and data["target"] is None
    effect = np.array(data["effect"], dtype=float)  # None -> nan
    assert effect.shape == (2, 4) and np.isfinite(effect[[0, 1], [1, 3]]).all() and np.isnan(effect[0, 0])
    expected = "transformer.h.0.attn" if backend == "transformers" else "layer 0"
    assert data["layer_labels"][0] == expected


def test_patching_from_the_command_line(capsys: pytest.CaptureFixture[str], checkpoint: Path) -> None:
    argv = ["ablate", "--model", str(checkpoint), "--text", TEXT, "--patch-text", "The cat sat in the"]
    code, out, err = run_cli(capsys, *argv, "--target", " the", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["mode"] == "patch" and len(data["patch_tokens"]) == len(data["tokens"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--target", "cat sat"], r"--target: expected one token of the model's vocabulary, got 'cat sat'"),
        (["--heads", "2:0"], r"--heads: expected distinct \(layer, head\) pairs, layer in 0\.\.1"),
        (["--heads", "0-1"], r"argument --heads: expected 'all' or LAYER:HEAD pairs"),
        (["--patch-text", "The"], r"--patch-text: expected 9 tokens, as many as text"),
        (["--mode", "mean", "--patch-text", TEXT], r"--mode: expected 'zero' \(the default\) with patch_text"),
        (["--mode", "max"], r"argument --mode: invalid choice"),
        (["--text", TEXT * 10], r"--text: expected at most 40 tokens, the model's positions"),
        (["--backend", "transformers", "--target", "cat sat"], r"--target: expected one token"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2(
    capsys: pytest.CaptureFixture[str], checkpoint: Path, options: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, "ablate", "--model", str(checkpoint), "--text", TEXT, *options)
    assert code == 2 and out == ""
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert re.search(message, err), err


@pytest.mark.parametrize("backend", ["numpy", "transformers"])
def test_output_writes_the_page_with_the_heatmap(
    capsys: pytest.CaptureFixture[str], checkpoint: Path, tmp_path: Path, backend: str
) -> None:
    page = tmp_path / "heads.html"
    argv = ["ablate", "--model", str(checkpoint), "--text", TEXT, "--target", " the", "--backend", backend]
    code, out, err = run_cli(capsys, *argv, "--format", "json", "-o", str(page))
    assert code == 0, err
    html = page.read_text(encoding="utf-8")
    views = json.loads(re.search(r'<script id="attnlab-views" type="application/json">(.*?)</script>', html, re.S)[1])
    assert views["ablation"]["effect"] == json.loads(out)["effect"]  # the page's heatmap is the printed table


def test_output_refuses_a_path_that_is_not_a_page(capsys: pytest.CaptureFixture[str], checkpoint: Path) -> None:
    code, _, err = run_cli(capsys, "ablate", "--model", str(checkpoint), "--text", TEXT, "-o", "heads.png")
    assert code == 2 and "heads.png" in err and len(err.strip().splitlines()) == 1
