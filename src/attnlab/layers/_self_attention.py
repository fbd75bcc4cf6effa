"""The seed's self-attention layer in NumPy: the same weights as ``attnlab.reference``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .. import reference
from .._validation import (
    Array,
    fail,
    fits_in_memory,
    float_array,
    int_seed,
    layer_dtype,
    positive_int,
    real_number,
)
from ..engine.variants import Rules
from ..functional import scaled_dot_product_attention
from ..trace._build import build_trace
from ..trace._trace import Trace

__all__ = ["SelfAttention"]

# the bytes of one number the seed's generator draws: a float object (24) and its list's pointer (8); the
# float64 array made of the lists (8) and the layer's copy (its itemsize) come beside them
PYTHON_FLOAT = 32


class SelfAttention:
    """Single-head self-attention, output = softmax(scale · (X·Wq)(X·Wk)ᵀ) · (X·Wv).

    Args:
        d_model: width of each input row.
        d_k: width of Q, K and V (and of the output).
        seed: the weights are drawn exactly as ``attnlab.reference.SelfAttention`` draws
            them (the seed program's ``random.normalvariate(0, std)``, Wq then Wk then
            Wv), so both layers agree to rounding. Default 42.
        std: standard deviation of the draws (default 0.1).
        weights: explicit ``(Wq, Wk, Wv)``, each (d_model, d_k), instead of drawing.
        dtype: float64 (default) or float32.

    ``random_seed`` is ``seed`` where the weights were drawn (None where given): its traces
    carry it, and their pages and plots say the weights are random, not trained.

    Inputs X are (L, d_model) or (B, L, d_model); outputs (…, L, d_k). The forward and the
    trace take the variants that one head has, as :func:`attnlab.attention` does: a
    sliding ``window``, ``causal_alignment`` and ``softcap``.
    """

    def __init__(
        self,
        d_model: int,
        d_k: int,
        *,
        weights: Sequence[ArrayLike] | None = None,
        dtype: DTypeLike = np.float64,
        seed: int = 42,
        std: float = 0.1,
    ) -> None:
        self.d_model = positive_int("d_model", d_model)
        self.d_k = positive_int("d_k", d_k)
        self.dtype = layer_dtype(dtype)
        self.random_seed = int_seed("seed", seed) if weights is None else None  # drawn: its pages and plots say so
        if weights is None:  # drawn in pure Python, as the seed draws them: refused first where they cannot fit
            numbers, per_number = 3 * self.d_model * self.d_k, PYTHON_FLOAT + 8 + self.dtype.itemsize
            how = f"3 × {self.d_model:,} × {self.d_k:,} numbers drawn in Python, about {per_number} bytes each"
            fits_in_memory("d_model, d_k", "weights (Wq, Wk, Wv: d_model × d_k each)", numbers * per_number, how)
            std = real_number("std", std, minimum=0.0)
            layer = reference.SelfAttention(d_model, d_k, seed=int_seed("seed", seed), std=std)
            weights = (layer.Wq, layer.Wk, layer.Wv)
        elif not isinstance(weights, (list, tuple)):
            raise fail("weights", "a (Wq, Wk, Wv) triple", type(weights).__name__, TypeError)
        elif len(weights) != 3:
            raise fail("weights", "a (Wq, Wk, Wv) triple", f"{len(weights)} items")
        arrays = [float_array(f"weights[{i}]", w) for i, w in enumerate(weights)]
        for i, w in enumerate(arrays):
            if w.shape != (d_model, d_k):
                raise fail(f"weights[{i}]", f"shape ({d_model}, {d_k})", f"shape {w.shape}")
        self.Wq, self.Wk, self.Wv = (w.astype(self.dtype) for w in arrays)

    def forward(
        self, X: ArrayLike, *, is_causal: bool = False, scale: float | None = None, rules: Rules | None = None
    ) -> tuple[Array, Array]:
        """Return ``(output, weights)``: (…, L, d_k) and (…, L, L).

        Args:
            X: the input, (…, L, d_model).
            is_causal: token i attends to tokens 0..i only.
            scale: multiplies Q·Kᵀ; default 1/√d_k.
            rules: the variants as one ``engine.variants.Rules`` (a window, a softcap, …),
                as :func:`attnlab.attention` takes it; ``is_causal`` is its keyword, given
                one way or the other.

        Raises:
            ValueError: X's last dimension is not d_model, or a variant that
                :func:`attnlab.attention` refuses.
        """
        _, Q, K, V = _project(self, X)
        return scaled_dot_product_attention(Q, K, V, is_causal=is_causal, scale=scale, need_weights=True, rules=rules)

    __call__ = forward

    def trace(
        self,
        X: ArrayLike,
        *,
        is_causal: bool = False,
        scale: float | None = None,
        tokens: Sequence[str] | None = None,
        rules: Rules | None = None,
    ) -> Trace:
        """Every intermediate of one forward pass of a (L, d_model) input, as a Trace.

        Args:
            X: one sequence, (L, d_model).
            is_causal: token i attends to tokens 0..i only.
            scale: multiplies Q·Kᵀ; default 1/√d_k.
            tokens: L labels of the rows (None: positions).
            rules: the variants, as :meth:`forward` takes them.

        Returns:
            The :class:`Trace`: X, Q, K, V, scores, scaled scores (softcapped, −inf where
            masked), weights and output, and the variants it was built with.

        Raises:
            ValueError: X is not one sequence (L, d_model), tokens not L labels, or a
                variant that :func:`attnlab.attention` refuses.
        """
        X, Q, K, V = _project(self, X)
        if X.ndim != 2:
            raise fail("X", f"one sequence of shape (L, {self.d_model}) to trace", f"shape {X.shape}")
        made = build_trace(X, Q, K, V, scale=scale, is_causal=is_causal, rules=rules, tokens=tokens)
        made.random_seed = self.random_seed  # random (untrained) weights: the page and plot say so
        return made


def _project(layer: SelfAttention, X: Any) -> tuple[Array, Array, Array, Array]:
    """X (…, L, d_model), checked and in the layer's dtype, and its Q, K, V (…, L, d_k)."""
    X = float_array("X", X)
    if X.ndim > 3 or X.shape[-1] != layer.d_model:
        raise fail("X", f"shape (L, {layer.d_model}) or (B, L, {layer.d_model})", f"shape {X.shape}")
    X = X.astype(layer.dtype, copy=False)
    return X, X @ layer.Wq, X @ layer.Wk, X @ layer.Wv  # (…, L, d_k) each
