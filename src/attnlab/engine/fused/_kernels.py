"""The fused engine's kernels; imported by ``attnlab.engine.fused`` on first use only.

Module-level functions, so that numba's disk cache finds them again in a new process.
The float32 and float64 versions differ only in constants and integer widths, chosen at
compile time by the ``@overload``s below, but for the softcap's tanh (a rational function
in float32, a polynomial or the exponential in float64: ``_softcapped``). Every loop is plain enough for LLVM to
vectorise for the machine's instruction set (or the one NUMBA_CPU_NAME and
NUMBA_CPU_FEATURES name).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np
import scipy.linalg.cython_blas  # noqa: F401  # numba's np.dot calls SciPy's BLAS: load it now, before any thread limit
from numba import njit, types
from numba.extending import intrinsic, overload

__all__ = [
    "attend",
    "backward_keys",
    "backward_queries",
    "online_softmax",
    "softcap_",
    "softmax_backward",
    "softmax_backward_split",
]


def _probe() -> None:
    """Compiled once with ``cache=True`` to learn whether numba has a cache folder it may
    write: next to this file (a writable install), NUMBA_CACHE_DIR, or ~/.cache/numba."""


try:
    njit(cache=True)(_probe)
    _CACHE = True
except RuntimeError:  # "cannot cache function …: no locator available": compile in memory instead
    _CACHE = False

# "contract" lets LLVM fuse a·b + c into one rounding (FMA), which only makes the
# exponential more exact; sums are reordered ("reassoc") only in _row_sum and the decode
# path's dot products (``_decode_kernels._four_rows_scores``), to vectorise them.
compile_ = njit(nogil=True, cache=_CACHE, error_model="numpy", fastmath={"contract"})
compile_sum = njit(nogil=True, cache=_CACHE, error_model="numpy", fastmath={"reassoc", "nsz", "contract"})


@intrinsic
def _wide_vectors(typingctx):  # type: ignore[no-untyped-def]
    """Gives the function that calls it LLVM's attribute "prefer-vector-width"="512": its
    loops then use the target's widest vectors, 512 bits with AVX-512, where LLVM's tuning
    for Intel's AVX-512 cores ("prefer-256-bit", for the clock that 512-bit code may cost)
    keeps them to 256. The products (MKL's, OpenBLAS's) run 512-bit code anyway; on one
    core of an Intel Xeon the online softmax of 16.7 M scores in cache took 4.4 ms instead
    of 6.8. Per function, unlike NUMBA_CPU_FEATURES: the rest of the process's numba code
    keeps its tuning; a target without AVX-512 keeps its own widest vectors. The sums whose
    order LLVM may choose (``_row_sum``, ``_decode_kernels._four_rows_scores``) follow the
    width, so their last bits differ between an AVX-512 and an AVX2 machine, as they did
    between BLAS builds.
    Called first in every kernel with a loop: a loop keeps the vectors of the function
    it was compiled in, wherever LLVM later inlines it. llvmlite checks only the
    attributes it names, so this one joins the function's set as the text it prints into
    the IR (tests/engine/test_fused.py checks that it does); where a later llvmlite keeps
    them otherwise, the hint is left out and the kernels compile as before."""

    def codegen(context, builder, signature, arguments):  # type: ignore[no-untyped-def]
        with contextlib.suppress(TypeError):  # not a set any more: a speed hint only
            set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()

    return types.none(), codegen


def _constants(row):  # type: ignore[no-untyped-def]  # numba matches stubs' and overloads' parameters exactly
    """(log₂e, ln 2 high part, ln 2 low part, lowest x, highest x, rounding constant, 0, −∞)
    in the row's dtype."""


def _power_of_two(t):  # type: ignore[no-untyped-def]
    """2^k as a float, from t = x·log₂e + the rounding constant (whose low bits hold k)."""


def _order_key(x):  # type: ignore[no-untyped-def]
    """An integer ordered as the float x is (−∞ < … < −0 < +0 < … < +∞ < NaN)."""


def _signed_key(x):  # type: ignore[no-untyped-def]
    """``_order_key`` without its NaN test: a NaN's key is that of a number beyond ∞ of
    its sign (3 integer operations fewer)."""


def _from_order_key(key, row):  # type: ignore[no-untyped-def]
    """The float (of the row's dtype) whose order key is ``key``."""


def _taylor(r):  # type: ignore[no-untyped-def]
    """e^r for |r| <= ln 2 / 2."""


def _in_dtype_of(x, row):  # type: ignore[no-untyped-def]
    """x as a float of the row's dtype."""


def _float32(x: Any) -> bool:
    """Whether x, a numba type (a float, or an array of floats), is float32."""
    x = x.dtype if isinstance(x, types.Array) else x
    return isinstance(x, types.Float) and x.bitwidth == 32


# ln 2 = LN2_HI + LN2_LO, LN2_HI with few enough bits that k·LN2_HI is exact for every k used.
# Adding the rounding constant 1.5·2^(mantissa bits) rounds x·log₂e to the integer k, which
# then sits in the sum's low bits: 2^k's bits are (those bits − the constant's + bias) << mantissa bits.
# x is clamped so that k stays within −bias … bias + 1, where those bits are those of 0 and of
# +∞: below about −87.68 (float32) or −708.74 (float64) the result is 0, from about 88.38 or
# 709.44 it is +∞, with no test or select per element (NaN passes the clamp and stays NaN).
_SINGLE = (1 / math.log(2), 0.693145751953125, 1.428606765330187e-06, -88.0, 88.8, 1.5 * 2**23)
_DOUBLE = (1 / math.log(2), 0.6931471803691238, 1.9082149292705877e-10, -709.0, 709.8, 1.5 * 2**52)
_COEFFICIENTS = tuple(1 / math.factorial(n) for n in range(14))  # e^r = Σ rⁿ/n!


