"""Arrays in JSON as their bytes: ``{"dtype": "<f4", "shape": [...], "base64": "..."}``, the
little-endian bytes in C order, base64. Exact (every bit of every number, NaN and ±∞
included) and about a fifth of the size of the numbers written out, for arrays of
millions of numbers (a model's statistics at 8,192 tokens). A program reads one as
``np.frombuffer(base64.b64decode(d["base64"]), d["dtype"]).reshape(d["shape"])``, a page
as ``new Float32Array(bytes.buffer)``."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np

from .._validation import ArgumentError, Array

__all__ = ["packed", "unpacked"]

# what a file may hold, and how: floats as they are, integers (key indices, bins) as int32
_STORED = {"float32": "<f4", "float64": "<f8", "int64": "<i4"}


def packed(array: Array) -> dict[str, Any]:
    """``array`` (float32, float64 or int64 within int32's range) as its bytes in base64.

    Raises:
        ValueError: another dtype, or an integer past int32's range.
    """
    stored = _STORED.get(array.dtype.name)
    if stored is None:
        raise ValueError(f"packed: expected float32, float64 or int64, got {array.dtype}")
    if stored == "<i4" and array.size and (array.min() < -(2**31) or array.max() >= 2**31):
        raise ValueError("packed: expected integers within int32's range")
    raw = np.ascontiguousarray(array, dtype=stored).tobytes()
    return {"dtype": stored, "shape": list(array.shape), "base64": base64.b64encode(raw).decode("ascii")}


def unpacked(data: Any, name: str, source: str, ndim: int) -> Array:
    """Inverse of :func:`packed`: float32 or float64 as written, integers as int64.

    Args:
        data: what :func:`packed` gave (JSON-decoded).
        name: the field's name, for the errors.
        source: the file's name, for the errors.
        ndim: the dimensions the field must have.

    Raises:
        ArgumentError: naming ``source`` and ``name``: not such an object, a dtype or shape
            it may not have, bytes that are not base64 or not as many as the shape says.
    """
    where = f"{source}: {name}"
    if not isinstance(data, dict) or data.get("dtype") not in _STORED.values():
        raise ArgumentError(f"{where}: expected {{dtype: one of {', '.join(_STORED.values())}, shape, base64}}")
    shape = data.get("shape")
    if not (isinstance(shape, list) and len(shape) == ndim and all(type(n) is int and n >= 0 for n in shape)):
        raise ArgumentError(f"{where}: shape: expected {ndim} whole numbers ≥ 0, got {shape!r}")
    try:
        raw = base64.b64decode(data.get("base64", ""), validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise ArgumentError(f"{where}: base64: expected the array's bytes in base64") from None
    dtype = np.dtype(data["dtype"])
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) != expected:
        raise ArgumentError(f"{where}: expected {expected} bytes for shape {shape}, got {len(raw)}")
    array = np.frombuffer(raw, dtype=dtype).reshape(shape)  # (shape…)
    return array.astype(np.int64 if dtype.kind == "i" else dtype.newbyteorder("="))
