"""Ablation's forwards on attnlab's NumPy models: each head's output is replaced through
the network's ``Recorder.head_outputs`` hook, at the engine call's output (B, H, L, Ev),
before the out projection."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import Array, fail, is_integer, text_ids
from ..models._model import Model
from ..models._network import Recorder

__all__ = ["NumpyRunner"]


class NumpyRunner:
    """One NumPy model's forwards for :func:`attnlab.analysis.ablate`."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.name = model.name
        config = model.config
        self.num_layers, self.num_heads = config.num_hidden_layers, config.num_attention_heads
        self.layer_labels = [f"layer {i}" for i in range(self.num_layers)]
        if model.network.head is None:
            raise fail("model", "a model with a head to the vocabulary (logits)", f"{model.name}, which has none")

    def ids(self, text: Any, name: str) -> Array:
        """The ids (L,) of a text (the tokenizer's, special tokens added) or of ids."""
        tokenizer, config = self.model.tokenizer, self.model.config
        ids = text
        if isinstance(text, str):
            if tokenizer is None:
                raise fail(name, "token ids: this checkpoint has no tokenizer", "a text")
            ids = np.asarray(tokenizer.encode(text), dtype=np.int64)
        return text_ids(name, text, ids, config.vocab_size, config.max_position_embeddings)

    def tokens(self, ids: Array) -> list[str]:
        tokenizer = self.model.tokenizer
        return tokenizer.readable(ids) if tokenizer is not None else [str(i) for i in ids]

    def target(self, target: Any) -> tuple[int, str]:
        """The target's id and text: a string that is one token, or a token id."""
        tokenizer, vocab = self.model.tokenizer, self.model.config.vocab_size
        if is_integer(target):
            if not 0 <= target < vocab:
                raise fail("target", f"a token id in 0..{vocab - 1}", repr(target))
            return int(target), self.tokens(np.array([target]))[0]
        if tokenizer is None:
            raise fail("target", "a token id: this checkpoint has no tokenizer", repr(target))
        ids = tokenizer.encode(target, add_special_tokens=False)
        if len(ids) != 1:
            raise fail("target", "one token of the model's vocabulary", f"{target!r}, {len(ids)} tokens")
        return int(ids[0]), str(target)

    def record(self, ids: Array) -> tuple[Array, list[Array]]:
        """One forward's next-token logits at the last position (vocab,) float64 and every
        layer's head outputs (H, L, Ev)."""
        outputs: list[Array] = []

        def keep(layer: int, out: Array) -> Array:
            outputs.append(out[0].copy())  # (1, H, L, Ev) -> (H, L, Ev)
            return out

        return self._logits(ids[None], keep)[0], outputs

    def ablated(self, ids: Array, cells: list[tuple[int, int, Array]]) -> Array:
        """The next-token logits at the last position (B, vocab) of B = len(cells) forwards
        at once, forward b with head cells[b][1] of layer cells[b][0] given the output
        cells[b][2] (L, Ev)."""
        by_layer: dict[int, list[tuple[int, int, Array]]] = {}
        for b, (layer, head, value) in enumerate(cells):
            by_layer.setdefault(layer, []).append((b, head, value))

        def replace(layer: int, out: Array) -> Array:
            if layer not in by_layer:
                return out
            out = out.copy()
            for b, head, value in by_layer[layer]:
                out[b, head] = value
            return out

        return self._logits(np.repeat(ids[None], len(cells), axis=0), replace)  # (L,) -> (B, L)

    def _logits(self, ids: Array, hook: Any) -> Array:
        network = self.model.network
        last = network.forward(ids, None, None, None, Recorder(head_outputs=hook), None)  # (B, L, D)
        logits = network.logits(last[:, -1])  # (B, D) -> (B, vocab)
        assert logits is not None  # checked in __init__
        return logits.astype(np.float64)
