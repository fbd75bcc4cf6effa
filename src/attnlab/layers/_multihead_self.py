"""The multi-head self-attention layer of nn and of the pretrained models: four
:class:`~attnlab.layers.Linear` projections (query, key, value, out), H query heads over
Hk key/value heads and the scores' scale. nn draws it and trains it through its forward
and backward (:meth:`MultiheadSelfAttention.__call__`); a pretrained model's block holds one
over its memory-mapped weights (:meth:`MultiheadSelfAttention.of`) and runs its projections
(:meth:`~MultiheadSelfAttention.project`, :meth:`~MultiheadSelfAttention.merge`) around
the engine, with RoPE, a KV cache and a window between them (``models._network.Block``).

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
from ._linear import Linear, merge_heads, split_heads
from ._module import Backward, Module

__all__ = ["AttentionForward", "MultiheadSelfAttention", "padding_mask"]


class AttentionForward(NamedTuple):
    """What an attention layer's forward returns: the output (B, L, D), its backward
    (``backward(dy, d_weights=None)``) and the weights (B, H, L, L) or None; a
    :class:`~attnlab.layers.Forward` with the weights beside it."""

    output: Array
    backward: Backward
    weights: Array | None


def padding_mask(key_padding_mask: Array | None, key_mask: Array | None) -> Array | None:
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

    query: Linear
    key: Linear
    value: Linear
    out: Linear
    heads: int  # H, the query heads
    kv_heads: int  # Hk, the key and value heads (H but under grouped-query attention)
    scale: float  # the scores' multiplier

    def __init__(self, dim: int, heads: int, *, rng: np.random.Generator, dtype: Any = np.float64) -> None:
        dim, heads = positive_int("dim", dim), positive_int("heads", heads)
        if dim % heads:
            raise fail("heads", f"a divisor of dim {dim}", heads)
        self.heads = self.kv_heads = heads
        self.scale = default_scale(dim // heads)
        self.query, self.key, self.value, self.out = (Linear(dim, dim, rng=rng, dtype=dtype) for _ in range(4))

    @classmethod
    def of(cls, projections: tuple[Linear, Linear, Linear, Linear], *, heads: int, kv_heads: int,
           scale: float) -> MultiheadSelfAttention:  # fmt: skip
        """The layer over given projections (a pretrained model's weights, used as they are).

        Args:
            projections: query (D -> H·E), key and value (D -> Hk·E), out (H·E -> D).
            heads: H.
            kv_heads: Hk, a divisor of H (grouped-query attention where below H).
            scale: the scores' multiplier (the checkpoint's, 1/√E for most).
        """
        layer = cls.__new__(cls)
        layer.query, layer.key, layer.value, layer.out = projections
        layer.heads, layer.kv_heads, layer.scale = heads, kv_heads, scale
        return layer

    def project(self, h: Array) -> tuple[Array, Array, Array]:
        """q (B, H, L, E), k and v (B, Hk, L, E), with no backward kept (a pretrained model's).

        Args:
            h: the hidden states (B, L, D).
        """
        q = split_heads(self.query.infer(h), self.heads)  # (B, L, H·E) -> (B, H, L, E)
        k = split_heads(self.key.infer(h), self.kv_heads)  # (B, L, Hk·E) -> (B, Hk, L, E)
        v = split_heads(self.value.infer(h), self.kv_heads)  # (B, L, Hk·E) -> (B, Hk, L, E)
        return q, k, v

    def merge(self, out: Array) -> Array:
        """The heads' outputs side by side through the out projection, (B, L, D), with no backward kept.

        Args:
            out: the heads' outputs (B, H, L, E).
        """
        return self.out.infer(merge_heads(out))  # (B, H, L, E) -> (B, L, H·E) -> (B, L, D)

    def __call__(self, x: Array, key_mask: Array | None = None, *, key_padding_mask: Array | None = None,
                 need_weights: bool = False) -> AttentionForward:  # fmt: skip
        """x (B, L, D); key_padding_mask (B, L), True for a key to ignore (padding).
        ``key_mask`` (True for a key to keep) is deprecated.

        Raises:
            ArgumentError: both masks; a layer of fewer key/value heads than query heads
                (a pretrained model's, :meth:`of`), which this forward does not train.
        """
        padding = padding_mask(key_padding_mask, key_mask)
        if self.kv_heads != self.heads:
            raise fail("kv_heads", f"the {self.heads} query heads (grouped-query attention is run, not trained)",
                       self.kv_heads)  # fmt: skip
        projected = [layer(x) for layer in (self.query, self.key, self.value)]
        q, k, v = (split_heads(p.output, self.heads) for p in projected)  # (B, L, D) -> (B, H, L, E)
        mask = None if padding is None else ~padding[:, None, None, :]  # (B, L) -> (B, 1, 1, L), True: may attend
        result = attention(q, k, v, attn_mask=mask, scale=self.scale, need_weights=need_weights)
        merged = merge_heads(result.output)  # (B, H, L, E) -> (B, L, D)
        out = self.out(merged)

        def backward(dy: Array, d_weights: Array | None = None) -> Array:
            d_merged = split_heads(out.backward(dy), self.heads)  # (B, L, D) -> (B, H, L, E)
            grads = list(result.backward(np.ascontiguousarray(d_merged)))
            if d_weights is not None:  # through the softmax to the scores, then to q and k
                P = result.weights
                if P is None:
                    raise fail("d_weights", "a forward with need_weights=True", "one without")
                d_scores = P * (d_weights - (d_weights * P).sum(axis=-1, keepdims=True))  # (B, H, L, L)
                grads[0] = grads[0] + self.scale * d_scores @ k
                grads[1] = grads[1] + self.scale * np.swapaxes(d_scores, -1, -2) @ q
            dx = np.zeros_like(x)
            for grad, p in zip(grads, projected, strict=True):
                dx += p.backward(merge_heads(grad))  # (B, H, L, E) -> (B, L, D)
            return dx

        return AttentionForward(out.output, backward, result.weights)