@overload(_constants)
def _constants_typed(row):  # type: ignore[no-untyped-def]
    real = np.float32 if _float32(row) else np.float64
    values = tuple(real(c) for c in (*(_SINGLE if _float32(row) else _DOUBLE), 0.0, -np.inf))
    return lambda row: values


@overload(_power_of_two)
def _power_of_two_typed(t):  # type: ignore[no-untyped-def]
    if _float32(t):
        offset32 = np.int32(np.float32(_SINGLE[-1]).view(np.int32) - 127)
        return lambda t: np.int32((np.float32(t).view(np.int32) - offset32) << np.int32(23)).view(np.float32)
    offset64 = np.int64(np.float64(_DOUBLE[-1]).view(np.int64) - 1023)
    return lambda t: np.int64((np.float64(t).view(np.int64) - offset64) << np.int64(52)).view(np.float64)


@overload(_order_key)
def _order_key_typed(x):  # type: ignore[no-untyped-def]
    # a negative float's bits grow with its magnitude: flip all but the sign to reverse them;
    # a NaN of either sign takes the largest key, as NumPy's maximum makes any NaN win
    if _float32(x):

        def key32(x):  # type: ignore[no-untyped-def]
            bits = np.float32(x).view(np.int32)
            flipped = np.int32(bits ^ ((bits >> 31) & 0x7FFFFFFF))
            return flipped if (bits & 0x7FFFFFFF) <= 0x7F800000 else np.int32(0x7FFFFFFF)

        return key32

    def key64(x):  # type: ignore[no-untyped-def]
        bits = np.float64(x).view(np.int64)
        flipped = np.int64(bits ^ ((bits >> 63) & 0x7FFFFFFFFFFFFFFF))
        return flipped if (bits & 0x7FFFFFFFFFFFFFFF) <= 0x7FF0000000000000 else np.int64(0x7FFFFFFFFFFFFFFF)

    return key64


@overload(_signed_key)
def _signed_key_typed(x):  # type: ignore[no-untyped-def]
    if _float32(x):

        def key32(x):  # type: ignore[no-untyped-def]
            bits = np.float32(x).view(np.int32)
            return np.int32(bits ^ ((bits >> 31) & 0x7FFFFFFF))

        return key32

    def key64(x):  # type: ignore[no-untyped-def]
        bits = np.float64(x).view(np.int64)
        return np.int64(bits ^ ((bits >> 63) & 0x7FFFFFFFFFFFFFFF))

    return key64


@overload(_from_order_key)
def _from_order_key_typed(key, row):  # type: ignore[no-untyped-def]
    if _float32(row):  # the flip is its own inverse
        return lambda key, row: np.int32(key ^ ((key >> 31) & 0x7FFFFFFF)).view(np.float32)
    return lambda key, row: np.int64(key ^ ((key >> 63) & 0x7FFFFFFFFFFFFFFF)).view(np.float64)


@overload(_in_dtype_of)
def _in_dtype_of_typed(x, row):  # type: ignore[no-untyped-def]
    if _float32(row):
        return lambda x, row: np.float32(x)
    return lambda x, row: np.float64(x)


@overload(_taylor, jit_options={"fastmath": {"contract"}})
def _taylor_typed(r):  # type: ignore[no-untyped-def]
    if _float32(r):  # degree 7: within 0.86 ulp (measured on [−80, 0])
        a = tuple(np.float32(c) for c in _COEFFICIENTS[:8])
        return lambda r: a[0] + r * (a[1] + r * (a[2] + r * (a[3] + r * (a[4] + r * (a[5] + r * (a[6] + r * a[7]))))))
    b = _COEFFICIENTS  # degree 13: within 1.3 ulp

    def degree_13(r):  # type: ignore[no-untyped-def]
        low = b[0] + r * (b[1] + r * (b[2] + r * (b[3] + r * (b[4] + r * (b[5] + r * (b[6] + r * b[7]))))))
        return low + r**8 * (b[8] + r * (b[9] + r * (b[10] + r * (b[11] + r * (b[12] + r * b[13])))))

    return degree_13


@compile_
def _exp(x, row):  # type: ignore[no-untyped-def]
    """e^x in the row's dtype: 2^k·e^r with k = round(x·log₂e), r = x − k·ln 2 (Cody & Waite)."""
    log2e, ln2_hi, ln2_lo, low, high, rounding = _constants(row)[:6]
    clamped = min(max(_in_dtype_of(x, row), low), high)
    t = clamped * log2e + rounding
    k = t - rounding
    r = clamped - k * ln2_hi - k * ln2_lo
    return _taylor(r) * _power_of_two(t)


def _softcapped(x, capping, row):  # type: ignore[no-untyped-def]
    """(c·tanh(x/c), tanh(x/c)) in the row's dtype, capping = (on, c, 1/c)."""


def _tanh_polynomial(y):  # type: ignore[no-untyped-def]
    """g(y) of tanh(x) = x + x³·g(x²), for |x| below TANH_POLYNOMIAL_BELOW (float64)."""


