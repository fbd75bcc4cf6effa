"""A per-head parameter (ALiBi's slopes, the sinks): its check, and what such a variant
does with one value per head (its record, one head's record, one sequence's values)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._validation import Array, array_of, fail
from ._base import Context, Variant

__all__ = ["PerHead", "numbers", "per_head"]


def per_head(
    name: str, x: Any, shapes: str, ndims: tuple[int, ...], batch_shape: tuple[int, ...], dtype: np.dtype
) -> Array:
    """A per-slice parameter of finite real numbers whose last dimension is the H query
    heads, broadcast to B… (a read-only view); 2-D inputs count as one head."""
    values = array_of(name, x)
    if values.dtype.kind not in "fiu":
        raise fail(name, "an array of real numbers", f"dtype {values.dtype}", TypeError)
    target = batch_shape or (1,)
    if values.ndim not in ndims or values.ndim > len(target) or values.shape[-1] != target[-1]:
        raise fail(
            name, f"shape {shapes} with H={target[-1]}, for the batch shape {batch_shape}", f"shape {values.shape}"
        )
    try:
        stretched = np.broadcast_to(values.astype(dtype), target).reshape(batch_shape)
    except ValueError:
        raise fail(
            name, f"shape {shapes} that broadcasts to the batch shape {batch_shape}", f"shape {values.shape}"
        ) from None
    if not np.isfinite(stretched).all():
        raise fail(name, "finite values", "a NaN or an infinity")
    return stretched


def numbers(values: Array | None) -> list[float] | None:
    """A trace's record of one value per head: the numbers in order, or None."""
    return None if values is None else [float(x) for x in values.reshape(-1)]


class PerHead(Variant):
    """A variant whose value is one real number per query head, (H,) or, where ``ndims``
    allows it, (B, H); checked by :func:`per_head`, broadcast to B…, recorded as a list."""

    shapes: str = "(H,)"
    ndims: tuple[int, ...] = (1,)

    def check(self, value: Any, context: Context) -> Array | None:
        if value is None:
            return None
        return per_head(self.name, value, self.shapes, self.ndims, context.batch_shape, context.dtype)

    def of_sequence(self, checked: Any, index: tuple[int, ...], batch: int) -> Array | None:
        return None if checked is None else checked[index]  # (H,)

    def record(self, checked: Any) -> list[float] | None:
        return numbers(checked)

    def head(self, recorded: Any, h: int) -> Any:
        return recorded if recorded is None or len(recorded) == 1 else recorded[h : h + 1]
