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
float64: within 1.2 and 1.6 ulp), and 2^k built in an integer's exponent bits. Every step is a
plain loop that LLVM vectorises for the machine's instruction set (or the one
NUMBA_CPU_NAME names). Below the smallest normal number the result is 0 (NumPy gives a
subnormal: a difference under 2⁻¹²⁶); NaN stays NaN, −∞ gives 0, and +∞ gives +∞.

The kernels release the GIL, so the tiled engine's threads run them in parallel; they
are compiled on first use and cached on disk (numba's ``cache=True``).
"""

from __future__ import annotations

import functools

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


def exp_shifted_(scores: np.ndarray, shift: np.ndarray) -> None:
    """scores (l, s) ← exp(scores − shift[:, None]), in place; shift (l,)."""
    from ._fused_kernels import exp_shifted

    exp_shifted(scores, shift, *_scratch(scores.dtype, scores.shape[1]))


def softmax_backward_(scores: np.ndarray, lse: np.ndarray, grad: np.ndarray, delta: np.ndarray) -> None:
    """scores (l, s) ← P = exp(scores − lse[:, None]); grad (l, s) ← P∘(grad − delta[:, None])."""
    from ._fused_kernels import softmax_backward

    softmax_backward(scores, lse, grad, delta, *_scratch(scores.dtype, scores.shape[1]))


KERNELS = Kernels(exp_shifted_, softmax_backward_)
