"""attnlab.nn's attention layers: MultiheadSelfAttention (BERT's self-attention on attnlab's
engine) and TransformerBlock (BERT's layer). Each forward returns its output, its backward
and, with ``need_weights``, the attention weights; the backward then also takes a gradient
on those weights (a loss on the weights themselves).

Padding follows torch's ``key_padding_mask``: (B, L) bool, True for a key to ignore. The
keyword ``key_mask`` (True for a key to keep, the opposite) is deprecated.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from .._validation import fail, positive_int
from ..engine._attention import attention
from ._layers import Array, Backward, LayerNorm, Linear, Module, gelu

__all__ = ["MultiheadSelfAttention", "TransformerBlock"]


def _padding(key_padding_mask: Array | None, key_mask: Array | None) -> Array | None:
    """The padding mask (True: ignore) from the new keyword or the deprecated ``key_mask``
    (True: keep); raises ArgumentError when both are given."""
    if key_mask is None:
        return key_padding_mask
    if key_padding_mask is not None:
        raise fail("key_mask", "nothing when key_padding_mask is given", "both")
    warnings.warn(
        "key_mask (True = keep) is deprecated: pass key_padding_mask=~key_mask (True = ignore, as torch's)",
        DeprecationWarning,
        stacklevel=3,
    )
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
                 need_weights: bool = False) -> tuple[Array, Backward, Array | None]:  # fmt: skip
        """x (B, L, D); key_padding_mask (B, L), True for a key to ignore (padding).
        ``key_mask`` (True for a key to keep) is deprecated."""
        padding = _padding(key_padding_mask, key_mask)
        B, L, D = x.shape
        E = D // self.heads
        projected = [layer(x) for layer in (self.query, self.key, self.value)]
        q, k, v = (y.reshape(B, L, self.heads, E).transpose(0, 2, 1, 3) for y, _ in projected)  # -> (B, H, L, E)
        mask = None if padding is None else ~padding[:, None, None, :]  # (B, L) -> (B, 1, 1, L), True: may attend
        result = attention(q, k, v, attn_mask=mask, need_weights=need_weights)
        merged = result.output.transpose(0, 2, 1, 3).reshape(B, L, D)  # (B, H, L, E) -> (B, L, D)
        y, out_back = self.out(merged)
        scale = 1.0 / math.sqrt(E)

        def backward(dy: Array, d_weights: Array | None = None) -> Array:
            d_merged = out_back(dy).reshape(B, L, self.heads, E).transpose(0, 2, 1, 3)  # (B, L, D) -> (B, H, L, E)
            grads = list(result.backward(np.ascontiguousarray(d_merged)))
            if d_weights is not None:  # through the softmax to the scores, then to q and k
                P = result.weights
                if P is None:
                    raise fail("d_weights", "a forward with need_weights=True", "one without")
                d_scores = P * (d_weights - (d_weights * P).sum(axis=-1, keepdims=True))  # (B, H, L, L)
                grads[0] = grads[0] + scale * d_scores @ k
                grads[1] = grads[1] + scale * np.swapaxes(d_scores, -1, -2) @ q
            dx = np.zeros_like(x)
            for grad, (_, back) in zip(grads, projected, strict=True):
                dx += back(grad.transpose(0, 2, 1, 3).reshape(B, L, D))  # (B, H, L, E) -> (B, L, D)
            return dx

        return y, backward, result.weights


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
                 need_weights: bool = False) -> tuple[Array, Backward, Array | None]:  # fmt: skip
        """y and its backward(dy, d_weights=None); the attention weights with ``need_weights``.
        key_padding_mask (B, L): True for a key to ignore; ``key_mask`` (True: keep) is deprecated."""
        padding = _padding(key_padding_mask, key_mask)
        a, attention_back, weights = self.attention(x, key_padding_mask=padding, need_weights=need_weights)
        h, norm1_back = self.attention_norm(x + a)
        u, up_back = self.up(h)
        g, gelu_back = gelu(u)
        m, down_back = self.down(g)
        y, norm2_back = self.output_norm(h + m)

        def backward(dy: Array, d_weights: Array | None = None) -> Array:
            d_sum = norm2_back(dy)
            dh = d_sum + up_back(gelu_back(down_back(d_sum)))
            d_first = norm1_back(dh)
            return d_first + attention_back(d_first, d_weights)

        return y, backward, weights
