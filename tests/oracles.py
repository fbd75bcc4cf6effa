"""Shared oracles: the seed program, tolerances, finite differences."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

SEED_PROGRAM = Path(__file__).parent / "seed" / "seed_program.py"

# docs/design.md: float64 1e-10 absolute; float32 1e-5 absolute and 5e-6 relative.
TOLERANCE = {np.dtype(np.float64): dict(atol=1e-10, rtol=0), np.dtype(np.float32): dict(atol=1e-5, rtol=5e-6)}


def assert_close(actual: Any, expected: Any, dtype: Any = np.float64) -> None:
    np.testing.assert_allclose(
        np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64), **TOLERANCE[np.dtype(dtype)]
    )


def numerical_gradient(f: Callable[[], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar f() with respect to every entry of x (in place)."""
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        saved = x[i]
        x[i] = saved + eps
        up = f()
        x[i] = saved - eps
        down = f()
        x[i] = saved
        grad[i] = (up - down) / (2 * eps)
    return grad
