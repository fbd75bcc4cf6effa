"""Ablation's forwards on a transformers model, through attnlab's backend: while they run,
the function registered as "attnlab" hands each call's output (B, L, H, Ev) to a hook set
for this context (thread) only, which replaces a head's slice before the module's out
projection; another thread's forwards are untouched."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .._validation import Array, fail, is_integer, text_ids, unicode_text
from ..hf import UnsupportedModelError, check_model
from ..hf._inputs import _labelled
from ..hf._register import on_attnlab, output_hook
from ..hf._torch import from_numpy, model_name, to_numpy, torch

__all__ = ["TransformersRunner"]

Hook = Callable[[Any, Any], Any]  # (module, output (B, L, H, Ev)) -> the output that goes on


class TransformersRunner:
    """One transformers model's forwards for :func:`attnlab.analysis.ablate`; its layers
    are its attention modules in the order a forward calls them."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        check_model(model)
        config = model.config
        if getattr(config, "is_encoder_decoder", False):
            raise UnsupportedModelError(
                f"{config.model_type}: ablate runs decoder-only and encoder-only models; this one is an encoder-decoder"
            )
        self.model, self.tokenizer = model, getattr(tokenizer, "tokenizer", tokenizer)
        self.name = model_name(model)
        self.names = {id(module): name for name, module in model.named_modules()}
        self.order: list[int] = []  # id(module) of each attention call of a forward, found by record
        self.num_layers = self.num_heads = 0
        self.layer_labels: list[str] = []

    def ids(self, text: Any, name: str) -> Array:
        """The ids (L,) of a text (the tokenizer's, special tokens added) or of ids."""
        ids = text
        if isinstance(text, str):
            if self.tokenizer is None:
                raise fail("tokenizer", "the model's tokenizer, to read a text", "None")
            ids = np.asarray(self.tokenizer(unicode_text(name, text))["input_ids"], dtype=np.int64)
        config = self.model.config
        return text_ids(name, text, ids, config.vocab_size, getattr(config, "max_position_embeddings", None))

    def tokens(self, ids: Array) -> list[str]:
        if self.tokenizer is None:
            return [str(i) for i in ids]
        return _labelled(self.tokenizer, [int(i) for i in ids]).tokens

    def target(self, target: Any) -> tuple[int, str]:
        """The target's id and text: a string that is one token, or a token id."""
        vocab = self.model.config.vocab_size
        if is_integer(target):
            if not 0 <= target < vocab:
                raise fail("target", f"a token id in 0..{vocab - 1}", repr(target))
            return int(target), self.tokens(np.array([target]))[0]
        if self.tokenizer is None:
            raise fail("target", "a token id: no tokenizer was given", repr(target))
        ids = self.tokenizer(unicode_text("target", target), add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise fail("target", "one token of the model's vocabulary", f"{target!r}, {len(ids)} tokens")
        return int(ids[0]), str(target)

    def record(self, ids: Array) -> tuple[Array, list[Array]]:
        """One forward's next-token logits at the last position (vocab,) float64 and each
        attention call's head outputs (H, L, Ev); the first call also finds the layers."""
        order: list[int] = []
        outputs: list[Array] = []

        def keep(module: Any, out: Any) -> Any:
            order.append(id(module))
            outputs.append(np.swapaxes(to_numpy(out[0]), 0, 1).copy())  # (L, H, Ev) -> (H, L, Ev)
            return out

        logits = self._logits(ids[None], keep)[0]
        if not self.order:
            if len(set(order)) != len(order):
                raise UnsupportedModelError(
                    f"{self.model.config.model_type}: an attention module ran twice in a forward"
                )
            self.order, self.num_layers, self.num_heads = order, len(order), outputs[0].shape[0]
            self.layer_labels = [self.names.get(i, f"layer {n}") for n, i in enumerate(order)]
        return logits, outputs

    def ablated(self, ids: Array, cells: list[tuple[int, int, Array]]) -> Array:
        """The next-token logits at the last position (B, vocab) of B = len(cells) forwards
        at once, forward b with head cells[b][1] of layer cells[b][0] given the output
        cells[b][2] (L, Ev)."""
        layer_of = {module: layer for layer, module in enumerate(self.order)}
        by_layer: dict[int, list[tuple[int, int, Array]]] = {}
        for b, (layer, head, value) in enumerate(cells):
            by_layer.setdefault(layer, []).append((b, head, value))

        def replace(module: Any, out: Any) -> Any:
            layer = layer_of.get(id(module))
            if layer not in by_layer:
                return out
            out = out.clone()
            for b, head, value in by_layer[layer]:
                out[b, :, head] = from_numpy(value, out)  # (L, Ev) into (B, L, H, Ev)
            return out

        return self._logits(np.repeat(ids[None], len(cells), axis=0), replace)  # (L,) -> (B, L)

    def _logits(self, ids: Array, hook: Hook) -> Array:
        with _wrapped(self.model, hook):
            result = self.model(input_ids=torch.from_numpy(ids))
        logits = getattr(result, "logits", None)
        if logits is None:
            kind = type(self.model).__name__
            raise fail("model", "a model with a language-modelling head (…ForCausalLM, …ForMaskedLM)", kind)
        return to_numpy(logits[:, -1]).astype(np.float64)  # (B, L, vocab) -> (B, vocab)


@contextlib.contextmanager
def _wrapped(model: Any, hook: Hook) -> Iterator[None]:
    """The model on attnlab's backend, in eval mode and without gradients, with ``hook``
    seeing (and able to replace) each of this context's attention calls' output;
    everything restored after."""
    token = output_hook.set(hook)
    try:
        with on_attnlab(model):
            yield
    finally:
        output_hook.reset(token)
