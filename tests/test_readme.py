"""The README's Python examples run as written and do what they say."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

README = Path(__file__).parent.parent / "README.md"


def test_the_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 2
    results = []
    for block in blocks:
        namespace: dict[str, object] = {}
        exec(compile(block, "README.md", "exec"), namespace)
        results.append(namespace)
    seeing, engine = results
    assert Path("/tmp/weights.png").stat().st_size > 0
    assert str(seeing["html"]).startswith("<!DOCTYPE html>")
    assert np.shape(engine["grad_x_q"]) == (2, 10, 64)
