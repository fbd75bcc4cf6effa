"""attnlab heads: the table and JSON of attnlab.analysis.head_types on both backends, and
bad input as one line with exit status 2. The scores themselves are checked in
tests/analysis/test_head_types.py; here, that the command prints what the library computes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnlab import models
from attnlab.analysis import head_types
from checkpoints import tiny_checkpoint_with_tokenizer
from helpers import run_cli

pytest.importorskip("torch")
pytest.importorskip("transformers")

TEXT = "The cat sat on the mat, and the dog sat on the log."


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_checkpoint_with_tokenizer(tmp_path_factory.mktemp("heads_cli"))


def test_the_table_is_the_library_s_result(capsys: pytest.CaptureFixture[str], checkpoint: Path) -> None:
    code, out, err = run_cli(
        capsys, "heads", "--model", str(checkpoint), "--text", TEXT, "--repeat", "10", "--top", "2"
    )
    assert code == 0, err
    assert "ran in attnlab's NumPy model" in err
    expected = head_types(models.load(checkpoint), TEXT, repeat=10, seed=0)
    header, _, table = out.strip().partition("\n")
    expected_header, _, expected_table = expected.render(top=2).partition("\n")
    assert table == expected_table
    assert header == expected_header.replace(str(checkpoint), "gpt2")  # the checkpoint named by its folder
    assert "strongest heads (layer.head score), top 2:" in out and "layer 1" in out


@pytest.mark.parametrize("backend", ["numpy", "transformers"])
def test_json_gives_the_scores_on_either_backend(
    capsys: pytest.CaptureFixture[str], checkpoint: Path, backend: str
) -> None:
    argv = ["heads", "--model", str(checkpoint), "--text", TEXT, "--repeat", "8", "--seed", "4", "--backend", backend]
    code, out, err = run_cli(capsys, *argv, "--format", "json", "--threshold", "0.2")
    assert code == 0, err
    data = json.loads(out)
    assert data["kinds"] == ["previous", "induction", "sink", "self"] and data["threshold"] == 0.2
    expected = head_types(models.load(checkpoint), TEXT, repeat=8, seed=4)
    assert data["repeat_ids"] == expected.repeat_ids
    for kind in data["kinds"]:
        np.testing.assert_allclose(np.array(data["scores"][kind]), expected.scores[kind], atol=1e-5)
    assert len(data["strongest"]["induction"]) == 3 and np.array(data["dominant"], dtype=object).shape == (2, 4)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--repeat", "30"], "--repeat: expected at most 20 (2n tokens within the model's 40 positions)"),
        (["--text", "a"], "--text: expected at least 2 tokens"),
        (["--top", "0"], "argument --top: expected an integer in 1..1000, got 0"),
        (["--threshold", "2"], "argument --threshold: expected a number in [0, 1], got '2'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], checkpoint: Path, argv: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, "heads", "--model", str(checkpoint), *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err, err


def test_output_writes_the_page_with_each_head_s_kind(
    capsys: pytest.CaptureFixture[str], checkpoint: Path, tmp_path: Path
) -> None:
    page = tmp_path / "heads.html"
    code, _, err = run_cli(
        capsys, "heads", "--model", str(checkpoint), "--text", TEXT, "--repeat", "8", "-o", str(page)
    )
    assert code == 0, err
    html = page.read_text(encoding="utf-8")
    expected = head_types(models.load(checkpoint), TEXT, repeat=8, seed=0).dominant()
    views = json.loads(html.split('<script id="attnlab-views" type="application/json">', 1)[1].split("</script>")[0])
    assert views["head_types"]["dominant"] == expected and views["head_types"]["threshold"] == 0.5
    assert "mountHeadTypes" in html  # the view that draws them (tests/viz/test_views_browser.py opens it)
