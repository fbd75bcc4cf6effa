"""One place for argument checks, so every message reads the same way:
``<argument>: expected <what>, got <what came>``."""

from __future__ import annotations

from typing import Any

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def fail(name: str, expected: str, got: object, error: type[Exception] = ValueError) -> Exception:
    """Build (not raise) the error for argument ``name``; callers ``raise fail(...)``."""
    return error(f"{name}: expected {expected}, got {got}")


def float_array(name: str, x: Any, *, min_ndim: int = 2) -> np.ndarray:
    """``x`` as a floating ndarray of at least ``min_ndim`` dimensions (no copy if it is one)."""
    if not isinstance(x, np.ndarray):
        try:
            x = np.asarray(x)
        except (ValueError, TypeError) as e:
            raise fail(name, "an array of numbers", f"{type(x).__name__} ({e})", TypeError) from None
    if x.dtype not in FLOAT_DTYPES:
        raise fail(name, "a float16, float32 or float64 array", f"dtype {x.dtype}", TypeError)
    if x.ndim < min_ndim:
        raise fail(name, f"an array with at least {min_ndim} dimensions", f"shape {x.shape}")
    return x


def same_dtype(**arrays: np.ndarray) -> np.dtype:
    """The one dtype that all ``arrays`` share; TypeError naming them all otherwise."""
    dtypes = {a.dtype for a in arrays.values()}
    if len(dtypes) != 1:
        names = ", ".join(arrays)
        got = ", ".join(f"{k}={a.dtype}" for k, a in arrays.items())
        raise fail(names, "one dtype for all of them", got, TypeError)
    return dtypes.pop()


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float16 is computed in float32; float32 and float64 as they are."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether an array of ``shape`` broadcasts to exactly ``target``."""
    try:
        return tuple(np.broadcast_shapes(shape, target)) == tuple(target)
    except ValueError:
        return False


def probability(name: str, p: Any) -> float:
    """A dropout probability in [0, 1)."""
    if isinstance(p, bool) or not isinstance(p, (int, float, np.floating, np.integer)) or not 0 <= p < 1:
        raise fail(name, "a number in [0, 1)", repr(p))
    return float(p)


def positive_int(name: str, n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise fail(name, "an integer >= 1", repr(n))
    return int(n)
