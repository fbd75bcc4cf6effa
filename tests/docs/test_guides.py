"""The user guides' Python examples (the code blocks that the site shows without executing them)
run as written and do what they say."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

GUIDES = Path(__file__).resolve().parents[2] / "docs" / "guides"


def test_the_guides_examples_run(tmp_path):
    pytest.importorskip("matplotlib")  # al.plot
    from checkpoints import tiny_checkpoint_with_tokenizer

    text = "".join((GUIDES / name).read_text(encoding="utf-8") for name in ("models.md", "engine.md"))
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)  # ```python exec="on" ones run when the site is built
    assert len(blocks) == 6
    # no download here: the models example runs on a tiny GPT-2 in place of the hub's, the
    # transformers example on a tiny random Gemma 2 (softcap, sliding window) in place of Gemma 2's
    checkpoint = tiny_checkpoint_with_tokenizer(tmp_path)
    assert 'models.load("gpt2")' in blocks[2]
    blocks[2] = blocks[2].replace('models.load("gpt2")', f"models.load({str(checkpoint)!r})")
    assert blocks[4].count('"google/gemma-2-2b"') == 2
    blocks[4] = blocks[4].replace('"google/gemma-2-2b"', repr(str(_tiny_gemma2(tmp_path, checkpoint))))
    # the files the examples write go to tmp_path, not to the guides' /tmp
    blocks = [block.replace('"/tmp/', f'"{tmp_path}/') for block in blocks]
    results = []
    for block in blocks:
        namespace: dict[str, object] = {}
        exec(compile(block, "docs/guides", "exec"), namespace)
        results.append(namespace)
    seeing, views, model, opened, backend, engine = results
    assert (opened["opened"].backend, opened["opened"].layers, opened["opened"].heads) == ("numpy", 2, 4)
    assert opened["kinds"].scores["previous"].shape == (2, 4)
    assert str(opened["page"]).startswith("<!DOCTYPE html>")
    assert "她" in views["she"].tokens and (tmp_path / "two.html").stat().st_size > 0
    assert (tmp_path / "ablation.html").stat().st_size > 0
    assert backend["trace"].modules[0] == "model.layers.0.self_attn"
    assert backend["trace"][0].Q.shape == (4, len(backend["trace"].tokens), 8)
    assert "".join(model["trace"].tokens) == "小明是个运动达人，他平时很爱打篮球"
    assert model["last"].weights.shape == (4, 32, 32)
    assert (tmp_path / "weights.png").stat().st_size > 0
    assert str(seeing["html"]).startswith("<!DOCTYPE html>")
    assert np.shape(engine["grad_x_q"]) == (2, 10, 64)


def _tiny_gemma2(tmp_path: Path, tokenizer_from: Path) -> Path:
    """A 2-layer Gemma 2 of random weights with softcapping and a window of 4 keys, saved
    with the tiny GPT-2's byte-level tokenizer."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(5)
    config = transformers.Gemma2Config(
        vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, sliding_window=4, attn_logit_softcapping=30.0,
    )  # fmt: skip
    directory = tmp_path / "gemma2"
    transformers.Gemma2ForCausalLM(config).save_pretrained(directory)
    transformers.AutoTokenizer.from_pretrained(tokenizer_from).save_pretrained(directory)
    return directory


def test_the_guides_commands_on_smollm2_find_its_file_where_the_package_put_it():
    """Pasted as written, a guide's command finds SmolLM2's GGUF file: a bare file name
    would name a file in the reader's folder, which holds none."""
    import contextlib
    import io

    for name in ("serve.md", "serve.zh.md", "models.md"):
        text = (GUIDES / name).read_text(encoding="utf-8")
        commands = "".join(re.findall(r"```bash\n(.*?)```", text, re.S))
        assert not re.search(r"--model [\w.-]+\.gguf\b", commands), name
        (finder,) = set(re.findall(r"^SMOL=\$\(python -c '(.+)'\)$", text, re.M))
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(finder, {})
        found = Path(printed.getvalue().strip())
        assert found.is_file() and found.name == "SmolLM2-135M-Instruct.Q4_1.gguf", name
        assert '--model "$SMOL"' in commands, name