# The softcap's tanh. float32: tanh x = x·P(x²)/Q(x²) for |x| <= TANH_CLAMP (beyond, that
# of ±TANH_CLAMP: 1 once rounded), P and Q of degree 4 fitted to tanh's relative error by
# Lawson's iteratively reweighted least squares (2.1e-8), about 12 vector operations and a
# division. The float64 way below takes about 35, which in float32 would cost a softcap
# some 20 % of the forward.
TANH_CLAMP = 9.0
_TANH_NUMERATOR = (0.9999999794628939, 0.13381015463470775, 0.0034955757188697887, 2.0608867068899332e-05,
                   1.3354349169013444e-08)  # fmt: skip
_TANH_DENOMINATOR = (1.0, 0.4671433106318996, 0.025876935825675615, 0.0003285614011238435, 7.776433055940731e-07)
_TANH_NUMERATOR_32, _TANH_DENOMINATOR_32 = (tuple(map(np.float32, c)) for c in (_TANH_NUMERATOR, _TANH_DENOMINATOR))
# float64: tanh x = x + x³·g(x²) for |x| < TANH_POLYNOMIAL_BELOW, g of degree 11 by a
# Chebyshev fit (mpmath, 50 digits) whose error is 2e-18 relative to tanh; above it
# 1 − 2u/(1 + u) with u = e^(−2|x|), whose errors |x| >= 0.625 (u <= 0.29) keeps small.
TANH_POLYNOMIAL_BELOW = 0.625
_TANH_DOUBLE = (
    -0.3333333333333333, 0.13333333333333042, -0.05396825396789699, 0.021869488519008305, -0.008863235103240878,
    0.0035921217511549622, -0.0014557754120478055, 0.0005896606577757043, -0.0002375906496055562,
    9.257116129556769e-05, -3.12011014257974e-05, 6.485163482793113e-06,
)  # fmt: skip


@overload(_tanh_polynomial, jit_options={"fastmath": {"contract"}})
def _tanh_polynomial_typed(y):  # type: ignore[no-untyped-def]
    b = _TANH_DOUBLE  # degree 11, in two halves as _taylor's

    def degree_11(y):  # type: ignore[no-untyped-def]
        low = b[0] + y * (b[1] + y * (b[2] + y * (b[3] + y * (b[4] + y * b[5]))))
        return low + y**6 * (b[6] + y * (b[7] + y * (b[8] + y * (b[9] + y * (b[10] + y * b[11])))))

    return degree_11


@compile_
def _clamped(x, high):  # type: ignore[no-untyped-def]
    """x clamped to [−high, high] (by its size: one comparison fewer); a NaN passes."""
    size = abs(x)
    return np.copysign(high if high < size else size, x)


@compile_
def _tanh_ratio(y):  # type: ignore[no-untyped-def]
    """P(y)/Q(y) of a float32 y = x² (|x| <= TANH_CLAMP): tanh x = x·P(y)/Q(y)."""
    p, q = _TANH_NUMERATOR_32, _TANH_DENOMINATOR_32
    numerator = p[0] + y * (p[1] + y * (p[2] + y * (p[3] + y * p[4])))
    denominator = q[0] + y * (q[1] + y * (q[2] + y * (q[3] + y * q[4])))
    return numerator / denominator


@compile_
def _tanh_composite(x, row):  # type: ignore[no-untyped-def]
    """tanh x in the row's dtype: x + x³·g(x²) near 0, else sign(x)·(1 − 2u/(1 + u)) with
    u = e^(−2|x|); both computed and one selected, which vectorises (no branch)."""
    x = _in_dtype_of(x, row)
    one, small = _in_dtype_of(1.0, row), _in_dtype_of(TANH_POLYNOMIAL_BELOW, row)
    size = abs(x)
    square = x * x
    near_zero = x + x * square * _tanh_polynomial(square)
    u = _exp(-(size + size), row)  # 0 from |x| of about 354.4: tanh = ±1
    far = one - (u + u) / (one + u)  # tanh |x|
    return np.copysign(near_zero if size < small else far, x)  # a NaN is not < small: far, NaN; tanh −0 = −0


@overload(_softcapped, jit_options={"fastmath": {"contract"}})
def _softcapped_typed(x, capping, row):  # type: ignore[no-untyped-def]
    if _float32(row):  # c·tanh(x/c) = x·P(y)/Q(y) with y = (x/c)², x clamped to ±9c: two roundings fewer

        def rational(x, capping, row):  # type: ignore[no-untyped-def]
            x = _clamped(x, capping[1] * np.float32(TANH_CLAMP))
            scaled = x * capping[2]
            ratio = _tanh_ratio(scaled * scaled)
            return x * ratio, scaled * ratio

        return rational

    def composite(x, capping, row):  # type: ignore[no-untyped-def]
        t = _tanh_composite(x * capping[2], row)
        return capping[1] * t, t

    return composite


@compile_
def softcap_(values, cap, derivative):  # type: ignore[no-untyped-def]
    """values ← c·tanh(values/c) and derivative ← 1 − tanh²(values/c), on 1-D arrays of one
    dtype, as the compiled tasks compute them (for the tests; c in that dtype)."""
    _wide_vectors()
    softcap, one = (True, cap, _in_dtype_of(1.0, values) / cap), _in_dtype_of(1.0, values)
    for j in range(values.shape[0]):
        values[j], t = _softcapped(values[j], softcap, values)
        derivative[j] = one - t * t


