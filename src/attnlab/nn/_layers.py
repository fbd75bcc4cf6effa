"""attnlab.nn's layers: Parameter, Module, Linear, Embedding and LayerNorm (the one module
system, from :mod:`attnlab.layers`), gelu (the one ``gelu_new``, layers'), RNN.

Every layer's forward returns a :class:`~attnlab.layers.Forward`, its output and the
backward that carries it (the engine's convention, as :class:`attnlab.Attention`): given
the gradient of the loss with respect to the output, ``backward`` adds the gradients of the
layer's parameters to their ``grad`` and returns the gradient with respect to the input
(None for integer inputs). A model calls its layers in order, keeps their results and calls
their backwards in reverse. Shapes: x (B, L, D) for hidden states, ids (B, L) for tokens.

    layer = Linear(4, 3, rng=np.random.default_rng(0))
    result = layer(x)                  # result.output = x·Wᵀ + b, W (3, 4) as torch.nn.Linear's
    dx = result.backward(dy)           # layer.weight.grad += dyᵀ·x, ...
    y, back = layer(x)                 # the same, unpacked

Randomness only from the Generator passed in.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._validation import Array, layer_dtype, positive_int
from ..layers._activation import gelu
from ..layers._embedding import Embedding
from ..layers._linear import Linear, normal
from ..layers._module import Forward, Module, Parameter
from ..layers._norm import LayerNorm

__all__ = ["RNN", "Embedding", "LayerNorm", "Linear", "Module", "Parameter", "gelu"]


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
        self.recurrent = Parameter(normal(rng, (n_hidden, n_hidden), 1 / math.sqrt(n_hidden), dtype))

    def __call__(self, x: Array) -> Forward:
        B, L, _ = x.shape
        projected = self.input(x)  # (B, L, H): xₜ·Wᵀ + b for every t at once
        inputs = projected.output
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
            return projected.backward(d_inputs)

        return Forward(states[:, 1:], backward)
