"""The runner (:class:`~._runner.Runner`) of an attnlab model, in NumPy: head outputs are
recorded and replaced through the network's ``Recorder.head_outputs`` hook, at the engine
call's output (B, H, L, Ev), before the out projection."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._validation import Array
from ..models._model import Model
from ..models._network import Recorder
from ..models._statistics import attention_rows, model_statistics
from ..trace import GenerationTrace, ModelStatistics, ModelTrace
from ._runner import Cells, Check, Prompting, Runner, ordinary_ids, token_ids

__all__ = ["NumpyRunner"]


class NumpyRunner(Runner):
    """An :class:`attnlab.models.Model` as the library runs it; ``description``: its
    model type (:func:`attnlab.load_model` says what a GGUF file holds)."""

    backend = "numpy"

    def __init__(self, model: Model, description: str | None = None) -> None:
        config = model.config
        self.model, self.tokenizer, self.name = model, None, model.name
        self.description = description or config.model_type
        self.vocab_size, self.positions = config.vocab_size, config.max_position_embeddings
        self.layers = self.num_layers = config.num_hidden_layers
        self.heads = self.num_heads = config.num_attention_heads
        self.layer_labels = [f"layer {i}" for i in range(self.num_layers)]
        self.has_head = model.network.head is not None
        self.causal = config.causal
        self.head_width = config.head_dim
        bos = sorted(i for i in token_ids(config.raw.get("bos_token_id")) if i < self.vocab_size)[:1]
        tokenizer = model.tokenizer
        first = [] if tokenizer is None else [int(i) for i in tokenizer.encode("")[:1] if tokenizer.is_special(i)]
        self.prefix = bos or first  # the config's BOS, else the first special token of an empty text ([CLS])

    def encode(self, text: str, name: str) -> list[int]:
        if self.model.tokenizer is None:
            self.refuse_no_tokenizer(name)
        return [int(i) for i in self.model.tokenizer.encode(text)]

    def plain_ids(self, text: str) -> list[int]:
        if self.model.tokenizer is None:
            self.refuse_no_tokenizer("target")
        return [int(i) for i in self.model.tokenizer.encode(text, add_special_tokens=False)]

    def tokens(self, ids: Array) -> list[str]:
        tokenizer = self.model.tokenizer
        return tokenizer.readable(ids) if tokenizer is not None else [str(i) for i in ids]

    def ordinary(self) -> Array:
        config, tokenizer = self.model.config, self.model.tokenizer
        excluded = {*self.prefix, *config.eos_token_id}
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            excluded |= token_ids(config.raw.get(key))
        if tokenizer is None:
            return ordinary_ids(self.vocab_size, excluded, [None] * self.vocab_size)
        size = min(self.vocab_size, tokenizer.vocab_size)
        entries = [tokenizer.backend.id_to_token(i) for i in range(size)]
        return ordinary_ids(size, excluded | set(tokenizer.special_ids), entries)

    def attention(self, ids: list[int]) -> tuple[list[str], list[bool], Array]:
        output = self.model(np.asarray(ids), output_attentions=True)
        weights = np.stack(output.attentions).astype(np.float64)  # layers × (H, L, L) -> (layers, H, L, L)
        tokenizer = self.model.tokenizer
        if tokenizer is None:
            return [str(i) for i in ids], [], weights
        return tokenizer.readable(ids), [tokenizer.is_special(i) for i in ids], weights

    def record(self, ids: Array) -> tuple[Array, list[Array]]:
        outputs: list[Array] = []

        def keep(layer: int, out: Array) -> Array:
            outputs.append(out[0].copy())  # (1, H, L, Ev) -> (H, L, Ev)
            return out

        return self._logits(ids[None], keep)[0], outputs

    def ablated(self, ids: Array, cells: Cells) -> Array:
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

    def _trace(self, text: Any, layers: Any, check: Check, how: Prompting) -> ModelTrace:
        return self.model.trace(text, layers=layers, truncation=how.truncation, chat=how.chat, check=check)

    def _statistics(self, text: Any, sizes: dict[str, Any], check: Check, how: Prompting) -> ModelStatistics:
        return model_statistics(self.model, text, **sizes, truncation=how.truncation, chat=how.chat, check=check)

    def _rows(self, ids: Array, layer: int, query: int, check: Check) -> Array:
        return attention_rows(self.model, ids, layer, query, check)

    def check_one_stack(self) -> None:
        """attnlab's models are one stack (decoder-only or encoder-only): nothing to refuse."""

    def _generation(
        self, text: str, count: int, check: Check, layers: Any, how: Prompting, progress: bool
    ) -> GenerationTrace:
        return self.model.trace_generation(text, count, layers=layers, **how._asdict(), progress=progress, check=check)

    def _marked(self, full: ModelTrace, text: str, generated: int, how: Prompting) -> ModelTrace:
        from ..models._checks import sequence_ids

        prompt = sequence_ids(self.model.config, self.model.tokenizer, text, **how._asdict())
        full.template = (prompt.template or [False] * len(prompt.ids)) + [False] * generated
        full.notes = [*full.notes, *prompt.notes]
        return full

    def _logits(self, ids: Array, hook: Callable[[int, Array], Array]) -> Array:
        """The last position's logits (B, vocab) float64 of ids (B, L), ``hook`` seeing each
        layer's head outputs (B, H, L, Ev)."""
        self.check_head()
        network = self.model.network
        last = network.forward(ids, None, None, None, Recorder(head_outputs=hook), None)  # (B, L, D)
        logits = network.logits(last[:, -1])  # (B, D) -> (B, vocab)
        assert logits is not None  # has_head
        return logits.astype(np.float64)
