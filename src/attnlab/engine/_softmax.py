"""Numerically stable softmax along one axis.

softmax(x)_i = exp(x_i − m) / Σ_j exp(x_j − m) with m = max_j x_j, so the largest
exponent is 0 and no finite input overflows. A row with no finite maximum because all
of it is −inf (every key masked) gives all zeros and log-sum-exp −inf, never NaN.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .._validation import Array, compute_dtype, fail, float_array, is_integer

__all__ = ["softmax"]


def softmax_lse_(scores: Array, extra_logits: Array | None = None) -> tuple[Array, Array]:
    """Softmax over the last axis, written into ``scores``; also returns the rows'
    log-sum-exp (shape ``scores.shape[:-1]``). ``extra_logits`` s (the sinks), which
    broadcast to that shape, join every row's sum as one more logit each
    (lse = log(Σ_j e^{Z_j} + e^{s})) and are dropped from the weights."""
    row_max = scores.max(axis=-1, keepdims=True, initial=-np.inf)  # an empty row (S = 0) counts as masked
    if extra_logits is not None:
        row_max = np.maximum(row_max, extra_logits[..., None])
    row_max[np.isneginf(row_max)] = 0.0  # fully masked rows: exp(-inf - 0) = 0
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        np.subtract(scores, row_max, out=scores)
        np.exp(scores, out=scores)
        row_sum = scores.sum(axis=-1, keepdims=True)
        if extra_logits is not None:
            row_sum += np.exp(extra_logits[..., None] - row_max)
        np.multiply(scores, np.where(row_sum == 0, 0.0, 1.0 / row_sum), out=scores)  # all −inf rows: 0
        lse = (row_max + np.log(row_sum))[..., 0]
    return scores, lse


def softmax(x: ArrayLike, axis: int = -1) -> Array:
    """Softmax of ``x`` along ``axis`` (default the last), same shape and dtype.

    Each slice along ``axis`` sums to 1, except a slice that is all −inf, which gives
    zeros (the convention for fully-masked attention rows). float16 is computed in
    float32 and returned as float16.

    Args:
        x: a float array, at least 1-D.
        axis: the axis each softmax runs along (default −1).

    Raises:
        TypeError: ``x`` is not a float array, or ``axis`` not an integer.
        ValueError: ``axis`` is not one of x's axes.
    """
    x = float_array("x", x, min_ndim=1)
    if not is_integer(axis):
        raise fail("axis", "an integer", repr(axis), TypeError)
    if not -x.ndim <= axis < x.ndim:
        raise fail("axis", f"an integer in [{-x.ndim}, {x.ndim})", axis)
    moved = np.moveaxis(x, axis, -1).astype(compute_dtype(x.dtype), copy=True)
    probs, _ = softmax_lse_(moved)
    return np.moveaxis(probs, -1, axis).astype(x.dtype, copy=False)