@compile_
def _row_max(row):  # type: ignore[no-untyped-def]
    """max_j row_j (−∞ for no element, NaN if any is NaN, as NumPy's), through integer
    order keys: LLVM vectorises an integer maximum, but a float one only with no NaN allowed."""
    _wide_vectors()
    top = _order_key(_constants(row)[7])  # −∞: the maximum of no element
    for j in range(row.shape[0]):
        top = max(top, _order_key(row[j]))
    return _from_order_key(top, row)


@compile_sum
def _row_sum(row):  # type: ignore[no-untyped-def]
    _wide_vectors()
    total = _constants(row)[6]
    for j in range(row.shape[0]):
        total += row[j]
    return total


@compile_
def _online_softmax_row(row, i, top, row_max, row_sum, rescale):  # type: ignore[no-untyped-def]
    """``online_softmax`` on row i of a block, ``row``, whose maximum is ``top``."""
    _wide_vectors()
    zero, minus_inf = _constants(row)[6:]
    new_max = row_max[i] if top <= row_max[i] else top  # a NaN in the block makes m' NaN, as NumPy's
    shift = zero if new_max == minus_inf else new_max
    for j in range(row.shape[0]):
        row[j] = _exp(row[j] - shift, row)
    rescale[i] = _exp(row_max[i] - shift, row)
    row_sum[i] = rescale[i] * row_sum[i] + _row_sum(row)
    row_max[i] = new_max


@compile_
def online_softmax(scores, row_max, row_sum, rescale):  # type: ignore[no-untyped-def]
    """One step of the online softmax, per row i of a block of scores Z (l, s):
    m' = max(m_i, max_j Z_ij) (shifting by 0 while it is −∞: no key visible yet);
    Z_ij ← exp(Z_ij − m');  α_i = e^(m_i − m');  l_i ← α_i·l_i + Σ_j Z_ij;  m_i ← m'."""
    _wide_vectors()
    for i in range(scores.shape[0]):
        _online_softmax_row(scores[i], i, _row_max(scores[i]), row_max, row_sum, rescale)


@compile_
def _softmax_backward_row(row, grad, shift, d):  # type: ignore[no-untyped-def]
    """``softmax_backward`` on one row, with its lse ``shift`` and its δ ``d`` (arguments, so
    locals: an element read inside the loop stops it vectorising)."""
    _wide_vectors()
    for j in range(row.shape[0]):
        row[j] = _exp(row[j] - shift, row)
        grad[j] = row[j] * (grad[j] - d)


@compile_
def _softmax_backward_split_row(row, grad, shift, low, d):  # type: ignore[no-untyped-def]
    """``_softmax_backward_row`` with the lse in two parts, P = exp((Z − shift) − low): in
    a row of a huge lse (``_tiled._exact_rows``: shift = m, the row's maximum, and
    low = log l) it keeps Z's digits however large Z is; a row with low = 0 takes
    ``_softmax_backward_row``, one subtraction per element."""
    _wide_vectors()
    if low == 0:
        _softmax_backward_row(row, grad, shift, d)
        return
    for j in range(row.shape[0]):
        row[j] = _exp((row[j] - shift) - low, row)
        grad[j] = row[j] * (grad[j] - d)


@compile_
def softmax_backward(scores, lse, grad, delta):  # type: ignore[no-untyped-def]
    """scores ← P = exp(scores − lse[:, None]);  grad ← P∘(grad − delta[:, None])."""
    _wide_vectors()
    for i in range(scores.shape[0]):
        _softmax_backward_row(scores[i], grad[i], lse[i], delta[i])


@compile_
def softmax_backward_split(scores, lse, low, grad, delta):  # type: ignore[no-untyped-def]
    """scores ← P = exp((scores − lse[:, None]) − low[:, None]);  grad ← P∘(grad − delta[:, None])."""
    _wide_vectors()
    for i in range(scores.shape[0]):
        _softmax_backward_split_row(scores[i], grad[i], lse[i], low[i], delta[i])


# cblas's constants: row-major storage, an operand as stored or transposed
_ROW_MAJOR, _AS_STORED, _TRANSPOSED = 101, 111, 112


def _product(blas, a, b, out):  # type: ignore[no-untyped-def]
    """out (m, n) ← a (m, k)·b (k, n): MKL's cblas_?gemm where ``blas`` is (cblas_sgemm,
    cblas_dgemm) (``_blas.products``), numba's np.dot (SciPy's BLAS) where it is None. a
    and b may be transposed views; out has C-contiguous rows."""


@compile_
def _operand(x):  # type: ignore[no-untyped-def]
    """(x, or a C-contiguous copy where neither of its strides is one element; how cblas
    reads it; its leading dimension)."""
    rows, columns, item = x.shape[0], x.shape[1], x.itemsize
    if x.strides[1] == item and x.strides[0] >= max(columns, 1) * item:
        return x, _AS_STORED, x.strides[0] // item
    if x.strides[0] == item and x.strides[1] >= max(rows, 1) * item:
        return x, _TRANSPOSED, x.strides[1] // item
    y = np.ascontiguousarray(x)
    return y, _AS_STORED, max(columns, 1)


