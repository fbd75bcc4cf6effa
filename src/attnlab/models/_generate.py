"""Generation with a KV cache: a causal model's text continued token by token.

The prompt runs once; then each new token is one query (B = 1, L = 1) against the cached
keys and values (1, Hk, S, E) of every position before it, with no mask.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import Array, flag
from ..engine._dropout import check_rng
from ._checks import generation_inputs
from ._network import ModelConfig, Network

__all__ = ["generate"]


class _KVCache:
    """Keys and values of the positions seen so far, per layer: (B, Hk, capacity, E),
    of which the first ``length`` positions are filled (the rest is never read)."""

    def __init__(self, config: ModelConfig, batch: int, capacity: int, dtype: np.dtype) -> None:
        shape = (config.num_hidden_layers, batch, config.num_key_value_heads, capacity, config.head_dim)
        self.keys, self.values = np.empty(shape, dtype), np.empty(shape, dtype)
        self.length = 0

    def extend(self, layer: int, k: Array, v: Array) -> tuple[Array, Array]:
        """Append the new positions' k and v (B, Hk, n, E); all keys and values so far."""
        end = self.length + k.shape[2]
        self.keys[layer, :, :, self.length : end] = k
        self.values[layer, :, :, self.length : end] = v
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]


def generate(
    network: Network, ids: Any, steps: int, *, temperature: float = 0.0, rng: Any = None, output_logits: bool = False
) -> Array | tuple[Array, Array]:
    """What :meth:`Model.generate` documents: ``ids`` (L,) followed by up to ``steps`` new
    tokens, with the logits (new, vocab) each was chosen from when ``output_logits``.

    Raises:
        ArgumentError, ArgumentTypeError: a model that is not causal, ids that are not one
            sequence of the vocabulary's ids, a negative ``steps``, a negative
            ``temperature``, a bad ``rng``, more tokens than the model's positions.
    """
    config = network.config
    prompt, steps, temperature = generation_inputs(config, ids, steps, temperature)
    generator = np.random.default_rng(check_rng(rng)) if temperature > 0 else None
    cache = _KVCache(config, 1, len(prompt) + steps, network.embed.dtype)
    tokens, step_input, chosen_from = list(prompt), prompt, []
    for _ in range(steps):
        last = network.forward(step_input[None], None, None, cache, None, None)[:, -1]  # (1, D): the last position's
        logits = network.logits(last)
        assert logits is not None  # every causal model has a head
        chosen_from.append(logits[0])  # (vocab,)
        token = _pick(logits[0], temperature, generator)
        tokens.append(token)
        if token in config.eos_token_id:
            break
        step_input = np.array([token])
    result = np.asarray(tokens, dtype=np.int64)
    if flag("output_logits", output_logits):
        return result, np.stack(chosen_from) if chosen_from else np.zeros((0, config.vocab_size), network.embed.dtype)
    return result


def _pick(logits: Array, temperature: float, generator: np.random.Generator | None) -> int:
    """The next token: argmax, or a draw from softmax(logits / temperature)."""
    if generator is None:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max())
    return int(generator.choice(len(p), p=p / p.sum()))
