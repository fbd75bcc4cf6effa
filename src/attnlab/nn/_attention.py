"""attnlab.nn's attention layers: MultiheadSelfAttention (BERT's self-attention on attnlab's
engine, the one layer nn and the pretrained models share: :mod:`attnlab.layers._multihead_self`)
and TransformerBlock (BERT's layer). Each forward returns an :class:`AttentionForward`:
its output, its backward and, with ``need_weights``, the attention weights; the backward
then also takes a gradient on those weights (a loss on the weights themselves).

Padding follows torch's ``key_padding_mask``: (B, L) bool, True for a key to ignore. The
keyword ``key_mask`` (True for a key to keep, the opposite) is deprecated.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import Array, positive_int
from ..layers._module import Module
from ..layers._multihead_self import AttentionForward, MultiheadSelfAttention, padding_mask
from ._layers import LayerNorm, Linear, gelu

__all__ = ["MultiheadSelfAttention", "TransformerBlock"]


class TransformerBlock(Module):
    """BERT's layer: h = LN(x + Attn(x)); y = LN(h + W₂·gelu(W₁·h)), x and y (B, L, D).

    Args:
        dim: D, the width of x.
        heads: H, the attention's heads (a divisor of D).
        hidden: the width of the feed-forward layer (W₁'s output).
        rng: draws every weight.
        dtype: the parameters' dtype (default float64).
        eps: the layer norms' eps (default 1e-12).

    Raises:
        ArgumentError: a width or head count below 1, ``heads`` not a divisor of ``dim``,
            or ``eps`` negative or not finite.
        ArgumentTypeError: a width or head count that is not an integer, or a dtype other
            than float32 or float64.
    """

    def __init__(self, dim: int, heads: int, hidden: int, *, rng: np.random.Generator, dtype: Any = np.float64,
                 eps: float = 1e-12) -> None:  # fmt: skip
        hidden = positive_int("hidden", hidden)
        self.attention = MultiheadSelfAttention(dim, heads, rng=rng, dtype=dtype)
        self.attention_norm = LayerNorm(dim, eps=eps, dtype=dtype)
        self.up = Linear(dim, hidden, rng=rng, dtype=dtype)
        self.down = Linear(hidden, dim, rng=rng, dtype=dtype)
        self.output_norm = LayerNorm(dim, eps=eps, dtype=dtype)

    def __call__(self, x: Array, key_mask: Array | None = None, *, key_padding_mask: Array | None = None,
                 need_weights: bool = False) -> AttentionForward:  # fmt: skip
        """y and its backward(dy, d_weights=None); the attention weights with ``need_weights``.
        key_padding_mask (B, L): True for a key to ignore; ``key_mask`` (True: keep) is deprecated."""
        padding = padding_mask(key_padding_mask, key_mask)
        attended = self.attention(x, key_padding_mask=padding, need_weights=need_weights)
        norm1 = self.attention_norm(x + attended.output)
        up = self.up(norm1.output)
        act = gelu(up.output)
        down = self.down(act.output)
        norm2 = self.output_norm(norm1.output + down.output)

        def backward(dy: Array, d_weights: Array | None = None) -> Array:
            d_sum = norm2.backward(dy)
            dh = d_sum + up.backward(act.backward(down.backward(d_sum)))
            d_first = norm1.backward(dh)
            return d_first + attended.backward(d_first, d_weights)

        return AttentionForward(norm2.output, backward, attended.weights)
