"""A forward whose numbers overflow (finite weights, too large for float32) refused naming the
first layer and step where a NaN or an infinity appeared, with NumPy's overflow warnings
silenced: on attnlab's NumPy models (trace, forward, the CLI) and on a transformers model
traced through attnlab.hf."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from attnlab import ArgumentError, hf, models  # noqa: E402
from attnlab.cli import main  # noqa: E402
from checkpoints import tiny_model  # noqa: E402

D = 32  # tiny_model("gpt2")'s width: c_attn's columns are q (0..D), k (D..2D), v (2D..3D)
IDS = np.array(list(b"hi there"))  # "hi there" in the byte vocabulary below: one id a byte


def _byte_vocabulary(directory: Path) -> None:
    """A byte-level BPE of GPT-2's byte alphabet and no merges: one token a byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    alphabet = {**{b: chr(b) for b in printable}, **{b: chr(256 + n) for n, b in enumerate(others)}}
    vocab = {alphabet[b]: b for b in range(256)} | {"<|endoftext|>": 256}
    (directory / "vocab.json").write_text(json.dumps(vocab))
    (directory / "merges.txt").write_text("#version: 0.2\n")


def _overflowing(directory: Path, query: float | None, key: float | None = None) -> tuple[Path, object]:
    """A tiny GPT-2 (float32) whose layer 0 query (and key) columns are scaled to reach
    ``query`` (and ``key``) at most: finite weights whose products overflow float32."""
    model = tiny_model("gpt2")
    with torch.no_grad():
        weight = model.transformer.h[0].attn.c_attn.weight  # (D, 3D), Conv1D: x @ weight
        for columns, largest in ((slice(0, D), query), (slice(D, 2 * D), key)):
            if largest is not None:
                weight[:, columns] /= weight[:, columns].abs().max()
                weight[:, columns] *= largest
    model.save_pretrained(directory)
    _byte_vocabulary(directory)
    return directory, model


@pytest.fixture(scope="module")
def queries_overflow(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    return _overflowing(tmp_path_factory.mktemp("queries"), 3e38)


@pytest.fixture(scope="module")
def scores_overflow(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    return _overflowing(tmp_path_factory.mktemp("scores"), 1e19, 1e19)


def test_a_trace_whose_queries_overflow_is_refused_naming_the_layer_without_a_warning(queries_overflow):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's RuntimeWarning: overflow (the load's check, the forward)
        model = models.load(queries_overflow[0])
        with pytest.raises(ArgumentError) as caught:
            model.trace("hi there")
        assert caught.value.argument == "text_or_ids"
        assert str(caught.value).startswith(
            "text_or_ids: expected a forward with finite numbers, got +Inf and -Inf in layer 0's queries "
            "(the numbers overflow float32)"
        ), caught.value
        with pytest.raises(ArgumentError, match=r"^input_ids: expected a forward with finite numbers, got .* layer 0"):
            model(IDS)


def test_scores_that_overflow_are_named_as_the_attention_weights(scores_overflow):
    """q and k finite (about 1e19), q·k past float32's 3.4e38: the weights are NaN."""
    model = models.load(scores_overflow[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        weights = r"NaN in layer 0's attention weights at head \d, query \d, key \d \(the scores overflow float32\)$"
        with pytest.raises(ArgumentError, match=weights):
            model.trace("hi there")
        with pytest.raises(ArgumentError, match=r"in layer 0's attention output \(the numbers overflow float32\)"):
            model(IDS)  # no weights kept: the output is where it shows


def test_a_finite_forward_is_not_refused(tmp_path):
    path, _ = _overflowing(tmp_path / "plain", None)
    trace = models.load(path).trace("hi there")
    assert all(np.isfinite(layer.weights).all() for layer in trace.layers.values())


@pytest.mark.parametrize("command", ["trace", "heads"])
def test_cli_refuses_an_overflowing_forward_in_one_line(queries_overflow, capsys, command):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main([command, "--model", str(queries_overflow[0]), "--text", "hi there"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attnlab {command}: error: --text: expected a forward with finite numbers, got ")
    assert "layer 0's queries" in err and err.count("\n") == 1, err


def test_hf_trace_refuses_an_overflowing_forward_naming_the_entry(queries_overflow, scores_overflow):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ArgumentError) as caught:
            hf.trace(queries_overflow[1], {"input_ids": torch.tensor(IDS[None])})
        assert caught.value.argument == "text_or_inputs"
        assert "in the queries of attention entry 0 (transformer.h.0.attn)" in str(caught.value), caught.value
        with pytest.raises(ArgumentError, match=r"NaN in the attention weights of attention entry 0 .*scores overflow"):
            hf.trace(scores_overflow[1], {"input_ids": torch.tensor(IDS[None])})
