"""Generation with a KV cache: a causal model's text continued token by token.

The prompt runs once; then each new token is one query (B = 1, L = 1) against the cached
keys and values (1, Hk, S, E) of every position before it, with no mask.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .._validation import Array, fail, flag
from ..engine._dropout import check_rng
from ._checks import generation_inputs
from ._network import ModelConfig, Network, Recorder

__all__ = ["KVCache", "generate"]


class KVCache:
    """Keys and values of the positions seen so far, per layer: (B, Hk, capacity, E),
    of which the first ``length`` positions are filled (the rest is never read); setting
    ``length`` back rewinds it (the next forward overwrites the positions after it)."""

    def __init__(self, config: ModelConfig, batch: int, capacity: int, dtype: np.dtype, steps: int) -> None:
        shape = (config.num_hidden_layers, batch, config.num_key_value_heads, capacity, config.head_dim)
        try:
            self.keys, self.values = np.empty(shape, dtype), np.empty(shape, dtype)
        except MemoryError:  # the cache holds every position: the prompt's and max_new_tokens
            size = 2 * math.prod(shape) * np.dtype(dtype).itemsize
            raise fail(
                "max_new_tokens", "few enough tokens for the KV cache to fit in memory",
                f"{steps} (a cache of {capacity} positions needs {size / 2**30:.4g} GiB)",
            ) from None  # fmt: skip
        self.length = 0

    def extend(self, layer: int, k: Array, v: Array) -> tuple[Array, Array]:
        """Append the new positions' k and v (B, Hk, n, E); all keys and values so far."""
        end = self.length + k.shape[2]
        self.keys[layer, :, :, self.length : end] = k
        self.values[layer, :, :, self.length : end] = v
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]


def generate(
    network: Network, ids: Any, steps: int, *, temperature: float = 0.0, rng: Any = None, output_logits: bool = False,
    rows: list[list[Array]] | None = None, on_token: Callable[[], object] | None = None,
    check: Callable[[], object] | None = None,
) -> Array | tuple[Array, Array]:  # fmt: skip
    """What :meth:`Model.generate` documents: ``ids`` (L,) followed by up to ``steps`` new
    tokens, with the logits (new, vocab) each was chosen from when ``output_logits``.
    ``rows``, when given, gets one list per step of every layer's weights (H, S) of the
    step's last query, the one that chose the step's token (the recording hook of
    :meth:`Model.trace_generation`: the same forward, its weights kept). ``on_token`` is
    called once after each new token (a progress bar's ``update``); ``check`` before each
    new token's forward (what it raises ends the generation: the live page's, to stop a
    request its page replaced or left).

    Raises:
        ArgumentError, ArgumentTypeError: a model that is not causal, ids that are not one
            sequence of the vocabulary's ids, a negative ``steps``, a negative
            ``temperature``, a bad ``rng``, more tokens than the model's positions, a KV
            cache (every position's keys and values) that cannot be allocated.
    """
    config = network.config
    prompt, steps, temperature = generation_inputs(config, ids, steps, temperature)
    generator = np.random.default_rng(check_rng(rng)) if temperature > 0 else None
    cache = KVCache(config, 1, len(prompt) + steps, network.embed.weight.value.dtype, steps)
    tokens, step_input, chosen_from = list(prompt), prompt, []
    for _ in range(steps):
        if check is not None:
            check()
        record = None if rows is None else Recorder(attentions=True)
        last = network.forward(step_input[None], None, None, cache, record, None)[:, -1]  # (1, D): the last position's
        if record is not None and rows is not None:
            rows.append([weights[0, :, -1] for weights in record.weights])  # (1, H, L, S) -> (H, S)
        logits = network.logits(last)
        assert logits is not None  # every causal model has a head
        chosen_from.append(logits[0])  # (vocab,)
        token = _pick(logits[0], temperature, generator)
        tokens.append(token)
        if on_token is not None:
            on_token()
        if token in config.eos_token_id:
            break
        step_input = np.array([token])
    result = np.asarray(tokens, dtype=np.int64)
    if flag("output_logits", output_logits):
        dtype = network.embed.weight.value.dtype
        return result, np.stack(chosen_from) if chosen_from else np.zeros((0, config.vocab_size), dtype)
    return result


def _pick(logits: Array, temperature: float, generator: np.random.Generator | None) -> int:
    """The next token: argmax, or a draw from softmax(logits / temperature), computed as
    exp((logits − max) / temperature) normalized: the shift comes before the division, so
    that a tiny temperature (5e-324) sends the others to exp(−inf) = 0, not inf − inf."""
    if generator is None:
        return int(np.argmax(logits))
    wide = logits.astype(np.float64)
    with np.errstate(over="ignore"):  # a tiny temperature: (logit − max) / t overflows to −inf, exp to 0
        p = np.exp((wide - wide.max()) / temperature)
    return int(generator.choice(len(p), p=p / p.sum()))
