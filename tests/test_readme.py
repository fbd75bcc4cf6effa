"""The README's Python example runs as written and does what it says; the examples that moved
to the site's guides are run by tests/docs/test_guides.py, and the README's links point at
files that exist."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"


def test_the_python_example_runs(tmp_path):
    pytest.importorskip("matplotlib")  # al.plot
    (block,) = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    block = block.replace('"/tmp/', f'"{tmp_path}/')  # the files it writes go to tmp_path
    namespace: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), namespace)
    trace = namespace["trace"]
    assert trace.tokens == ["我", "爱", "打", "球"] and np.shape(trace.weights) == (4, 4)
    assert (tmp_path / "weights.png").stat().st_size > 0 and (tmp_path / "p.html").stat().st_size > 0
    assert str(namespace["html"]).startswith("<!DOCTYPE html>")


def test_the_links_and_pictures_exist():
    text = README.read_text(encoding="utf-8")
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)]+)\)", text) if not t.startswith("http")]
    assert len(targets) > 15
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, missing


def test_what_it_says_of_builtin_coref_is_what_its_page_shows():
    """The weights the README quotes for 他 are the ones the page opens on, to their 4 digits."""
    from attnlab import models

    text = README.read_text(encoding="utf-8")
    (sentence,) = re.findall(r'attnlab view --model builtin:coref --text "([^"]+)"', text)
    quoted = re.search(r"goes to 小, the first character of 小明,\s+with weight ([\d.]+) \(明 gets ([\d.]+)", text)
    assert quoted is not None
    trace = models.load("builtin:coref").trace(sentence)
    opens = trace.opens
    assert opens is not None and trace.tokens[opens["query"]] == "他"
    row = np.asarray(trace[opens["layer"]].weights[opens["head"]][opens["query"]], dtype=np.float64)  # (L,)
    first, second = trace.tokens.index("小"), trace.tokens.index("明")
    assert (f"{row[first]:.4f}", f"{row[second]:.4f}") == quoted.groups()
    assert row[trace.tokens.index("小", first + 1)] < 1e-4  # 小红's 小
