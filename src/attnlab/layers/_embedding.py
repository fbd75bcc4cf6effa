"""The one Embedding of attnlab (nn's and the pretrained models'): row ``ids`` of a table."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import Array, fail, ids_below, layer_dtype, positive_int
from ._linear import normal
from ._module import Forward, Module, Parameter

__all__ = ["Embedding"]


class Embedding(Module):
    """Row ``ids`` of a (n, D) table: ids (…) ints in 0..n − 1 -> (…, D). As torch's, a
    negative id is refused (NumPy would take it from the end). Its forward returns a
    :class:`Forward` whose backward adds dy to the rows used (a row used twice gets both).

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

    weight: Parameter

    def __init__(self, n: int, dim: int, *, rng: np.random.Generator, std: float = 0.02,
                 dtype: Any = np.float64) -> None:  # fmt: skip
        rows, width = positive_int("n", n), positive_int("dim", dim)
        self.weight = Parameter(normal(rng, (rows, width), std, layer_dtype(dtype)))

    @classmethod
    def of(cls, table: Array) -> Embedding:
        """The layer over the table itself (memory-mapped, never copied).

        Args:
            table: (n, D), one row per id.
        """
        layer = cls.__new__(cls)
        layer.weight = Parameter(table)
        return layer

    def __len__(self) -> int:
        return len(self.weight.value)

    def infer(self, ids: Array) -> Array:
        """The rows alone, for ids already checked (a pretrained network's).

        Args:
            ids: integer ids, any shape.
        """
        return self.weight.value[ids]

    def __call__(self, ids: Array) -> Forward:
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise fail("ids", "an array of integers", f"dtype {ids.dtype}", TypeError)
        if ids.size:
            ids_below("ids", ids, len(self.weight.value))

        def backward(dy: Array) -> None:
            np.add.at(self.weight.grad, ids, dy)  # a row used twice gets both gradients

        return Forward(self.weight.value[ids], backward)
