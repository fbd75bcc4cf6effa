"""The pieces a layer is built of, each with its backward: an affine map (the function and
:class:`Linear`, the one linear layer of attnlab: MultiheadAttention's, nn's and the
pretrained models'), and the split of a width into heads and its inverse.

    linear:        y = x·Wᵀ + b                 (…, in) -> (…, out)
    Linear:        the module over W (out, in) and b, its forward a :class:`Forward`
    split_heads:   (B, T, H·E) -> (B, H, T, E)
    merge_heads:   (B, H, T, E) -> (B, T, H·E)    (the inverse, and each other's backward)

T is a sequence length (L or S).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import Array, fail, flag, layer_dtype, positive_int, real_number
from ._module import Forward, Module, Parameter

__all__ = ["Linear", "linear", "linear_backward", "merge_heads", "split_heads"]


def linear(x: Array, weight: Array, bias: Array | None) -> Array:
    """x·Wᵀ + b: x (…, in), weight (out, in), bias (out,) or None -> (…, out)."""
    y = x @ weight.T
    return y if bias is None else y + bias


def linear_backward(grad: Array, x: Array, weight: Array, *, stored_in_out: bool = False) -> tuple[Array, Array, Array]:
    """(dx (…, in), dW (out, in), db (out,)) of y = x·Wᵀ + b from dy (…, out).

    dW is multiplied in W's memory order: dyᵀ·x for a W stored (out, in) (torch's, and
    MultiheadAttention's), (xᵀ·dy)ᵀ with ``stored_in_out`` for a W stored (in, out) (nn's
    Linear, the order builtin:coref was trained with). The two are equal, not always to
    the bit."""
    rows = grad.reshape(-1, grad.shape[-1])  # every leading dimension as one, (…, out)
    flat_x = x.reshape(-1, x.shape[-1])  # (…, in)
    grad_weight = (flat_x.T @ rows).T if stored_in_out else rows.T @ flat_x  # (out, in)
    return grad @ weight, grad_weight, rows.sum(axis=0)


def normal(rng: Any, shape: tuple[int, ...], std: Any, dtype: Any) -> Array:
    """N(0, std²) draws of ``shape`` in ``dtype`` from ``rng``, a numpy Generator (the
    layers' only source of randomness), std a finite number >= 0."""
    if not isinstance(rng, np.random.Generator):
        raise fail("rng", "a numpy.random.Generator", type(rng).__name__, TypeError)
    std = real_number("std", std, minimum=0.0)
    return (rng.standard_normal(shape) * std).astype(dtype)


class Linear(Module):
    """y = x·Wᵀ + b, as torch.nn.Linear: W (out_features, in_features), b (out_features,);
    x (…, in_features) -> y (…, out_features). Its forward returns a :class:`Forward`
    whose backward adds dyᵀ·x to W's gradient and Σ dy to b's, and returns dy·W.

    Drawn (``Linear(in, out, rng=...)``, nn's), W is drawn as an (in_features,
    out_features) array and kept as its transpose: the shape is torch's, the memory is laid
    out as x·Wᵀ multiplies it, so the products (x·Wᵀ, dy·W and dW as (xᵀ·dy)ᵀ) and the sums
    over the gradients (clip_grad_norm's) run in the order builtin:coref was trained with:
    the same bits. Over given arrays (:meth:`of`, the pretrained models'), W is used as it
    is: a memory-mapped weight, or a view of one (GPT-2's Conv1D weight, stored (in, out),
    through its transpose; its fused c_attn as three column views), never a copy.

    Args:
        in_features: the width of x.
        out_features: the width of y.
        rng: draws W ~ N(0, std²).
        std: W's standard deviation (default 0.02, BERT's).
        bias: add b (zeros at first); False: no b.
        dtype: the parameters' dtype, float32 or float64 (default float64).

    Raises:
        ArgumentError: a width below 1 or a negative ``std``.
        ArgumentTypeError: a width that is not an integer, a dtype other than float32 or
            float64, ``bias`` not a bool or ``rng`` not a Generator.
    """

    weight: Parameter
    bias: Parameter | None

    def __init__(self, in_features: int, out_features: int, *, rng: np.random.Generator, std: float = 0.02,
                 bias: bool = True, dtype: Any = np.float64) -> None:  # fmt: skip
        n_in, n_out = positive_int("in_features", in_features), positive_int("out_features", out_features)
        dtype, bias = layer_dtype(dtype), flag("bias", bias)
        self.weight = Parameter(normal(rng, (n_in, n_out), std, dtype).T)  # (out, in), stored (in, out)
        self.bias = Parameter(np.zeros(n_out, dtype)) if bias else None
        self._stored_in_out = True

    @classmethod
    def of(cls, weight: Array, bias: Array | None = None) -> Linear:
        """The layer over the arrays themselves (memory-mapped views stay views).

        Args:
            weight: W, (out, in).
            bias: b, (out,), or None.
        """
        layer = cls.__new__(cls)
        layer.weight = Parameter(weight)
        layer.bias = None if bias is None else Parameter(bias)
        layer._stored_in_out = not weight.flags.c_contiguous
        return layer

    def infer(self, x: Array) -> Array:
        """The output alone, x·Wᵀ + b, with no backward kept (a pretrained network's).

        Args:
            x: (…, in).
        """
        return linear(x, self.weight.value, None if self.bias is None else self.bias.value)

    def __call__(self, x: Array) -> Forward:
        weight = self.weight.value

        def backward(dy: Array) -> Array:
            dx, grad_weight, grad_bias = linear_backward(dy, x, weight, stored_in_out=self._stored_in_out)
            self.weight.grad += grad_weight
            if self.bias is not None:
                self.bias.grad += grad_bias
            return dx

        return Forward(linear(x, weight, None if self.bias is None else self.bias.value), backward)


def split_heads(x: Array, heads: int) -> Array:
    """(B, T, H·E) -> (B, H, T, E)."""
    B, T, width = x.shape
    return x.reshape(B, T, heads, width // heads).transpose(0, 2, 1, 3)  # (B, H, T, E)


def merge_heads(x: Array) -> Array:
    """(B, H, T, E) -> (B, T, H·E)."""
    B, H, T, E = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, H * E)  # (B, T, H·E)
