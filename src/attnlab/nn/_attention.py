"""attnlab.nn's attention layers: MultiheadSelfAttention (BERT's self-attention on attnlab's
engine) and TransformerBlock (BERT's layer). Each forward returns an :class:`AttentionForward`:
its output, its backward and, with ``need_weights``, the attention weights; the backward
then also takes a gradient on those weights (a loss on the weights themselves).

Padding follows torch's ``key_padding_mask``: (B, L) bool, True for a key to ignore. The
keyword ``key_mask`` (True for a key to keep, the opposite) is deprecated.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .._exceptions import deprecated
from .._validation import Array, fail, positive_int
from ..engine._attention import attention
from ..engine._problem import default_scale
from ..layers._linear import merge_heads, split_heads
from ..layers._module import Backward, Module
from ._layers import LayerNorm, Linear, gelu

__all__ = ["MultiheadSelfAttention", "TransformerBlock"]


class AttentionForward(NamedTuple):
    """What an attention layer's forward returns: the output (B, L, D), its backward
    (``backward(dy, d_weights=None)``) and the weights (B, H, L, L) or None; a
    :class:`~attnlab.layers.Forward` with the weights beside it."""

    output: Array
    backward: Backward
    weights: Array | None


def _padding(key_padding_mask: Array | None, key_mask: Array | None) -> Array | None:
    """The padding mask (True: ignore) from the new keyword or the deprecated ``key_mask``
    (True: keep); raises ArgumentError when both are given."""
    if key_mask is None:
        return key_padding_mask
    if key_padding_mask is not None:
        raise fail("key_mask", "nothing when key_padding_mask is given", "both")
    deprecated("key_mask (True = keep)", "key_padding_mask=~key_mask (True = ignore, as torch's)", stacklevel=3)
    return ~np.asarray(key_mask, dtype=bool)


class MultiheadSelfAttention(Module):
    """Multi-head self-attention as BERT has it: q, k, v projections, attention on
    attnlab's engine (its exact backward), the heads side by side through an output
    projection: y = concat_h(softmax(Q_h·K_hᵀ/√E)·V_h)·W_oᵀ + b_o, x and y (B, L, D), H heads
    of E = D / H. With ``need_weights`` it also returns the weights P (B, H, L, L), and its
    backward then takes their gradient too: dZ = P∘(dP − rowsum(dP∘P)), dQ += scale·dZ·K,
    dK += scale·dZᵀ·Q.

    Not ``attnlab.SelfAttention`` (the seed's single head) nor ``attnlab.MultiheadAttention``
    (torch's module, with separate query, key and value inputs).

    Args:
        dim: D, the width of x.
        heads: H, a divisor of D.
        rng: draws the four projections (:class:`Linear`).
        dtype: the parameters' dtype, float32 or float64 (default float64).

    Raises:
        ArgumentError: ``dim`` or ``heads`` below 1, or ``heads`` not a divisor of ``dim``.
        ArgumentTypeError: either not an integer, or a dtype other than float32 or float64.
    """

    def __init__(self, dim: int, heads: int, *, rng: np.random.Generator, dtype: Any = np.float64) -> None:
        dim, heads = positive_int("dim", dim), positive_int("heads", heads)
        if dim % heads:
            raise fail("heads", f"a divisor of dim {dim}", heads)
        self.heads = heads
        self.query, self.key, self.value, self.out = (Linear(dim, dim, rng=rng, dtype=dtype) for _ in range(4))

    def __call__(self, x: Array, key_mask: Array | None = None, *, key_padding_mask: Array | None = None,
                 need_weights: bool = False) -> AttentionForward:  # fmt: skip
        """x (B, L, D); key_padding_mask (B, L), True for a key to ignore (padding).
        ``key_mask`` (True for a key to keep) is deprecated."""
        padding = _padding(key_padding_mask, key_mask)
        E = x.shape[-1] // self.heads  # x (B, L, D), D = H·E
        projected = [layer(x) for layer in (self.query, self.key, self.value)]
        q, k, v = (split_heads(p.output, self.heads) for p in projected)  # (B, L, D) -> (B, H, L, E)
        mask = None if padding is None else ~padding[:, None, None, :]  # (B, L) -> (B, 1, 1, L), True: may attend
        result = attention(q, k, v, attn_mask=mask, need_weights=need_weights)
        merged = merge_heads(result.output)  # (B, H, L, E) -> (B, L, D)
        out = self.out(merged)
        scale = default_scale(E)

        def backward(dy: Array, d_weights: Array | None = None) -> Array:
            d_merged = split_heads(out.backward(dy), self.heads)  # (B, L, D) -> (B, H, L, E)
            grads = list(result.backward(np.ascontiguousarray(d_merged)))
            if d_weights is not None:  # through the softmax to the scores, then to q and k
                P = result.weights
                if P is None:
                    raise fail("d_weights", "a forward with need_weights=True", "one without")
                d_scores = P * (d_weights - (d_weights * P).sum(axis=-1, keepdims=True))  # (B, H, L, L)
                grads[0] = grads[0] + scale * d_scores @ k
                grads[1] = grads[1] + scale * np.swapaxes(d_scores, -1, -2) @ q
            dx = np.zeros_like(x)
            for grad, p in zip(grads, projected, strict=True):
                dx += p.backward(merge_heads(grad))  # (B, H, L, E) -> (B, L, D)
            return dx

        return AttentionForward(out.output, backward, result.weights)


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
        padding = _padding(key_padding_mask, key_mask)
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
