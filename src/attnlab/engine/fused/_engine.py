"""The fused engine: the tiled engine compiled by numba (the ``fast`` extra), its
products still by BLAS. ``KERNELS`` gives ``_tiled`` two layers of kernels:

- Block kernels, the elementwise work on one block of scores Z (rows i, keys j), where
  the NumPy tiled engine makes four passes over the block (max, subtract, exp, sum; in the
  backward subtract, exp, subtract, multiply) and these kernels, row by row while it is in
  cache, three (max, exp, sum) and one:

      forward:   m' = max(m, rowmax Z);  Z_ij ← exp(Z_ij − m'_i);  l ← e^(m − m')·l + rowsum Z
                                                                     online_softmax_
      backward:  P_ij = exp(Z_ij − lse_i);  dZ_ij = P_ij·(dP_ij − δ_i)   softmax_backward_
                 (lse_i in two parts, m_i and log l_i, in the rows of a huge lse: ``_tiled``)

- Whole tasks, for attention with no attention mask, no mask function and no dropout
  (``Problem.compiles_whole``), whatever its window, causal rule (either alignment), softcap, ALiBi
  and sinks: the forward of some slices and rows, the backward over blocks of keys and
  over blocks of queries, each one compiled call with its products by BLAS (Intel MKL's
  where the mkl package is installed, else SciPy's through numba's np.dot: ``_blas``) and
  no Python between blocks (``_kernels.attend``, ``backward_keys``,
  ``backward_queries``), scheduled by :mod:`._tasks`. They skip the blocks of keys outside
  the band of the window and the causal rule as ``_tiled`` does, and modify each row of a
  block's scores in cache, in ``_masks.modify_scores_``'s order: Z ← c·tanh(Z·(1/c)) −
  slope·|j − (i + offset)|, then −∞ outside the band; a sink joins each row's softmax
  last, as in ``_tiled._forward_block``; the backward multiplies dZ by 1 − tanh².

NumPy's exp is vectorised with AVX-512 but falls back to slow code on AVX2 machines, and
the SVML library that numba could use instead is not in its pip builds, so the
exponential is written out: e^x = 2^k·e^r with k = round(x·log₂e) and r = x − k·ln 2
(in two parts, Cody & Waite), e^r by a Taylor polynomial (degree 7 in float32, 13 in
float64: within 0.86 and 1.3 ulp with FMA), and 2^k built in an integer's exponent bits.
The row maximum compares integers that order as the floats do, which LLVM vectorises (a
float maximum it vectorises only if told there is no NaN). Below about e^−87.68 (float32)
or e^−708.74 (float64) the result is 0 (NumPy gives subnormals down to e^−103.97 and
e^−745.13); from about e^88.38 or e^709.44 it is +∞, where the true value is finite for
0.35 more (attention's arguments are never positive); NaN stays NaN, −∞ gives 0, and +∞
gives +∞.

The softcap's tanh is written out too (NumPy's vectorises, numba's calls libm per
element). In float32, c·tanh(x/c) = x·P(y)/Q(y) with y = (x/c)² and x clamped to ±9c, P and
Q of degree 4 fitted to tanh's relative error (2.1e-8): about 12 vector operations and a
division, and the row's maximum found in the same pass, so that a softcap costs the
forward about 10 % (the float64 way would cost about 20 %). In float64, x + x³·g(x²) for
|x| < 0.625 (g of degree 11, a Chebyshev fit), else sign(x)·(1 − 2u/(1 + u)) with
u = e^(−2|x|) by the exponential above, both computed and one selected (a select
vectorises, a branch does not). Measured with FMA against a 64-bit-mantissa tanh over
[−25c, 25c]: tanh itself (c = 1) within 5.2 ulp in float32 (mean 0.25) and 1.6 in float64
(NumPy's: 1.36 and 1.17); c·tanh(x/c) for c = 50 within 4.1 and 3.3 (x/c rounds once;
NumPy's c·tanh(x/c): 2.5 and 2.2). ±∞ gives ±c, NaN stays NaN and −0 stays −0.

The kernels release the GIL, so the tiled engine's threads run them in parallel. They
are compiled on first use (seconds) and cached on disk where numba finds a folder it may
write (next to the package, NUMBA_CACHE_DIR, or ~/.cache/numba); with none, they are
compiled in memory in each process.
"""

from __future__ import annotations

import functools

import numpy as np

from ..._validation import Array, fail
from .._threads import rescan_blas
from .._tiled import BlockedEngine, Kernels
from ._decode import decode_forward
from ._tasks import backward_tasks, forward_tasks

__all__ = ["FUSED", "KERNELS", "FusedEngine", "available", "online_softmax_", "softmax_backward_"]


@functools.cache
def available() -> bool:
    """Whether the kernels can be loaded (``pip install 'attnlab[fast]'``): numba and SciPy
    import, and the module that defines them with them."""
    try:
        from . import _kernels as _fused_kernels  # noqa: F401
    except Exception:  # numba or SciPy missing (ImportError), or a broken llvmlite (OSError, …)
        return False
    rescan_blas()  # the kernels loaded SciPy's BLAS
    return True


def _rows(name: str, x: Array, scores: Array) -> Array:
    """A per-row vector, checked against the block (the kernels do not check bounds)."""
    if x.shape != scores.shape[:1] or x.dtype != scores.dtype:
        raise fail(name, f"({scores.shape[0]},) {scores.dtype} as the block's rows", f"{x.shape} {x.dtype}")
    return x


def online_softmax_(scores: Array, row_max: Array, row_sum: Array) -> Array:
    """One online-softmax step on a block of scores (l, s), in place (``_tiled.Kernels``);
    returns the rescale factors e^(m − m'), (l,)."""
    from ._kernels import online_softmax

    rescale = np.empty_like(row_max)
    online_softmax(scores, _rows("row_max", row_max, scores), _rows("row_sum", row_sum, scores), rescale)
    return rescale


def softmax_backward_(scores: Array, lse: Array, grad: Array, delta: Array, low: Array | None = None) -> None:
    """scores (l, s) ← P = exp((scores − lse[:, None]) − low[:, None]) (low None: 0);
    grad (l, s) ← P∘(grad − delta[:, None])."""
    from ._kernels import softmax_backward, softmax_backward_split

    if grad.shape != scores.shape or grad.dtype != scores.dtype:
        raise fail("grad", f"shape {scores.shape} {scores.dtype} as scores", f"{grad.shape} {grad.dtype}")
    lse, delta = _rows("lse", lse, scores), _rows("delta", delta, scores)
    if low is None or not low.any():
        softmax_backward(scores, lse, grad, delta)
    else:
        softmax_backward_split(scores, lse, _rows("low", low, scores), grad, delta)


class FusedEngine(BlockedEngine):
    """The tiled engine with these kernels, there when they load (:func:`available`)."""

    def available(self) -> bool:
        """Whether numba's kernels load (:func:`available`)."""
        return available()


KERNELS = Kernels(online_softmax_, softmax_backward_, forward_tasks, backward_tasks, decode_forward)
FUSED = FusedEngine("fused", KERNELS, "numba and SciPy: pip install 'attnlab[fast]'")
