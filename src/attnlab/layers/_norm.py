"""The norms over the last axis, the one Norm of attnlab (nn's and the pretrained
models'): :class:`LayerNorm` and :class:`RMSNorm`.

A norm's forward (``norm(x)``) returns a :class:`Forward`; it keeps 1/√(var + eps) and
multiplies by it, as its backward reuses it (builtin:coref's training order).
:meth:`Norm.infer` is the forward without a backward, in transformers' order (a division
by √(var + eps)): what the pretrained networks call. The two agree to rounding, not
always to the bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import Array, layer_dtype, positive_int, real_number
from ._module import Forward, Module, Parameter

__all__ = ["LayerNorm", "Norm", "RMSNorm"]


class Norm(Module):
    """What LayerNorm and RMSNorm share: γ (``weight``), β (``bias``, None for RMSNorm or
    a LayerNorm without it) and ``eps``."""

    weight: Parameter
    bias: Parameter | None  # β: a LayerNorm's; None for RMSNorm
    eps: float

    @staticmethod
    def of(weight: Array, bias: Array | None, eps: float, *, rms: bool = False) -> Norm:
        """The norm over the arrays themselves (memory-mapped, never copied): an
        :class:`RMSNorm` with ``rms`` (``bias`` then ignored), else a :class:`LayerNorm`.

        Args:
            weight: γ, (D,).
            bias: β, (D,), or None (zeros).
            eps: added to the variance (or the mean square).
            rms: an RMSNorm.
        """
        norm: Norm = RMSNorm.__new__(RMSNorm) if rms else LayerNorm.__new__(LayerNorm)
        norm.weight = Parameter(weight)
        norm.bias = None if rms else Parameter(bias if bias is not None else np.zeros_like(weight))
        norm.eps = eps
        return norm

    def infer(self, x: Array) -> Array:
        """The output alone, with no backward kept (a pretrained network's).

        Args:
            x: (…, D).
        """
        raise NotImplementedError

    def __call__(self, x: Array) -> Forward:
        raise NotImplementedError


class LayerNorm(Norm):
    """(x − mean)/√(var + eps)·γ + β over the last axis.

    Args:
        dim: the width of the last axis (γ ones and β zeros of it).
        eps: added to the variance, a finite number >= 0 (default 1e-12, BERT's).
        dtype: γ's and β's dtype, float32 or float64 (default float64).

    Raises:
        ArgumentError: ``dim`` below 1, or ``eps`` negative, NaN or infinite.
        ArgumentTypeError: ``dim`` not an integer, ``eps`` not a real number, or a dtype
            other than float32 or float64.
    """

    bias: Parameter

    def __init__(self, dim: int, *, eps: float = 1e-12, dtype: Any = np.float64) -> None:
        width, dtype = positive_int("dim", dim), layer_dtype(dtype)
        self.weight = Parameter(np.ones(width, dtype))
        self.bias = Parameter(np.zeros(width, dtype))
        self.eps = real_number("eps", eps, minimum=0.0)

    def infer(self, x: Array) -> Array:
        """The output alone, in transformers' order: (x − mean) / √(var + eps), ·γ, +β.

        Args:
            x: (…, D).
        """
        centred = x - np.mean(x, axis=-1, keepdims=True)
        y = centred / np.sqrt(np.mean(np.square(centred), axis=-1, keepdims=True) + self.eps)
        y *= self.weight.value
        y += self.bias.value
        return y

    def __call__(self, x: Array) -> Forward:
        centred = x - x.mean(axis=-1, keepdims=True)
        inv = 1.0 / np.sqrt(np.mean(centred**2, axis=-1, keepdims=True) + self.eps)
        normed = centred * inv

        def backward(dy: Array) -> Array:
            axes = tuple(range(dy.ndim - 1))
            self.weight.grad += (dy * normed).sum(axis=axes)
            self.bias.grad += dy.sum(axis=axes)
            g = dy * self.weight.value
            return inv * (g - g.mean(axis=-1, keepdims=True) - normed * (g * normed).mean(axis=-1, keepdims=True))

        return Forward(normed * self.weight.value + self.bias.value, backward)


class RMSNorm(Norm):
    """x/√(mean(x²) + eps)·γ over the last axis (Llama's, Qwen2's, Mistral's).

    Args:
        dim: the width of the last axis (γ ones of it).
        eps: added to the mean square, a finite number >= 0 (default 1e-6, Llama's).
        dtype: γ's dtype, float32 or float64 (default float64).

    Raises:
        ArgumentError: ``dim`` below 1, or ``eps`` negative, NaN or infinite.
        ArgumentTypeError: ``dim`` not an integer, ``eps`` not a real number, or a dtype
            other than float32 or float64.
    """

    def __init__(self, dim: int, *, eps: float = 1e-6, dtype: Any = np.float64) -> None:
        width, dtype = positive_int("dim", dim), layer_dtype(dtype)
        self.weight = Parameter(np.ones(width, dtype))
        self.bias = None
        self.eps = real_number("eps", eps, minimum=0.0)

    def infer(self, x: Array) -> Array:
        """The output alone, in transformers' order: x / √(mean(x²) + eps), ·γ.

        Args:
            x: (…, D).
        """
        y = x / np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + self.eps)
        return y * self.weight.value

    def __call__(self, x: Array) -> Forward:
        inv = 1.0 / np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + self.eps)
        normed = x * inv

        def backward(dy: Array) -> Array:
            self.weight.grad += (dy * normed).sum(axis=tuple(range(dy.ndim - 1)))
            g = dy * self.weight.value
            return inv * (g - normed * (g * normed).mean(axis=-1, keepdims=True))

        return Forward(normed * self.weight.value, backward)
