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
