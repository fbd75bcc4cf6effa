"""The tutorial's notebooks: generated from its pages (docs/notebooks/generate.py), up to date
with them, and executed by nbclient on an ipykernel."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
NotebookClient = pytest.importorskip("nbclient").NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "docs" / "notebooks"


def _generator():
    spec = importlib.util.spec_from_file_location("generate_notebooks", NOTEBOOKS / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_notebooks_are_the_tutorials_pages():
    expected = _generator().expected()
    assert sorted(p.name for p in expected) == sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert len(expected) == 4  # two pages, two languages
    stale = [p.name for p, text in expected.items() if p.read_text(encoding="utf-8") != text]
    assert not stale, f"run python docs/notebooks/generate.py: {stale}"
    book = nbformat.reads(expected[NOTEBOOKS / "self-attention-zh.ipynb"], as_version=4)
    assert book.cells[0].cell_type == "markdown" and book.cells[0].source.startswith("# 自注意力")
    assert any(cell.source == "!attnlab demo" for cell in book.cells)  # a shell cell, as Jupyter writes it


@pytest.mark.browser
@pytest.mark.slow  # four notebooks, each on its own kernel: about 40 s on 2 cores
@pytest.mark.parametrize("name", ["self-attention-en", "self-attention-zh", "multi-head-en", "multi-head-zh"])
def test_a_notebook_executes(name, monkeypatch):
    pytest.importorskip("matplotlib")
    # the kernel finds this checkout's attnlab and the `attnlab` command of this Python
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    monkeypatch.delenv("ATTNLAB_SITE_DIR", raising=False)
    book = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    NotebookClient(book, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for cell in book.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    pictures = [
        o for o in outputs if "image/png" in o.get("data", {}) or "<img" in o.get("data", {}).get("text/html", "")
    ]
    assert pictures
    chinese = name.endswith("-zh")  # each notebook prints in its page's language
    if name.startswith("self-attention"):
        assert "[ 0.0576,  0.0910, -0.0678, -0.0103,  0.0031, -0.0566]" in text
        assert ("与文章的程序完全相同：True" if chinese else "the same as the article's program: True") in text
        pages = [o for o in outputs if "srcdoc" in o.get("data", {}).get("text/html", "")]
        assert pages  # al.show(trace): the coref page inline
    else:
        said = (
            "头 1：手算的 softmax(Q·Kᵀ/√d_k) 等于 trace 里的： True"
            if chinese
            else "head 1: softmax(Q·Kᵀ/√d_k) by hand equals the trace: True"
        )
        assert said in text
