"""The one tanh GELU, transformers' ``gelu_new``: nn's training stack calls it with its
backward, the pretrained models (GPT-2, builtin:coref) take its output."""

from __future__ import annotations

import math

import numpy as np

from .._validation import Array
from ._module import Forward

__all__ = ["gelu"]


def gelu(x: Array) -> Forward:
    """0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), transformers' ``gelu_new``, and its backward.

    The cube is the product 0.044715·x·x·x, left to right (not ``x**3``, whose last bit
    differs): builtin:coref was trained with it, and retrains to the same parameters only so.

    Args:
        x: any shape.
    """
    c = math.sqrt(2.0 / math.pi)
    t = np.tanh(c * (x + 0.044715 * x * x * x))

    def backward(dy: Array) -> Array:
        return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t**2) * c * (1 + 3 * 0.044715 * x**2))

    return Forward(0.5 * x * (1 + t), backward)
