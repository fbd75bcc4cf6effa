"""The fused engine's kernels: the tiled engine's elementwise work in one pass per block,
compiled by numba (the ``fast`` extra), while the matrix products stay with BLAS.

Per block of scores Z (rows i, keys j), the NumPy tiled engine makes several passes
(subtract, exp, and in the backward subtract, multiply); each kernel here makes one:

    forward:   Z_ij ← exp(Z_ij − m_i)                              exp_shifted_
    backward:  P_ij = exp(Z_ij − lse_i);  dZ_ij = P_ij·(dP_ij − δ_i)   softmax_backward_

NumPy's exp is vectorised with AVX-512 but falls back to slow code on AVX2 machines, and
the SVML library that numba could use instead is not in its pip builds, so the
exponential is written out: e^x = 2^k·e^r with k = round(x·log₂e) and r = x − k·ln 2
(in two parts, Cody & Waite), e^r by a Taylor polynomial (degree 7 in float32, 13 in
float64: within 3 ulp), and 2^k built in an integer's exponent bits. Every step is a
plain loop that LLVM vectorises for the machine's instruction set (or the one
NUMBA_CPU_NAME names). Below the smallest normal number the result is 0 (NumPy gives a
subnormal: a difference under 2⁻¹²⁶); NaN stays NaN, −∞ gives 0, and +∞ gives +∞.

The kernels release the GIL, so the tiled engine's threads run them in parallel; they
are compiled on first use and cached on disk (numba's ``cache=True``).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ._tiled import Kernels

__all__ = ["KERNELS", "available", "exp_shifted_", "softmax_backward_"]


@functools.cache
def available() -> bool:
    """Whether numba can be imported (``pip install 'attnlab[fast]'``)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def _scratch(dtype: np.dtype, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exponential's work rows: r, and the integer bits of 2^k with their float view."""
    bits = np.empty(length, dtype=np.int32 if dtype == np.float32 else np.int64)
    return np.empty(length, dtype=dtype), bits, bits.view(dtype)


@functools.cache
def _kernels(dtype: np.dtype) -> tuple[Any, Any]:
    """The two kernels for ``dtype``, compiled on first use with its constants built in
    (numba caches the machine code on disk)."""
    from numba import njit

    compile_ = njit(nogil=True, cache=True, error_model="numpy")
    real = dtype.type
    if dtype == np.float32:  # ln 2 = LN2_HI + LN2_LO, LN2_HI with few enough bits that k·LN2_HI is exact
        LN2_HI, LN2_LO, LOW, HIGH, BIAS, MANTISSA = 0.693145751953125, 1.428606765330187e-06, -87.3, 88.7, 127, 23
        integer, degree = np.int32, 7  # int32: AVX2 converts float32 to int32 in vectors, not to int64
    else:
        LN2_HI, LN2_LO, LOW, HIGH, BIAS, MANTISSA = 0.6931471803691238, 1.9082149292705877e-10, -708.3, 709.7, 1023, 52
        integer, degree = np.int64, 13
    LOG2E, HALF, ZERO, INF = real(1 / math.log(2)), real(0.5), real(0), real(np.inf)
    LN2_HI, LN2_LO, LOW, HIGH = real(LN2_HI), real(LN2_LO), real(LOW), real(HIGH)
    BIAS, MANTISSA = integer(BIAS), integer(MANTISSA)
    A = tuple(real(1 / math.factorial(n)) for n in range(14))  # Taylor: e^r = Σ rⁿ/n!

    @compile_
    def taylor7(f):  # type: ignore[no-untyped-def]
        return A[0] + f * (A[1] + f * (A[2] + f * (A[3] + f * (A[4] + f * (A[5] + f * (A[6] + f * A[7]))))))

    @compile_
    def taylor13(f):  # type: ignore[no-untyped-def]
        return taylor7(f) + f**8 * (A[8] + f * (A[9] + f * (A[10] + f * (A[11] + f * (A[12] + f * A[13])))))

    poly = taylor7 if degree == 7 else taylor13

    @compile_
    def exp_row_(x, minus, r, bits, scale):  # type: ignore[no-untyped-def]
        """x ← exp(x − minus) for one row, through the scratch rows r, bits and scale (bits as floats)."""
        for j in range(x.shape[0]):
            v = min(max(x[j] - minus, LOW), HIGH)
            k = np.floor(v * LOG2E + HALF)
            r[j] = v - k * LN2_HI - k * LN2_LO
            bits[j] = (integer(k) + BIAS) << MANTISSA
        for j in range(x.shape[0]):
            p = poly(r[j])
            v = x[j] - minus
            x[j] = p * scale[j] if LOW < v < HIGH else (INF if v >= HIGH else (ZERO if v == v else v))

    @compile_
    def exp_shifted(scores, shift, r, bits, scale):  # type: ignore[no-untyped-def]
        for i in range(scores.shape[0]):
            exp_row_(scores[i], shift[i], r, bits, scale)

    @compile_
    def softmax_backward(scores, lse, grad, delta, r, bits, scale):  # type: ignore[no-untyped-def]
        for i in range(scores.shape[0]):
            row, g = scores[i], grad[i]
            exp_row_(row, lse[i], r, bits, scale)
            for j in range(row.shape[0]):
                g[j] = row[j] * (g[j] - delta[i])

    return exp_shifted, softmax_backward


def exp_shifted_(scores: np.ndarray, shift: np.ndarray) -> None:
    """scores (l, s) ← exp(scores − shift[:, None]), in place; shift (l,)."""
    _kernels(scores.dtype)[0](scores, shift, *_scratch(scores.dtype, scores.shape[1]))


def softmax_backward_(scores: np.ndarray, lse: np.ndarray, grad: np.ndarray, delta: np.ndarray) -> None:
    """scores (l, s) ← P = exp(scores − lse[:, None]); grad (l, s) ← P∘(grad − delta[:, None])."""
    _kernels(scores.dtype)[1](scores, lse, grad, delta, *_scratch(scores.dtype, scores.shape[1]))


KERNELS = Kernels(exp_shifted_, softmax_backward_)
