"""The fused engine's numba kernels; imported by ``attnlab._fused`` on first use only.

Module-level functions, so that numba's disk cache finds them again in a new process.
The float32 and float64 versions differ only in constants, chosen at compile time by
the ``@overload``s below.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit, types
from numba.extending import overload

__all__ = ["exp_shifted", "softmax_backward"]


def _probe() -> None:
    """Compiled once with ``cache=True`` to learn whether numba has a cache folder it may
    write: next to this file (a writable install), NUMBA_CACHE_DIR, or ~/.cache/numba."""


try:
    njit(cache=True)(_probe)
    _CACHE = True
except RuntimeError:  # "cannot cache function …: no locator available": compile in memory instead
    _CACHE = False

compile_ = njit(nogil=True, cache=_CACHE, error_model="numpy")


def _constants(row):  # type: ignore[no-untyped-def]  # numba matches stubs' and overloads' parameters exactly
    """(log₂e, ln 2 high part, ln 2 low part, lowest x, highest x, ½, 0, ∞) in the row's dtype."""


def _two_to(k, row):  # type: ignore[no-untyped-def]
    """The bits of the float 2^k in the row's dtype, k an integral float."""


def _taylor(r):  # type: ignore[no-untyped-def]
    """e^r for |r| <= ln 2 / 2."""


def _float32(x: Any) -> bool:
    """Whether x, a numba type (a float, or an array of floats), is float32."""
    x = x.dtype if isinstance(x, types.Array) else x
    return isinstance(x, types.Float) and x.bitwidth == 32


# ln 2 = LN2_HI + LN2_LO, LN2_HI with few enough bits that k·LN2_HI is exact for every k used.
# The range keeps 2^k normal: from the lowest x the result is a normal number (0 below
# it), and to the highest x, k stays within the exponent field (+∞ above, where the true
# value is still finite for 0.35 more: attention never asks, its arguments are <= 0).
_SINGLE = (1 / math.log(2), 0.693145751953125, 1.428606765330187e-06, -87.33, 88.37)
_DOUBLE = (1 / math.log(2), 0.6931471803691238, 1.9082149292705877e-10, -708.39, 709.43)
_COEFFICIENTS = tuple(1 / math.factorial(n) for n in range(14))  # e^r = Σ rⁿ/n!


@overload(_constants)
def _constants_typed(row):  # type: ignore[no-untyped-def]
    real = np.float32 if _float32(row) else np.float64
    values = tuple(real(c) for c in (*(_SINGLE if _float32(row) else _DOUBLE), 0.5, 0.0, np.inf))
    return lambda row: values


@overload(_two_to)
def _two_to_typed(k, row):  # type: ignore[no-untyped-def]
    if _float32(row):  # int32: AVX2 converts float32 to int32 in vectors, not to int64
        return lambda k, row: (np.int32(k) + np.int32(127)) << np.int32(23)
    return lambda k, row: (np.int64(k) + np.int64(1023)) << np.int64(52)


@overload(_taylor)
def _taylor_typed(r):  # type: ignore[no-untyped-def]
    if _float32(r):  # degree 7: within 1.2 ulp
        a = tuple(np.float32(c) for c in _COEFFICIENTS[:8])
        return lambda r: a[0] + r * (a[1] + r * (a[2] + r * (a[3] + r * (a[4] + r * (a[5] + r * (a[6] + r * a[7]))))))
    b = _COEFFICIENTS  # degree 13: within 1.6 ulp

    def degree_13(r):  # type: ignore[no-untyped-def]
        low = b[0] + r * (b[1] + r * (b[2] + r * (b[3] + r * (b[4] + r * (b[5] + r * (b[6] + r * b[7]))))))
        return low + r**8 * (b[8] + r * (b[9] + r * (b[10] + r * (b[11] + r * (b[12] + r * b[13])))))

    return degree_13


@compile_
def _exp_row(x, minus, r, bits, scale):  # type: ignore[no-untyped-def]
    """x ← exp(x − minus) for one row, through the scratch rows r, bits and scale (bits as floats)."""
    log2e, ln2_hi, ln2_lo, low, high, half, zero, inf = _constants(x)
    for j in range(x.shape[0]):
        x[j] -= minus
        v = min(max(x[j], low), high)
        k = np.floor(v * log2e + half)
        r[j] = v - k * ln2_hi - k * ln2_lo
        bits[j] = _two_to(k, x)
    for j in range(x.shape[0]):
        v = x[j]
        x[j] = _taylor(r[j]) * scale[j] if low <= v <= high else (inf if v > high else (zero if v == v else v))


@compile_
def exp_shifted(scores, shift, r, bits, scale):  # type: ignore[no-untyped-def]
    """scores ← exp(scores − shift[:, None])."""
    for i in range(scores.shape[0]):
        _exp_row(scores[i], shift[i], r, bits, scale)


@compile_
def softmax_backward(scores, lse, grad, delta, r, bits, scale):  # type: ignore[no-untyped-def]
    """scores ← P = exp(scores − lse[:, None]);  grad ← P∘(grad − delta[:, None])."""
    for i in range(scores.shape[0]):
        row, g = scores[i], grad[i]
        _exp_row(row, lse[i], r, bits, scale)
        for j in range(row.shape[0]):
            g[j] = row[j] * (g[j] - delta[i])
