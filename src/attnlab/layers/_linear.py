"""The pieces a layer is built of, each with its backward: an affine map, and the
split of a width into heads and its inverse.

    linear:        y = x·Wᵀ + b                 (…, in) -> (…, out)
    split_heads:   (B, T, H·E) -> (B, H, T, E)
    merge_heads:   (B, H, T, E) -> (B, T, H·E)    (the inverse, and each other's backward)

T is a sequence length (L or S).
"""

from __future__ import annotations

from .._validation import Array

__all__ = ["linear", "linear_backward", "merge_heads", "split_heads"]


def linear(x: Array, weight: Array, bias: Array | None) -> Array:
    """x·Wᵀ + b: x (…, in), weight (out, in), bias (out,) or None -> (…, out)."""
    y = x @ weight.T
    return y if bias is None else y + bias


def linear_backward(grad: Array, x: Array, weight: Array) -> tuple[Array, Array, Array]:
    """(dx (…, in), dW (out, in), db (out,)) of y = x·Wᵀ + b from dy (…, out)."""
    rows = grad.reshape(-1, grad.shape[-1])  # every leading dimension as one, (…, out)
    grad_weight = rows.T @ x.reshape(-1, x.shape[-1])  # (out, in)
    return grad @ weight, grad_weight, rows.sum(axis=0)


def split_heads(x: Array, heads: int) -> Array:
    """(B, T, H·E) -> (B, H, T, E)."""
    B, T, width = x.shape
    return x.reshape(B, T, heads, width // heads).transpose(0, 2, 1, 3)  # (B, H, T, E)


def merge_heads(x: Array) -> Array:
    """(B, H, T, E) -> (B, T, H·E)."""
    B, H, T, E = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, H * E)  # (B, T, H·E)
