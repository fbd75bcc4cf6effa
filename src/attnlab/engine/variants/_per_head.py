"""The check of a per-head parameter (ALiBi's slopes, the sinks)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._validation import Array, array_of, fail

__all__ = ["per_head"]


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
