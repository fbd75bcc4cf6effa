"""attnlab.show and Trace._repr_html_ in a real notebook, run by nbclient on an ipykernel."""

from __future__ import annotations

import html
import re

import pytest

nbformat = pytest.importorskip("nbformat")
NotebookClient = pytest.importorskip("nbclient").NotebookClient

pytestmark = pytest.mark.browser

CELLS = [
    "import numpy as np\nimport attnlab as al\n"
    "trace = al.SelfAttention(4, 3).trace(np.eye(4), tokens=['小', '明', 'a', 'b'])",
    "al.show(trace)",
    "trace",  # the last expression of a cell: Jupyter calls trace._repr_html_()
    "al.MultiheadAttention(4, 2, seed=0, dtype=np.float64).trace(np.eye(4))",
]


def iframe_page(markup: str) -> str:
    """The page inside a sandboxed iframe's srcdoc, unescaped; fails if it is not one."""
    iframe = r'<div><iframe sandbox="allow-scripts allow-downloads" srcdoc="([^"]*)".*</iframe></div>'
    found = re.fullmatch(iframe, markup, re.S)
    assert found, markup[:200]
    return html.unescape(found.group(1))


@pytest.mark.slow
def test_show_and_the_trace_display_the_page_in_a_notebook():
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
    NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    shown = []
    for cell in notebook.cells[1:]:
        (display,) = [o for o in cell.outputs if "text/html" in o.get("data", {})]
        page = iframe_page(display["data"]["text/html"])
        assert page.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in page
        assert "<script src" not in page  # nothing fetched
        shown.append((display, page))
    assert "小" in shown[0][1]
    assert shown[2][0]["data"]["text/plain"].startswith("Trace(L=4, d_model=4, heads=2")


@pytest.mark.slow
def test_a_models_trace_shows_in_a_notebook(tmp_path):
    from checkpoints import SENTENCE, tiny_checkpoint_with_tokenizer

    checkpoint = tiny_checkpoint_with_tokenizer(tmp_path)
    cells = [
        "from attnlab import models\nimport attnlab as al\n"
        f"trace = models.load({str(checkpoint)!r}).trace({SENTENCE!r})",
        "al.show(trace)",
        "trace",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    for cell in notebook.cells[1:]:
        (display,) = [o for o in cell.outputs if "text/html" in o.get("data", {})]
        page = iframe_page(display["data"]["text/html"])
        assert '"model": "' in page and '"layer 1"' in page  # the model's page, both layers
    assert notebook.cells[2].outputs[0]["data"]["text/plain"].startswith("ModelTrace(model=")


@pytest.mark.slow
def test_show_in_browser_displays_the_page_that_runs_the_model_in_a_notebook():
    cells = [
        "import attnlab as al\n"
        "al.show(al.load_model('builtin:coref'), text='小明是个运动达人，他平时很爱打篮球', in_browser=True)"
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    (display,) = [o for o in notebook.cells[0].outputs if "text/html" in o.get("data", {})]
    page = iframe_page(display["data"]["text/html"])
    assert page.startswith("<!DOCTYPE html>") and "default-src 'none'" in page
    assert '<script id="attnlab-model" type="application/json">' in page and '"name": "builtin:coref"' in page
    assert "小明是个运动达人，他平时很爱打篮球" in page  # the text it opens on
