"""The runner (:class:`~._runner.Runner`) of a transformers model, through attnlab's
backend: while a forward runs, the function registered as "attnlab" hands each attention
call's output (B, L, H, Ev) to a hook set for this context (thread) only, which records it
or replaces a head's slice before the module's out projection; another thread's forwards
are untouched."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .._validation import Array, is_integer, unicode_text
from ..hf import UnsupportedModelError, check_model
from ..hf import trace as hf_trace
from ..hf._inputs import _labelled
from ..hf._register import on_attnlab, output_hook
from ..hf._statistics import attention_rows
from ..hf._statistics import statistics as hf_statistics
from ..hf._torch import from_numpy, model_name, to_numpy, torch
from ..trace import GenerationTrace, ModelStatistics, ModelTrace
from ._runner import Cells, Check, Prompting, Runner, encoder_decoder_refusal, layer_weights, ordinary_ids, token_ids

__all__ = ["TransformersRunner"]

Hook = Callable[[Any, Any], Any]  # (module, output (B, L, H, Ev)) -> the output that goes on


class TransformersRunner(Runner):
    """A transformers model (and its ``tokenizer``) as the library runs it; an ablation's
    layers are its attention modules in the order a forward calls them.

    Raises:
        UnsupportedModelError: a model attnlab's backend cannot run.
    """

    backend = "transformers"

    def __init__(self, model: Any, tokenizer: Any, description: str | None = None) -> None:
        check_model(model)
        config = model.config
        self.model, self.processor = model, tokenizer  # a processor reads an image, its tokenizer a text
        self.tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        if not hasattr(self.tokenizer, "convert_ids_to_tokens"):
            self.tokenizer = None  # an image processor or a feature extractor: no text to read
        self.name = model_name(model)
        self.description = description or str(config.model_type)
        text = config.get_text_config()
        vocab = getattr(config, "vocab_size", None) or getattr(text, "vocab_size", None)
        self.vocab_size = int(vocab) if is_integer(vocab) else 0  # 0: a vision model reads no tokens
        layers, heads = getattr(text, "num_hidden_layers", None), getattr(text, "num_attention_heads", None)
        positions = getattr(config, "max_position_embeddings", None)
        self.layers = int(layers) if is_integer(layers) else None
        self.heads = int(heads) if is_integer(heads) else None
        self.positions = int(positions) if is_integer(positions) else None
        self.has_head = getattr(model, "get_output_embeddings", lambda: None)() is not None
        self.causal = callable(getattr(model, "generate", None))  # with has_head: a causal language model
        width = getattr(text, "head_dim", None) or (getattr(text, "hidden_size", 0) // self.heads if self.heads else 0)
        self.head_width = int(width) if is_integer(width) and width > 0 else None
        self.names = {id(module): name for name, module in model.named_modules()}
        self.order: list[int] = []  # id(module) of each attention call of a forward, found by record
        self.layer_labels = []
        first = getattr(config, "bos_token_id", None)
        if first is None and self.tokenizer is not None:
            first = getattr(self.tokenizer, "bos_token_id", None) or getattr(self.tokenizer, "cls_token_id", None)
        self.prefix = [i for i in token_ids(first) if i < self.vocab_size]

    def encode(self, text: str, name: str) -> list[int]:
        if self.tokenizer is None:
            self.refuse_no_tokenizer(name)
        # verbose=False: a text past the positions is refused by ids(), not warned of on stderr
        return [int(i) for i in self.tokenizer(unicode_text(name, text), verbose=False)["input_ids"]]

    def plain_ids(self, text: str) -> list[int]:
        if self.tokenizer is None:
            self.refuse_no_tokenizer("target")
        ids = self.tokenizer(unicode_text("target", text), add_special_tokens=False, verbose=False)["input_ids"]
        return [int(i) for i in ids]

    def tokens(self, ids: Array) -> list[str]:
        if self.tokenizer is None:
            return [str(i) for i in ids]
        return _labelled(self.tokenizer, [int(i) for i in ids]).tokens

    def ordinary(self) -> Array:
        config, tokenizer = self.model.config, self.tokenizer
        excluded = set(self.prefix)
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            excluded |= token_ids(getattr(config, key, None))
        if tokenizer is None:
            return ordinary_ids(self.vocab_size, excluded, [None] * self.vocab_size)
        size = min(self.vocab_size, len(tokenizer))
        entries = tokenizer.convert_ids_to_tokens(list(range(size)))
        return ordinary_ids(size, excluded | set(tokenizer.all_special_ids), entries)

    def attention(self, ids: list[int]) -> tuple[list[str], list[bool], Array]:
        traced = hf_trace(self.model, {"input_ids": torch.tensor([ids])}, tokenizer=self.tokenizer)
        return list(traced.tokens), list(traced.special), layer_weights(traced)

    def _trace(self, text: Any, layers: Any, check: Check, how: Prompting) -> ModelTrace:
        ids = _is_ids(text)  # else a text, a (source, target) pair, an image or inputs
        if ids:
            self.check_one_stack()  # an encoder-decoder reads a source and a target, not one row of ids
        inputs = {"input_ids": torch.tensor([[int(i) for i in text]])} if ids else text
        return hf_trace(self.model, inputs, tokenizer=self.processor, layers=layers, check=check)

    def _statistics(self, text: Any, sizes: dict[str, Any], check: Check, how: Prompting) -> ModelStatistics:
        inputs = {"input_ids": torch.tensor([[int(i) for i in text]])} if _is_ids(text) else text
        return hf_statistics(self.model, inputs, tokenizer=self.processor, sizes=sizes, check=check)

    def _rows(self, ids: Array, layer: int, query: int, check: Check) -> Array:
        inputs = {"input_ids": torch.tensor([[int(i) for i in ids]])}
        return attention_rows(self.model, inputs, tokenizer=self.processor, layer=layer, query=query, check=check)

    def _generation(
        self, text: str, count: int, check: Check, layers: Any, how: Prompting, progress: bool
    ) -> GenerationTrace:
        from ..hf import trace_generation  # how: refused by trace and generate (check_numpy_only)

        return trace_generation(
            self.model, text, count, tokenizer=self.processor, layers=layers, progress=progress, check=check
        )

    def check_one_stack(self) -> None:
        if getattr(self.model.config, "is_encoder_decoder", False):
            raise encoder_decoder_refusal(self.model.config.model_type)

    def record(self, ids: Array) -> tuple[Array, list[Array]]:
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

    def ablated(self, ids: Array, cells: Cells) -> Array:
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
        """The last position's logits (B, vocab) float64 of ids (B, L), ``hook`` seeing
        each attention call's output (B, L, H, Ev)."""
        with _hooked(self.model, hook):
            result = self.model(input_ids=torch.from_numpy(ids))
        logits = getattr(result, "logits", None)
        if logits is None:
            self.refuse_no_head()
        return to_numpy(logits[:, -1]).astype(np.float64)  # (B, L, vocab) -> (B, vocab)


def _is_ids(text: Any) -> bool:
    """Whether ``text`` is one row of token ids: a list, tuple or 1-D array of whole numbers
    (a tuple of texts is an encoder-decoder's (source, target) pair; an image is 2-D or 3-D)."""
    if isinstance(text, np.ndarray):
        return text.ndim == 1 and text.dtype.kind in "iu"
    return isinstance(text, (list, tuple)) and all(is_integer(i) for i in text)


@contextlib.contextmanager
def _hooked(model: Any, hook: Hook) -> Iterator[None]:
    """The model on attnlab's backend, in eval mode and without gradients, with ``hook``
    seeing (and able to replace) each of this context's attention calls' output;
    everything restored after."""
    token = output_hook.set(hook)
    try:
        with on_attnlab(model):
            yield
    finally:
        output_hook.reset(token)
