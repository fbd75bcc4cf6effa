"""The README's Python examples run as written and do what they say."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).parent.parent / "README.md"


def test_the_python_examples_run(tmp_path):
    pytest.importorskip("matplotlib")  # al.plot
    from checkpoints import tiny_checkpoint_with_tokenizer

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 3
    # no download here: the models example runs on a tiny GPT-2 in place of the hub's
    checkpoint = tiny_checkpoint_with_tokenizer(tmp_path)
    assert 'models.load("gpt2")' in blocks[1]
    blocks[1] = blocks[1].replace('models.load("gpt2")', f"models.load({str(checkpoint)!r})")
    # the files the examples write go to tmp_path, not to the README's /tmp
    blocks = [block.replace('"/tmp/', f'"{tmp_path}/') for block in blocks]
    results = []
    for block in blocks:
        namespace: dict[str, object] = {}
        exec(compile(block, "README.md", "exec"), namespace)
        results.append(namespace)
    seeing, model, engine = results
    assert "".join(model["trace"].tokens) == "小明是个运动达人，他平时很爱打篮球"
    assert model["last"].weights.shape == (4, 32, 32)
    assert (tmp_path / "weights.png").stat().st_size > 0
    assert str(seeing["html"]).startswith("<!DOCTYPE html>")
    assert np.shape(engine["grad_x_q"]) == (2, 10, 64)
