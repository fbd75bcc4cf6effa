"""What the commands write of a local checkpoint names it by its folder, never by its path:
trace's text and JSON, view's page, heads' table, JSON and page, plot's picture (its words and
metadata), on either backend. Nothing attnlab writes holds a folder of the machine (tmp_path here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoints import tiny_checkpoint_with_tokenizer
from helpers import run_cli

pytest.importorskip("torch")
pytest.importorskip("transformers")

TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GPT-2 in a folder named gpt2, deep in the machine's temporary folders."""
    return tiny_checkpoint_with_tokenizer(tmp_path_factory.mktemp("names"))


def machine_folder(checkpoint: Path) -> str:
    """The folder above the checkpoint's: what no output may show."""
    return str(checkpoint.parent)


@pytest.mark.parametrize("backend", ["numpy", "transformers"])
def test_trace_names_the_checkpoint_by_its_folder_in_text_and_json(capsys, checkpoint: Path, backend: str) -> None:
    argv = ["trace", "--model", str(checkpoint), "--text", TEXT, "--backend", backend]
    code, out, err = run_cli(capsys, *argv, "--lang", "en", "--precision", "1")
    assert code == 0, err
    assert machine_folder(checkpoint) not in out and "\ngpt2, " in out  # its entries, "gpt2, layer 1 of 2"
    code, out, err = run_cli(capsys, *argv, "--format", "json")
    assert code == 0, err
    assert machine_folder(checkpoint) not in out and json.loads(out)["model"] == "gpt2"


@pytest.mark.parametrize("backend", ["numpy", "transformers"])
def test_view_s_page_names_the_checkpoint_by_its_folder(capsys, checkpoint: Path, tmp_path: Path, backend: str) -> None:
    page = tmp_path / "page.html"
    code, _, err = run_cli(
        capsys, "view", "--model", str(checkpoint), "--text", TEXT, "--backend", backend, "-o", str(page)
    )
    assert code == 0, err
    html = page.read_text(encoding="utf-8")
    assert machine_folder(checkpoint) not in html and '"model": "gpt2"' in html


@pytest.mark.parametrize("backend", ["numpy", "transformers"])
def test_heads_header_json_and_page_name_the_checkpoint_by_its_folder(
    capsys, checkpoint: Path, tmp_path: Path, backend: str
) -> None:
    argv = ["heads", "--model", str(checkpoint), "--text", TEXT, "--repeat", "4", "--backend", backend]
    page = tmp_path / "heads.html"
    code, out, err = run_cli(capsys, *argv, "-o", str(page))
    assert code == 0, err
    assert machine_folder(checkpoint) not in out and out.startswith("head types of gpt2 (2 layers × 4 heads)")
    assert machine_folder(checkpoint) not in page.read_text(encoding="utf-8")
    code, out, err = run_cli(capsys, *argv, "--format", "json")
    assert code == 0, err
    assert machine_folder(checkpoint) not in out and json.loads(out)["model"] == "gpt2"


def test_plot_names_the_checkpoint_by_its_folder(capsys, checkpoint: Path, tmp_path: Path) -> None:
    matplotlib = pytest.importorskip("matplotlib")
    drawing = tmp_path / "heads.svg"  # its metadata and, with svg.fonttype none, its words as text
    argv = ["plot", "--model", str(checkpoint), "--text", TEXT, "--heads", "0", "-o", str(drawing)]
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        assert run_cli(capsys, *argv)[0] == 0
    svg = drawing.read_text(encoding="utf-8")
    assert machine_folder(checkpoint) not in svg and "gpt2 (gpt2) · 2 layers, 4 heads" in svg
