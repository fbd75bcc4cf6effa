"""The one module system of attnlab's layers: :class:`Parameter`, :class:`Module` and
:class:`Forward`, the result a forward returns.

One backward convention, the engine's (``attention()`` returns an :class:`Attention` that
carries its ``backward``; micrograd's "a forward that carries its backward"): a layer's
forward returns a :class:`Forward`, its output and ``backward``. Given the gradient of the
loss with respect to the output, ``backward`` adds the gradients of the layer's parameters
to their ``grad`` and returns the gradient with respect to the input (None for integer
inputs). A Forward is a named tuple, so ``y, back = layer(x)`` reads it too.

    result = layer(x)                  # -> Forward(output, backward)
    dx = result.backward(dy)           # parameters' grad += …; -> dx
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TypeVar

import numpy as np

from .._validation import Array, flag

__all__ = ["Backward", "Forward", "Module", "Parameter"]

Backward = Callable[..., Any]  # dy (and, for attention, the weights' gradient) -> dx
ModuleT = TypeVar("ModuleT", bound="Module")


class Forward(NamedTuple):
    """What a layer's forward returns: its output and the backward that carries it back."""

    output: Any  # an Array; a float for a loss
    backward: Backward


class Parameter:
    """A trainable array and its gradient (same shape), which backward functions add to.

    The gradient is allocated (zeros of the value's shape, dtype and memory order) when it
    is first read, so a layer over memory-mapped weights that never runs a backward costs
    no memory for it.

    Args:
        value: the array.
    """

    __slots__ = ("_grad", "value")

    def __init__(self, value: Array) -> None:
        self.value = value
        self._grad: Array | None = None

    @property
    def grad(self) -> Array:
        if self._grad is None:
            self._grad = np.zeros_like(self.value)
        return self._grad

    @grad.setter
    def grad(self, grad: Array) -> None:
        self._grad = grad

    def __repr__(self) -> str:
        return f"Parameter(shape={self.value.shape}, dtype={self.value.dtype})"


class Module:
    """Something with parameters: ``named_parameters()`` finds them in its attributes,
    sub-modules, lists of sub-modules and dicts of parameters, with dotted names; and its
    mode, training or evaluation, as torch's nn.Module."""

    training: bool = True

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
            elif isinstance(value, dict):
                for key, item in value.items():
                    if isinstance(item, Parameter):
                        yield f"{prefix}{key}", item

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad[...] = 0

    def train(self: ModuleT, mode: bool = True) -> ModuleT:
        """Training mode (dropout on) or not, as torch's; returns the module.

        Args:
            mode: True for training, False for evaluation (:meth:`eval`).
        """
        self.training = flag("mode", mode)
        return self

    def eval(self: ModuleT) -> ModuleT:
        return self.train(False)
