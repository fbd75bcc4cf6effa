"""attnlab.nn's layers: Parameter, Module, Linear, Embedding, LayerNorm, gelu, RNN.

Every layer's forward returns its output and a function that carries its backward: given
the gradient of the loss with respect to the output, it adds the gradients of the layer's
parameters to their ``grad`` and returns the gradient with respect to the input (None for
integer inputs). A model calls its layers in order, keeps the backward functions and calls
them in reverse. Shapes: x (B, L, D) for hidden states, ids (B, L) for tokens.

    layer = Linear(4, 3, rng=np.random.default_rng(0))
    y, back = layer(x)                 # y = x·Wᵀ + b, W (3, 4) as torch.nn.Linear's
    dx = back(dy)                      # layer.weight.grad += dyᵀ·x, ...

Randomness only from the Generator passed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._validation import Array, fail, flag, ids_below, layer_dtype, positive_int, real_number

__all__ = ["RNN", "Embedding", "LayerNorm", "Linear", "Module", "Parameter", "gelu"]

Backward = Callable[..., Any]  # dy (and, for attention, the weights' gradient) -> dx


@dataclass(eq=False)
class Parameter:
    """A trainable array and its gradient (same shape), which backward functions add to.

    Args:
        value: the array; its gradient starts as zeros of its shape and dtype.
    """

    value: Array
    grad: Array = field(init=False)

    def __post_init__(self) -> None:
        self.grad = np.zeros_like(self.value)


class Module:
    """Something with parameters: ``named_parameters()`` finds them in its attributes,
    sub-modules and lists of sub-modules, with dotted names."""

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        """Every parameter of this module and its sub-modules, as (dotted name, parameter).

        Args:
            prefix: put before every name ("block." gives "block.weight").
        """
        for name, value in vars(self).items():
            if isinstance(value, Parameter):
                yield prefix + name, value
            elif isinstance(value, Module):
                yield from value.named_parameters(f"{prefix}{name}.")
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, Module):
                        yield from item.named_parameters(f"{prefix}{name}.{i}.")

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad[...] = 0


def _normal(rng: np.random.Generator, shape: tuple[int, ...], std: float, dtype: np.dtype) -> Array:
    return (rng.standard_normal(shape) * std).astype(dtype)


def _generator(rng: Any) -> np.random.Generator:
    """``rng`` once it is a numpy Generator (the layers' only source of randomness)."""
    if not isinstance(rng, np.random.Generator):
        raise fail("rng", "a numpy.random.Generator", type(rng).__name__, TypeError)
    return rng


def _std(std: Any) -> float:
    """A standard deviation of the draws: a finite number >= 0."""
    return real_number("std", std, minimum=0.0)


class Linear(Module):
    """y = x·Wᵀ + b, as torch.nn.Linear: W (out_features, in_features), b (out_features,);
    x (…, in_features) -> y (…, out_features). Its backward adds dyᵀ·x to W's gradient and
    Σ dy to b's, and returns dy·W.

    W is drawn as an (in_features, out_features) array and kept as its transpose: the shape
    is torch's, the memory is laid out as x·Wᵀ multiplies it, so the products (x·Wᵀ, dy·W and
    dW as (xᵀ·dy)ᵀ) and the sums over the gradients (clip_grad_norm's) run in the order
    builtin:coref was trained with: the same bits.

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

    def __init__(self, in_features: int, out_features: int, *, rng: np.random.Generator, std: float = 0.02,
                 bias: bool = True, dtype: Any = np.float64) -> None:  # fmt: skip
        n_in, n_out = positive_int("in_features", in_features), positive_int("out_features", out_features)
        dtype, std, bias = layer_dtype(dtype), _std(std), flag("bias", bias)
        self.weight = Parameter(_normal(_generator(rng), (n_in, n_out), std, dtype).T)  # (out, in)
        self.bias = Parameter(np.zeros(n_out, dtype)) if bias else None

    def __call__(self, x: Array) -> tuple[Array, Backward]:
        y = x @ self.weight.value.T
        if self.bias is not None:
            y = y + self.bias.value

        def backward(dy: Array) -> Array:
            flat_x, flat_dy = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])  # (…, n) -> (N, n)
            self.weight.grad += (flat_x.T @ flat_dy).T  # dyᵀ·x, multiplied in W's memory order
            if self.bias is not None:
                self.bias.grad += flat_dy.sum(axis=0)
            return dy @ self.weight.value

        return y, backward


class Embedding(Module):
    """Row ``ids`` of a (n, D) table: ids (…) ints in 0..n − 1 -> (…, D). As torch's, a
    negative id is refused (NumPy would take it from the end).

    Args:
        n: the table's rows (the vocabulary).
        dim: D, the width of a row.
        rng: draws the table ~ N(0, std²).
        std: its standard deviation (default 0.02).
        dtype: the table's dtype, float32 or float64 (default float64).

    Raises:
        ArgumentError: ``n`` or ``dim`` below 1, a negative ``std``; in the forward, an id
            outside 0..n − 1.
        ArgumentTypeError: a width that is not an integer, a dtype other than float32 or
            float64; in the forward, ids that are not integers.
    """

    def __init__(self, n: int, dim: int, *, rng: np.random.Generator, std: float = 0.02,
                 dtype: Any = np.float64) -> None:  # fmt: skip
        rows, width = positive_int("n", n), positive_int("dim", dim)
        self.weight = Parameter(_normal(_generator(rng), (rows, width), _std(std), layer_dtype(dtype)))

    def __call__(self, ids: Array) -> tuple[Array, Backward]:
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise fail("ids", "an array of integers", f"dtype {ids.dtype}", TypeError)
        if ids.size:
            ids_below("ids", ids, len(self.weight.value))

        def backward(dy: Array) -> None:
            np.add.at(self.weight.grad, ids, dy)  # a row used twice gets both gradients

        return self.weight.value[ids], backward


class LayerNorm(Module):
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

    def __init__(self, dim: int, *, eps: float = 1e-12, dtype: Any = np.float64) -> None:
        width, dtype = positive_int("dim", dim), layer_dtype(dtype)
        self.weight = Parameter(np.ones(width, dtype))
        self.bias = Parameter(np.zeros(width, dtype))
        self.eps = real_number("eps", eps, minimum=0.0)

    def __call__(self, x: Array) -> tuple[Array, Backward]:
        centred = x - x.mean(axis=-1, keepdims=True)
        inv = 1.0 / np.sqrt(np.mean(centred**2, axis=-1, keepdims=True) + self.eps)
        normed = centred * inv

        def backward(dy: Array) -> Array:
            axes = tuple(range(dy.ndim - 1))
            self.weight.grad += (dy * normed).sum(axis=axes)
            self.bias.grad += dy.sum(axis=axes)
            g = dy * self.weight.value
            return inv * (g - g.mean(axis=-1, keepdims=True) - normed * (g * normed).mean(axis=-1, keepdims=True))

        return normed * self.weight.value + self.bias.value, backward


def gelu(x: Array) -> tuple[Array, Backward]:
    """0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), transformers' ``gelu_new``, and its backward.

    Args:
        x: any shape.
    """
    c = math.sqrt(2.0 / math.pi)
    t = np.tanh(c * (x + 0.044715 * x * x * x))

    def backward(dy: Array) -> Array:
        return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t**2) * c * (1 + 3 * 0.044715 * x**2))

    return 0.5 * x * (1 + t), backward


class RNN(Module):
    """hₜ = tanh(xₜ·Wᵀ + hₜ₋₁·U + b), h₀ = 0, W (H, n_in) and U (H, H); the outputs (B, L, H),
    backward through time.

    Args:
        n_in: the width of xₜ.
        n_hidden: H, the width of hₜ.
        rng: draws W ~ N(0, 1/n_in) and U ~ N(0, 1/H).
        dtype: the parameters' dtype, float32 or float64 (default float64).

    Raises:
        ArgumentError: ``n_in`` or ``n_hidden`` below 1.
        ArgumentTypeError: either not an integer, or a dtype other than float32 or float64.
    """

    def __init__(self, n_in: int, n_hidden: int, *, rng: np.random.Generator, dtype: Any = np.float64) -> None:
        n_in, n_hidden, dtype = positive_int("n_in", n_in), positive_int("n_hidden", n_hidden), layer_dtype(dtype)
        self.input = Linear(n_in, n_hidden, rng=rng, std=1 / math.sqrt(n_in), dtype=dtype)
        self.recurrent = Parameter(_normal(rng, (n_hidden, n_hidden), 1 / math.sqrt(n_hidden), dtype))

    def __call__(self, x: Array) -> tuple[Array, Backward]:
        B, L, _ = x.shape
        inputs, input_back = self.input(x)  # (B, L, H): xₜ·Wᵀ + b for every t at once
        states = np.zeros((B, L + 1, inputs.shape[-1]), dtype=inputs.dtype)  # h₀ … h_L
        for t in range(L):
            states[:, t + 1] = np.tanh(inputs[:, t] + states[:, t] @ self.recurrent.value)

        def backward(dy: Array) -> Array:
            d_inputs = np.zeros_like(inputs)
            carried = np.zeros_like(states[:, 0])  # ∂loss/∂hₜ from the steps after t
            for t in reversed(range(L)):
                d_pre = (dy[:, t] + carried) * (1 - states[:, t + 1] ** 2)  # through tanh
                d_inputs[:, t] = d_pre
                self.recurrent.grad += states[:, t].T @ d_pre
                carried = d_pre @ self.recurrent.value.T
            return input_back(d_inputs)

        return states[:, 1:], backward
