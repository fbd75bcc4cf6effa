"""Shared oracles: the seed program, tolerances, finite differences; and the optional
modules (torch, ...) that some tests need, which skip where they are not installed."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

SEED_PROGRAM = Path(__file__).parent / "seed" / "seed_program.py"

# docs/design.md: float64 1e-10 absolute; float32 1e-5 absolute and 5e-6 relative.
TOLERANCE = {np.dtype(np.float64): dict(atol=1e-10, rtol=0), np.dtype(np.float32): dict(atol=1e-5, rtol=5e-6)}


def assert_close(actual: Any, expected: Any, dtype: Any = np.float64) -> None:
    np.testing.assert_allclose(
        np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64), **TOLERANCE[np.dtype(dtype)]
    )


def numerical_gradient(
    f: Callable[[], float], x: np.ndarray, eps: float = 1e-6, indices: Iterable[tuple[int, ...]] | None = None
) -> np.ndarray:
    """Central differences (f(x + eps·e_i) − f(x − eps·e_i)) / 2·eps of the scalar f() with
    respect to the entries i of x, perturbed in place and restored: every entry, or only
    those in indices (the others stay 0). The result has x's shape."""
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape) if indices is None else indices:
        saved = x[i]
        x[i] = saved + eps
        up = f()
        x[i] = saved - eps
        down = f()
        x[i] = saved
        grad[i] = (up - down) / (2 * eps)
    return grad


def optional_module(name: str) -> ModuleType | None:
    """The module name (e.g. "torch"), or None where it is not installed; the tests that
    use it carry requires(name), so that a run without it skips them."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def requires(name: str) -> pytest.MarkDecorator:
    """Skip the test where the optional module name is not installed (for modules whose
    other tests run without it; a module that needs it throughout uses pytest.importorskip)."""
    return pytest.mark.skipif(optional_module(name) is None, reason=f"{name} is not installed")