@overload(_product)
def _product_typed(blas, a, b, out):  # type: ignore[no-untyped-def]
    if isinstance(blas, types.NoneType):
        return lambda blas, a, b, out: np.dot(a, b, out)
    which = 0 if _float32(out) else 1

    def mkl(blas, a, b, out):  # type: ignore[no-untyped-def]
        m, k, n = a.shape[0], a.shape[1], b.shape[1]
        if m == 0 or n == 0:
            return 0
        if k == 0:
            out[:] = 0
            return 0
        x, how_a, lead_a = _operand(a)
        y, how_b, lead_b = _operand(b)
        one, zero = _in_dtype_of(1.0, out), _in_dtype_of(0.0, out)
        operands = (x.ctypes.data, lead_a, y.ctypes.data, lead_b)
        result = (out.ctypes.data, out.strides[0] // out.itemsize)
        blas[which](_ROW_MAJOR, how_a, how_b, m, n, k, one, *operands, zero, *result)
        return x.size + y.size  # x and y used after the call: numba frees a copy of a or b only then

    return mkl


@compile_
def _matrix(work, rows, columns):  # type: ignore[no-untyped-def]
    """The first rows·columns elements of a flat work array as a C-contiguous (rows, columns)
    matrix, as np.dot's output must be."""
    return work[: rows * columns].reshape((rows, columns))


@compile_
def _add(total, part):  # type: ignore[no-untyped-def]
    """total += part, two matrices of one shape."""
    _wide_vectors()
    for i in range(total.shape[0]):
        for e in range(total.shape[1]):
            total[i, e] += part[i, e]


@compile_
def _scaled_rows(query, n, first, scale, out):  # type: ignore[no-untyped-def]
    """out (l, E) ← scale · rows first … first + l of slice n of query (N, L, E)."""
    _wide_vectors()
    for i in range(out.shape[0]):
        for e in range(out.shape[1]):
            out[i, e] = query[n, first + i, e] * scale


@compile_
def _softcap_max_(row, capping):  # type: ignore[no-untyped-def]
    """Z_j ← c·tanh(Z_j/c) on one row (capping = (on, c, 1/c)); returns its maximum (−∞
    for no element), found in the same pass, which the division leaves time for. A NaN
    may lose the maximum (``_signed_key``) but still makes its row's sum, output and lse
    NaN, as ``_row_max``'s NaN would. (Its loops, as every loop here, count from 0: an
    index that may be negative takes numba's wraparound, which stops LLVM vectorising.)"""
    _wide_vectors()
    top = _signed_key(_constants(row)[7])
    for j in range(row.shape[0]):
        capped = _softcapped(row[j], capping, row)[0]
        row[j] = capped
        top = max(top, _signed_key(capped))
    return _from_order_key(top, row)


@compile_
def _softcap_with_derivative_(row, capping, derivative):  # type: ignore[no-untyped-def]
    """Z_j ← c·tanh(Z_j/c) and derivative_j ← 1 − tanh²(Z_j/c), softcap's derivative, on
    one row."""
    _wide_vectors()
    one = _in_dtype_of(1.0, row)
    for j in range(row.shape[0]):
        row[j], t = _softcapped(row[j], capping, row)
        derivative[j] = one - t * t


@compile_
def _multiply_(row, factor):  # type: ignore[no-untyped-def]
    """row_j ← row_j · factor_j (over the row's length)."""
    _wide_vectors()
    for j in range(row.shape[0]):
        row[j] *= factor[j]


@compile_
def _alibi_(row, query, first_key, modifiers):  # type: ignore[no-untyped-def]
    """Z_j −= slope·|j − (i + offset)| on the row of query i = ``query``, whose keys start
    at ``first_key`` (the distance in the row's dtype, as ``_masks``')."""
    _wide_vectors()
    offset, slope = modifiers[1], modifiers[3][1]
    distance = first_key - query - offset  # j − (i + offset) of the row's first key
    for j in range(row.shape[0]):
        row[j] -= _in_dtype_of(abs(distance + j), row) * slope


@compile_
def _slice_modifiers(variant, n):  # type: ignore[no-untyped-def]
    """The variants that modify slice n's scores, as scalars (a row's kernels then hold
    no array, whose reference counts would cost each row): (band, offset, softcap,
    (with ALiBi, slope_n))."""
    return variant[0], variant[1], variant[2], (variant[3][0], variant[3][1][n])


@compile_
def _unmodified(modifiers, rows, keys):  # type: ignore[no-untyped-def]
    """Whether the block of queries ``rows`` and keys ``keys`` (first, stop) keeps its raw
    scores: no softcap, no ALiBi, and every j − i inside the band (``Band.inside``)."""
    (lowest, highest), softcap, alibi = modifiers[0], modifiers[2], modifiers[3]
    inside = keys[0] - (rows[1] - 1) >= lowest and keys[1] - 1 - rows[0] <= highest
    return inside and not softcap[0] and not alibi[0]


@compile_
def _band_columns(band, query, first_key, keys):  # type: ignore[no-untyped-def]
    """(start, stop): the columns of a row of ``keys`` keys from ``first_key`` that query
    ``query`` may attend, lowest <= j − i <= highest."""
    start = min(max(query + band[0] - first_key, 0), keys)
    return start, min(max(query + band[1] + 1 - first_key, start), keys)


@compile_
def _mask_outside_(row, start, stop):  # type: ignore[no-untyped-def]
    """Z_j ← −∞ for the columns j of one row outside start … stop − 1."""
    _wide_vectors()
    minus_inf = _constants(row)[7]
    for j in range(start):
        row[j] = minus_inf
    for j in range(stop, row.shape[0]):  # empty but in the rows that cross the band's upper edge
        row[j] = minus_inf


@compile_
def _modified_row_max(row, query, first_key, modifiers):  # type: ignore[no-untyped-def]
    """The forward's scores of one row of raw scores scale·q·kᵀ (query i = ``query``, keys
    from ``first_key``; ``modifiers`` those of its slice, ``_slice_modifiers``), in place,
    in ``_masks.modify_scores_``'s order: Z ← softcap(Z) − slope·|j − (i + offset)|, then
    −∞ outside the band. Returns max_j Z_j."""
    softcap, keys = modifiers[2], row.shape[0]
    start, stop = _band_columns(modifiers[0], query, first_key, keys)
    if softcap[0] and not modifiers[3][0]:  # the softcap and the maximum in one pass, over the allowed keys only
        top = _softcap_max_(row if start == 0 and stop == keys else row[start:stop], softcap)  # no view if whole
        _mask_outside_(row, start, stop)
        return top
    if softcap[0]:
        _softcap_max_(row, softcap)
    if modifiers[3][0]:
        _alibi_(row, query, first_key, modifiers)
    _mask_outside_(row, start, stop)
    return _row_max(row)


@compile_
def _modify_row_with_derivative_(row, query, first_key, modifiers, derivative):  # type: ignore[no-untyped-def]
    """``_modified_row_max``'s scores for the backward, with softcap's derivative
    1 − tanh² into ``derivative`` (over the whole row, masked keys included, as ``_masks``)."""
    if modifiers[2][0]:
        _softcap_with_derivative_(row, modifiers[2], derivative)
    if modifiers[3][0]:
        _alibi_(row, query, first_key, modifiers)
    start, stop = _band_columns(modifiers[0], query, first_key, row.shape[0])
    _mask_outside_(row, start, stop)


@compile_
def _band_keys(band, skip, first, stop, keys):  # type: ignore[no-untyped-def]
    """(first, stop): the keys, of ``keys``, that query rows first … stop − 1 read: with
    ``skip`` only those the band allows (``variants.Band.keys``; (0, 0) for none), else all."""
    if not skip:
        return 0, keys
    start, end = max(0, first + band[0]), max(0, min(keys, stop - 1 + band[1] + 1))
    return (start, end) if start < end else (0, 0)


@compile_
def _band_queries(band, skip, start, end, queries):  # type: ignore[no-untyped-def]
    """(first, stop): the queries, of ``queries``, that read keys start … end − 1: with
    ``skip`` only those the band allows (``variants.Band.queries``; (0, 0) for none), else all."""
    if not skip:
        return 0, queries
    first, stop = max(0, start - band[1]), max(0, min(queries, end - 1 - band[0] + 1))
    return (first, stop) if first < stop else (0, 0)


# The whole tasks of the fused engine, for attention with no attention mask, no mask
# function and no dropout (``_tiled`` makes the tasks; NumPy's loops there are the oracle).
# Their arrays are C-contiguous stacks of slices: query (N, L, E), key (N / groups, S, E),
# value (N / groups, S, Ev), dO (N, L, Ev), lse and δ (N, L); slice n reads key and value
# head n // groups. ``slices``, ``rows`` and ``keys`` are (first, stop) ranges; ``blocks``
# is (block_q, block_k); ``skip``: skip the blocks of keys that the band rules out (as
# ``_tiled.key_blocks`` and ``_query_blocks``, the first and last cut at its edges in the
# forward and over blocks of queries). The variants, ``variant``, in the compute dtype:
#
#     ((lowest, highest): the band of allowed j − i, ints;  offset, the diagonal's;
#      (softcapped, c, 1/c);  (with ALiBi, slopes (N,));  (with sinks, sink logits (N,)))
#
# (a variant that is off has zeros in its place). ``blas`` is ``_blas.products().gemm``:
# the products are ``_product``'s (MKL's or SciPy's BLAS), and nothing here holds the GIL.


@compile_
def _finish_rows(out, lse, n, first, acc, row_max, row_sum, unscale, sink):  # type: ignore[no-untyped-def]
    """Output rows first … first + l of slice n from acc (l, Ev), m and l, the sink
    (``sink`` = (on, s)) joined last as one more key of value 0, as ``_tiled._forward_block``:
    m' = max(m, s);  κ = e^(m − m');  l' = κ·l + e^(s − m');  O = unscale·κ·acc / l'
    (0 where l = 0: no key allowed, whatever the values);  lse = m' + log l'."""
    _wide_vectors()
    one = _in_dtype_of(1.0, row_max)
    for i in range(acc.shape[0]):
        top, total, kept = row_max[i], row_sum[i], one
        if sink[0]:
            joined = sink[1] if sink[1] > top else top  # a NaN maximum stays NaN
            kept = _exp(top - joined, row_max)  # 0 for a row with no key (m = −∞)
            total = total * kept + _exp(sink[1] - joined, row_max)
            top = joined
        for e in range(acc.shape[1]):
            out[n, first + i, e] = unscale * (acc[i, e] * kept / total) if row_sum[i] != 0 else 0
        lse[n, first + i] = top + np.log(total)


@compile_
def attend(blas, arrays, groups, slices, rows, variant, skip, scale, unscale, blocks, out, lse):  # type: ignore[no-untyped-def]
    """The forward, out (N, L, Ev) and lse (N, L), of some slices and rows. For each slice
    n and each block of queries Q_i:

        q = scale·Q_i;  m = −∞, l = 0
        for each block of keys K_j, V_j (those that meet the band when skipping):
            Z = q·K_jᵀ                                                          BLAS
            per row: Z ← softcap(Z) − slope·|j − (i + offset)|, −∞ outside the band;
                     online_softmax(Z, m, l) → α
            acc ← α·acc + P·V_j (the first: acc ← P·V_j)                        BLAS
        the sink joins; O_i = unscale·acc / l;  lse_i = m + log l    (_finish_rows)"""
    _wide_vectors()
    query, key, value = arrays
    block_q, block_k = blocks
    E, Ev, S, dtype = query.shape[2], value.shape[2], key.shape[1], query.dtype
    size_q, size_k = min(block_q, rows[1] - rows[0]), min(block_k, S)
    q_work, acc_work, part_work = (
        np.empty(size_q * E, dtype),
        np.empty(size_q * Ev, dtype),
        np.empty(size_q * Ev, dtype),
    )
    scores_work = np.empty(size_q * size_k, dtype)
    row_max, row_sum, rescale = np.empty(size_q, dtype), np.empty(size_q, dtype), np.empty(size_q, dtype)
    for n in range(slices[0], slices[1]):
        k, v = key[n // groups], value[n // groups]
        modifiers, sink = _slice_modifiers(variant, n), (variant[4][0], variant[4][1][n])
        for first in range(rows[0], rows[1], block_q):
            stop = min(first + block_q, rows[1])
            count = stop - first
            q, acc, part = _matrix(q_work, count, E), _matrix(acc_work, count, Ev), _matrix(part_work, count, Ev)
            _scaled_rows(query, n, first, scale, q)
            row_max[:] = -np.inf
            row_sum[:] = 0
            keys_from, keys_to = _band_keys(variant[0], skip, first, stop, S)
            for grid in range(keys_from - keys_from % block_k, keys_to, block_k):  # the blocks of keys met
                start, end = max(grid, keys_from), min(grid + block_k, keys_to)
                block = _matrix(scores_work, count, end - start)  # Z, then P, (l, keys)
                _product(blas, q, k[start:end].T, block)
                if _unmodified(modifiers, (first, stop), (start, end)):
                    online_softmax(block, row_max[:count], row_sum[:count], rescale[:count])
                else:
                    for i in range(count):
                        row = block[i]
                        top = _modified_row_max(row, first + i, start, modifiers)
                        _online_softmax_row(row, i, top, row_max, row_sum, rescale)
                # the first block's acc ← P·V is α·0 + P·V: α = e^(−∞ − m') is 0, or NaN where P is (that
                # NaN's sign may differ from α·0's, and MKL's product over one key may keep a −0 that + 0 lost)
                if start == keys_from:
                    _product(blas, block, v[start:end], acc)
                    continue
                _product(blas, block, v[start:end], part)
                for i in range(count):
                    alpha = rescale[i]
                    for e in range(Ev):
                        acc[i, e] = alpha * acc[i, e] + part[i, e]
            _finish_rows(out, lse, n, first, acc, row_max[:count], row_sum[:count], unscale, sink)


@compile_
def _backward_work(arrays, blocks):  # type: ignore[no-untyped-def]
    """The flat work arrays of ``_backward_block``, for its largest block."""
    query, value = arrays[0], arrays[2]
    block_q, block_k = blocks
    sizes = (block_q * query.shape[2], block_q * value.shape[2], block_q * block_k, block_q * block_k, block_k)
    return (np.empty(sizes[0], query.dtype), np.empty(sizes[1], query.dtype), np.empty(sizes[2], query.dtype),
            np.empty(sizes[3], query.dtype), np.empty(sizes[4], query.dtype))  # fmt: skip


@compile_
def _backward_block(blas, arrays, n, head, rows, keys, variant, scale, work):  # type: ignore[no-untyped-def]
    """One block of the backward, queries ``rows`` and keys ``keys`` of slice n: from the
    products Z = scale·Q_i·K_jᵀ and dP = dO_i·V_jᵀ (BLAS), per row: Z modified as in the
    forward, P_ij = exp(Z_ij − lse_i), dZ_ij = P_ij·(dP_ij − δ_i) and, with a softcap,
    dX_ij = dZ_ij·(1 − tanh²) (``_tiled._backward_block``). Returns views of the work
    arrays: scale·Q_i (l, E), dO_i (l, Ev), P and dX (l, keys)."""
    _wide_vectors()
    query, key, value, grad_out, lse, delta, low = arrays
    (first, stop), (start, end) = rows, keys
    count = stop - first
    q, d_out = _matrix(work[0], count, query.shape[2]), _matrix(work[1], count, value.shape[2])
    _scaled_rows(query, n, first, scale, q)
    d_out[:] = grad_out[n, first:stop]
    scores, grad = _matrix(work[2], count, end - start), _matrix(work[3], count, end - start)  # Z → P, dP → dX
    derivative = work[4][: end - start]
    _product(blas, q, key[head, start:end].T, scores)
    _product(blas, d_out, value[head, start:end].T, grad)
    modifiers = _slice_modifiers(variant, n)
    split = low.shape[0] > 0  # the lse in two parts somewhere (else low is empty, (0, 0))
    if _unmodified(modifiers, rows, keys):
        if split:
            softmax_backward_split(scores, lse[n, first:stop], low[n, first:stop], grad, delta[n, first:stop])
        else:
            softmax_backward(scores, lse[n, first:stop], grad, delta[n, first:stop])
        return q, d_out, scores, grad
    for i in range(count):
        row, grad_row = scores[i], grad[i]
        _modify_row_with_derivative_(row, first + i, start, modifiers, derivative)
        if split:
            _softmax_backward_split_row(row, grad_row, lse[n, first + i], low[n, first + i], delta[n, first + i])
        else:
            _softmax_backward_row(row, grad_row, lse[n, first + i], delta[n, first + i])
        if modifiers[2][0]:
            _multiply_(grad_row, derivative)
    return q, d_out, scores, grad


@compile_
def backward_keys(blas, arrays, groups, slices, keys, with_queries, variant, skip, scale, blocks, grads):  # type: ignore[no-untyped-def]
    """dK_j and dV_j of the blocks of keys in ``keys``, over every block of queries that
    sees them (those that meet the band when skipping), into grads = (dQ (N, L, E),
    dK (N, S, E), dV (N, S, Ev)), one key and value head per query head:

        dV_j = Σ_i P_ijᵀ·dO_i      dK_j = Σ_i dX_ijᵀ·(scale·Q_i)                BLAS
        with_queries (``keys`` is every key: the task owns whole slices):
        dQ_i = scale·Σ_j dX_ij·K_j                                             BLAS

    arrays = (query, key, value, dO, lse, δ, low), lse +∞ where every key is masked (the lse
    includes the sink, and δ the gradient of the lse: the sinks need nothing more here);
    P = exp((Z − lse) − low), low 0 but in the rows of a huge lse (``_tiled._exact_rows``),
    and empty, (0, 0), where it is 0 everywhere (the kernels of one subtraction then run)."""
    _wide_vectors()
    query, key, value = arrays[0], arrays[1], arrays[2]
    grad_q, grad_k, grad_v = grads
    block_q, block_k = blocks
    E, Ev, L, dtype = query.shape[2], value.shape[2], query.shape[1], query.dtype
    work = _backward_work(arrays, blocks)
    part_q, part_k, part_v = np.empty(block_q * E, dtype), np.empty(block_k * E, dtype), np.empty(block_k * Ev, dtype)
    total_k, total_v = np.empty(block_k * E, dtype), np.empty(block_k * Ev, dtype)
    for n in range(slices[0], slices[1]):
        head = n // groups
        if with_queries:
            grad_q[n] = 0
        for start in range(keys[0], keys[1], block_k):
            end = min(start + block_k, keys[1])
            dk, dv = _matrix(total_k, end - start, E), _matrix(total_v, end - start, Ev)
            step_k, step_v = _matrix(part_k, end - start, E), _matrix(part_v, end - start, Ev)
            dk[:] = 0
            dv[:] = 0
            queries_from, queries_to = _band_queries(variant[0], skip, start, end, L)
            for first in range(queries_from - queries_from % block_q, queries_to, block_q):  # the blocks met
                stop = min(first + block_q, L)
                q, d_out, weights, grad = _backward_block(
                    blas, arrays, n, head, (first, stop), (start, end), variant, scale, work
                )
                if with_queries:
                    step_q = _matrix(part_q, stop - first, E)
                    _product(blas, grad, key[head, start:end], step_q)
                    _add(grad_q[n, first:stop], step_q)
                _product(blas, weights.T, d_out, step_v)
                _product(blas, grad.T, q, step_k)
                _add(dv, step_v)
                _add(dk, step_k)
            grad_k[n, start:end] = dk
            grad_v[n, start:end] = dv
        if with_queries:
            grad_q[n] *= scale


@compile_
def backward_queries(blas, arrays, groups, slices, rows, variant, skip, scale, blocks, grad_q):  # type: ignore[no-untyped-def]
    """dQ_i = scale·Σ_j dX_ij·K_j of the query rows ``rows``, over the blocks of keys they
    see (those that meet the band when skipping, cut at its edges), into grad_q
    (N, L, E); arrays as ``backward_keys``'."""
    _wide_vectors()
    key = arrays[1]
    block_q, block_k = blocks
    E, S = key.shape[2], key.shape[1]
    work = _backward_work(arrays, blocks)
    total, part = np.empty(block_q * E, key.dtype), np.empty(block_q * E, key.dtype)
    for n in range(slices[0], slices[1]):
        head = n // groups
        for first in range(rows[0], rows[1], block_q):
            stop = min(first + block_q, rows[1])
            dq, step = _matrix(total, stop - first, E), _matrix(part, stop - first, E)
            dq[:] = 0
            keys_from, keys_to = _band_keys(variant[0], skip, first, stop, S)
            for grid in range(keys_from - keys_from % block_k, keys_to, block_k):
                start, end = max(grid, keys_from), min(grid + block_k, keys_to)
                grad = _backward_block(blas, arrays, n, head, (first, stop), (start, end), variant, scale, work)[3]
                _product(blas, grad, key[head, start:end], step)
                _add(dq, step)
            for i in range(stop - first):
                for e in range(E):
                    grad_q[n, first + i, e] = dq[i, e] * scale
