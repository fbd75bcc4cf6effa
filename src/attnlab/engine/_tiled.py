"""The tiled engine: online softmax over blocks of keys, O(L·Ev) extra memory per slice.

Forward, for one slice and one block of queries (Milakov & Gimelshein 2018; Dao 2023):

    m = −∞, l = 0, acc = 0
    for each block of keys K_j, V_j (blocks outside the band of is_causal and the window,
    or that the mask function rules out, are skipped unless a non-finite value there would
    make a NaN, as the naive engine gives):
        Z_j = softcap(scale · Q·K_jᵀ) + biases_j, masked     (block_q, block_k; ``_masks``)
        m' = max(m, rowmax Z_j);  P_j = exp(Z_j − m')
        l = e^(m − m')·l + rowsum P_j
        acc = e^(m − m')·acc + dropout(P_j)·V_j
        m = m'
    O = acc / l,  lse = m + log l      (a sink s joins last: m' = max(m, s),
                                        l' = e^(m − m')·l + e^(s − m'), O = e^(m − m')·acc / l')

Backward recomputes P_ij = exp(Z_ij − lse_i) block by block instead of storing P, with
δ_i = rowsum(dO_i∘O_i) − dlse_i, dZ_ij = P_ij∘(dO_i·V_jᵀ − δ_i) and dX_ij = dZ_ij∘softcap′
(in a row of a huge lse, P_ij = exp((Z_ij − m_i) − log l_i) and δ_i = Σ_j P_ij·dP_ij − dlse_i,
recomputed: ``_exact_rows``; V by 2⁻ᵏ where dO·Vᵀ could overflow, dQ and dK scaled back):

    dV_j = Σ_i P_ijᵀ·dO_i    dK_j = scale·Σ_i dX_ijᵀ·Q_i    dQ_i = scale·Σ_j dX_ij·K_j

With many slices, each task owns one slice and makes all three in one pass. With few,
each slice is split: tasks over key blocks make dK_j and dV_j, tasks over query blocks
make dQ_i (P_ij computed twice). A float mask's gradient, Σ dZ over the slices that
share each of its slices, is made by the tasks over query blocks, one per mask slice and
block of rows, always split so. Either way no two tasks write the same rows, and every
sum runs in one order.

The elementwise work on each block goes through ``Kernels``: NumPy's here, numba's in
``fused`` (engine="fused"), whose kernels also schedule whole compiled tasks for
attention with no mask and no dropout (``fused._tasks``). Tasks run on the thread pool of
``_threads``. A task's arithmetic depends only on the block sizes, not on which thread
runs it or how many there are, so the results are the same bits for any thread count.
Letters as in ``_problem``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .._validation import Array
from ._masks import mask_mod_allows, modify_scores_
from ._problem import Engine, Problem, Saved
from ._threads import blas_single_threaded, run

__all__ = [
    "BLOCK_K",
    "BLOCK_Q",
    "CAUSAL_BLOCK_Q",
    "EXACT_DELTA_FROM",
    "NUMPY",
    "ONE_PASS_BACKWARD_FROM",
    "TILED",
    "BackwardPass",
    "BlockedEngine",
    "ForwardPass",
    "Kernels",
    "Slice",
    "Task",
    "backward",
    "block_scores",
    "blocks",
    "forward",
    "forward_block_q",
    "join_sink",
    "key_blocks",
    "kv_batch_shape",
    "slice_views",
]

# Block sizes: 512 queries × 512 keys of float32 scores is 1 MiB, which stays in a
# core's L2 cache with its Q and K rows, and makes each block's products large enough
# for BLAS to run near its peak (512 × 512 measured 10-15 % faster than 256 × 1024 with
# E = 64, forward and backward). They fix the order of every sum, so changing them
# changes the last bits of the results (never the dropout masks: see ``_masks``).
BLOCK_Q = 512
BLOCK_K = 512
# The forward's query blocks when the band has an upper limit (causal, or a window's right
# side): a block on the diagonal computes a triangle of scores that the mask then removes,
# and smaller blocks waste less (the compiled forward: 256 measured 1-7 % faster than 512 on
# causal shapes from 14 heads of 512 to 8 of 4096; NumPy's: B1 H8 L=S=4096 E64 causal,
# 1.6-1.75× faster than full with 512, see docs/benchmarks.md).
CAUSAL_BLOCK_Q = 256
# From this many slices on, the backward gives each thread whole slices (one pass, less
# work); below it, it splits slices into blocks to keep every thread busy. A constant,
# not the thread count, decides, so the bits never depend on the thread count.
ONE_PASS_BACKWARD_FROM = 8
# Rows whose |lse| is at least this have their lse split into m + log l and their δ
# recomputed as Σ_j P_ij·dP_ij (``_exact_rows``): only huge scores lose digits to the lse's
# rounding or make one key take a row's whole weight, and ordinary attention's lse (log S
# plus a few) stays far below it, so its backward does no more work.
EXACT_DELTA_FROM = 64.0

Task = Callable[[], None]


@dataclass(frozen=True)
class ForwardPass:
    """What every forward task reads, and the results they write (no two the same rows),
    over the n = B·H slices."""

    pb: Problem
    value: Array  # V·2⁻ᵏ, (B…, S, Ev)
    exponent: int  # k, undone on the output
    skip: bool  # skip the blocks no key of which is allowed (none could make a NaN)
    output: Array  # O, (n, L, Ev)
    lse: Array  # (n, L)


@dataclass(frozen=True)
class BackwardPass:
    """What every backward task reads, and the gradients they write (no two the same
    rows), over the n = B·H slices."""

    pb: Problem
    value: Array  # V·2⁻ᵏ, (B…, S, Ev): dP = dO·Vᵀ cannot overflow (``_gradient_exponent``)
    grad_output: Array  # dO, (n, L, Ev)
    lse: Array  # (n, L), +∞ where every key is masked (P = 0 there); m in the rows of a huge lse
    lse_low: Array  # (n, L): log l in the rows of a huge lse, else 0; P = exp((Z − lse) − lse_low)
    delta: Array  # δ·2⁻ᵏ, (n, L)
    skip: bool  # skip the blocks no key of which is allowed (none could make a NaN)
    scale: Array  # 0-d, in the compute dtype
    grad_query: Array  # dQ, (n, L, E)
    grad_key: Array  # dK, (n, S, E), one key head per query head
    grad_value: Array  # dV, (n, S, Ev)
    # a float mask's gradient, by (mask slice, first row of a block): Σ dZ over those rows
    # (or summed over them where the mask broadcasts along L) and every key
    grad_mask_parts: dict[tuple[int, int], Array] = field(default_factory=dict)


@dataclass(frozen=True)
class Kernels:
    """The elementwise work on one block of scores Z (l, s), in place, and optionally
    whole tasks compiled. ``NUMPY`` is the oracle; ``attnlab.engine.fused`` compiles the same
    two block kernels (row by row, in cache) and schedules its compiled tasks."""

    # m' = max(m, rowmax Z); Z ← exp(Z − m'[:, None]); l ← α·l + rowsum Z; m ← m'; returns
    # α = e^(m − m'), (l,); arguments Z, m, l, with m and l (l,) updated in place
    online_softmax_: Callable[[Array, Array, Array], Array]
    # Z ← P = exp((Z − lse[:, None]) − low[:, None]);  dP ← dZ = P∘(dP − δ[:, None]);
    # arguments Z, lse, dP, δ, low (None: 0)
    softmax_backward_: Callable[[Array, Array, Array, Array, Array | None], None]
    # The tasks of a whole forward or backward, compiled, for attention with no mask, no
    # mask function and no dropout, given the pass and the thread count (None, or a call
    # that returns None: the loops below, in Python).
    forward_tasks: Callable[[ForwardPass, int | None], list[Task] | None] | None = None
    backward_tasks: Callable[[BackwardPass, int | None], list[Task] | None] | None = None
    # A whole forward for a few queries against many keys (``fused._decode``), given the
    # problem and the thread count: (O (B…, L, Ev), lse (B…, L)), or None for a problem it
    # does not take.
    decode: Callable[[Problem, int | None], tuple[Array, Array] | None] | None = None


def _online_softmax_numpy(scores: Array, row_max: Array, row_sum: Array) -> Array:
    new_max = np.maximum(row_max, scores.max(axis=1))
    shift = np.where(np.isneginf(new_max), 0.0, new_max)  # rows with no key visible yet: exp(−∞ − 0) = 0
    scores -= shift[:, None]
    np.exp(scores, out=scores)
    rescale = np.exp(row_max - shift)
    row_sum *= rescale
    row_sum += scores.sum(axis=1)
    row_max[...] = new_max
    return rescale


def _softmax_backward_numpy(scores: Array, lse: Array, grad: Array, delta: Array, low: Array | None = None) -> None:
    scores -= lse[:, None]
    if low is not None and low.any():
        scores -= low[:, None]
    np.exp(scores, out=scores)
    grad -= delta[:, None]
    grad *= scores


NUMPY = Kernels(_online_softmax_numpy, _softmax_backward_numpy)


@dataclass(frozen=True)
class Slice:
    """Views of one (batch, head) slice n: q (L, E), k (S, E), v (S, Ev), mask (L, S) or None."""

    n: int
    q: Array
    k: Array
    v: Array
    mask: Array | None


def kv_batch_shape(pb: Problem) -> tuple[int, ...]:
    """The batch shape of keys and values: B… with Hk = H / groups heads last."""
    batch = pb.batch_shape
    return (*batch[:-1], batch[-1] // pb.groups) if pb.groups > 1 else batch


def slice_views(pb: Problem, value: Array) -> list[Slice]:
    """One entry per (batch, head) slice, as views (broadcast dimensions are not copied)."""
    batch, kv_batch = pb.batch_shape, kv_batch_shape(pb)
    L, S = pb.lengths
    E, Ev = pb.query.shape[-1], value.shape[-1]
    q = np.broadcast_to(pb.query, (*batch, L, E))
    k = np.broadcast_to(pb.key, (*kv_batch, S, E))
    v = np.broadcast_to(value, (*kv_batch, S, Ev))
    mask = None if pb.mask is None else np.broadcast_to(pb.mask, (*batch, L, S))
    slices = []
    for n, index in enumerate(np.ndindex(*batch)):
        kv_index = np.unravel_index(n // pb.groups, kv_batch) if kv_batch else ()
        slices.append(Slice(n, q[index], k[kv_index], v[kv_index], None if mask is None else mask[index]))
    return slices


def forward_block_q(pb: Problem) -> int:
    """The forward's block of queries: CAUSAL_BLOCK_Q where the band has an upper limit
    (its diagonal blocks then compute half as many scores that the mask removes), else BLOCK_Q."""
    return CAUSAL_BLOCK_Q if pb.rules.band.highest < pb.lengths[1] - 1 else BLOCK_Q


def blocks(length: int, size: int) -> list[slice]:
    """[0, length) cut into consecutive slices of ``size`` (the last one shorter)."""
    return [slice(start, min(start + size, length)) for start in range(0, length, size)]


def key_blocks(pb: Problem, rows: slice, skip: bool) -> list[slice]:
    """The blocks of keys that query rows ``rows`` read: with ``skip``, those that meet
    the band (the first and last cut at its edges)."""
    S = pb.lengths[1]
    first, stop = pb.rules.band.keys(rows, S) if skip else (0, S)
    return [
        slice(max(c.start, first), min(c.stop, stop)) for c in blocks(S, BLOCK_K) if c.start < stop and c.stop > first
    ]


def _query_blocks(pb: Problem, cols: slice, skip: bool) -> list[slice]:
    """The blocks of queries that read keys ``cols``: with ``skip``, those that meet the band."""
    L = pb.lengths[0]
    first, stop = pb.rules.band.queries(cols, L) if skip else (0, L)
    return [r for r in blocks(L, BLOCK_Q) if r.start < stop and r.stop > first]


def _magnitude_bound(x: Array) -> float:
    """2·√(Σ x²) by one BLAS dot, with BLAS at one thread (its threads, once woken, spin
    on the cores the tasks then need): at least max |x| (a rounded sum of squares is at
    least its largest term, rounded; the 2 covers that rounding) unless the squares
    underflow, below about 2⁻⁵³⁷ in float64 and 2⁻⁷⁵ in float32, where no sum of the
    callers' can overflow; finite only where every element is (NaN or ∞ where one is not,
    or where the sum overflows: the callers then look exactly); ∞ for an array that is
    neither C- nor Fortran-contiguous (flattening it would copy it)."""
    if not (x.flags.c_contiguous or x.flags.f_contiguous):
        return math.inf
    flat = x.ravel(order="K")  # (x.size,), a view in memory order
    with blas_single_threaded(), np.errstate(over="ignore", invalid="ignore"):
        return 2 * math.sqrt(float(np.dot(flat, flat)))


def _value_exponent(value: Array, length: int) -> tuple[int, bool]:
    """(k, whether every value is finite), k such that Σ over ``length`` rows of the finite
    values scaled by 2⁻ᵏ cannot overflow: 0 unless they are within a factor ``length`` of
    the dtype's largest number. Scaling by a power of two is exact, so the results keep their
    bits. One pass where ``_magnitude_bound`` settles it (every value finite, and the bound
    within the headroom), else three more."""
    headroom = float(np.finfo(value.dtype).max) / max(length, 1) / 4
    if _magnitude_bound(value) <= headroom:
        return 0, True
    low, high = float(value.min(initial=0.0)), float(value.max(initial=0.0))  # NaN if any is NaN
    finite = bool(np.isfinite(low) and np.isfinite(high))
    largest = max(-low, high) if finite else float(np.max(np.abs(value), initial=0.0, where=np.isfinite(value)))
    return (max(0, int(np.ceil(np.log2(largest / headroom)))) if largest > headroom else 0), finite


def _sums_finitely(x: Array) -> bool:
    """Whether x's sum is finite, in one pass without a temporary: then every element is (a
    NaN or an infinity makes the sum so); a sum that overflows says False for finite
    elements, and the backward then only skips fewer blocks."""
    with np.errstate(over="ignore", invalid="ignore"):
        return math.isfinite(float(np.sum(x)))


def _largest_finite(x: Array) -> float:
    """max |x| over the finite elements (0 for none): from x's least and greatest elements,
    two passes without a temporary, where all are finite."""
    largest = max(-float(x.min(initial=0.0)), float(x.max(initial=0.0)))  # NaN or ∞ if any is
    return largest if math.isfinite(largest) else float(np.max(np.abs(x), initial=0.0, where=np.isfinite(x)))


def _gradient_exponent(value: Array, grad_output: Array, bounds: tuple[float, float] | None = None) -> int:
    """k such that dP = dO·(V·2⁻ᵏ)ᵀ, and dP − δ·2⁻ᵏ, cannot overflow for the finite values:
    0 unless max|V|·max|dO|·Ev is within a factor 4 of the dtype's largest number. The
    backward then makes dZ in units of 2ᵏ and scales dQ and dK back (exact: a power of two),
    as the forward scales V (``_value_exponent``). Two passes where the bounds of
    ``_magnitude_bound`` give 0, else four more. (A bound of 0 for an array that is not
    all zeros, its squares underflowing, gives 0 too, rightly: with max |V| below 2⁻⁵³⁷,
    or 2⁻⁷⁵ in float32, the product overflows only for Ev beyond 2⁵³⁵, or 2⁷³.) ``bounds``:
    those of V and dO where the caller has them already."""

    def from_largest(largest_value: float, largest_grad: float) -> int:
        if largest_value == 0.0 or largest_grad == 0.0:
            return 0
        bits = math.log2(largest_value) + math.log2(largest_grad) + math.log2(max(value.shape[-1], 1)) + 2
        return max(0, math.ceil(bits - math.log2(float(np.finfo(value.dtype).max))))

    if bounds is None:
        bounds = _magnitude_bound(value), _magnitude_bound(grad_output)
    if all(math.isfinite(bound) for bound in bounds) and from_largest(*bounds) == 0:
        return 0
    return from_largest(_largest_finite(value), _largest_finite(grad_output))


def block_scores(
    pb: Problem, s: Slice, q_scaled: Array, rows: slice, cols: slice, skip: bool, derivative: bool = False
) -> tuple[Array, Array | None] | None:
    """Z of one block, (rows, cols), and softcap's derivative there when asked for (see
    ``_masks``); None when ``skip`` and the mask function rules out the whole block."""
    allowed = mask_mod_allows(pb, s.n, rows, cols)
    if skip and allowed is not None and not allowed.any():
        return None
    scores = q_scaled @ s.k[cols].T  # (block_q, block_k)
    mask = None if s.mask is None else s.mask[rows, cols]
    return scores, modify_scores_(pb, scores, mask, s.n, rows, cols, allowed, derivative)


def join_sink(row_max: Array, row_sum: Array, sink: float | Array) -> tuple[Array, Array, Array]:
    """An online softmax's (m, l) of some rows (l,) with the sink s joined last, as one more
    key: m' = max(m, s), l' = e^(m − m')·l + e^(s − m'); and e^(m − m') (0 for a row with no
    key), which rescales what was accumulated with the old m."""
    top = np.maximum(row_max, sink)  # m'
    kept = np.exp(row_max - top)  # e^(m − m')
    return top, row_sum * kept + np.exp(sink - top), kept


def _forward_block(fp: ForwardPass, s: Slice, rows: slice, kernels: Kernels) -> None:
    """Output rows and lse of one block of queries, by online softmax."""
    pb, out, lse = fp.pb, fp.output[s.n], fp.lse[s.n]
    q_scaled = s.q[rows] * np.asarray(pb.scale, dtype=s.q.dtype)  # (block_q, E)
    row_max = np.full(q_scaled.shape[0], -np.inf, dtype=q_scaled.dtype)  # m, (block_q,)
    row_sum = np.zeros(q_scaled.shape[0], dtype=q_scaled.dtype)  # l, before dropout, (block_q,)
    acc = np.zeros((q_scaled.shape[0], s.v.shape[1]), dtype=q_scaled.dtype)  # Σ P·V, (block_q, Ev)
    for cols in key_blocks(pb, rows, fp.skip):
        block = block_scores(pb, s, q_scaled, rows, cols, fp.skip)
        if block is None:
            continue
        weights = block[0]
        rescale = kernels.online_softmax_(weights, row_max, row_sum)  # P_j = exp(Z_j − m'); m, l updated
        acc *= rescale[:, None]  # e^(m − m'), 0 on the first block
        dropout = pb.dropout(s.n, rows, cols)
        if dropout is not None:
            weights *= dropout
        acc += weights @ s.v[cols]
    empty = row_sum == 0
    sinks = pb.per_slice(pb.rules["sinks"])
    if sinks is not None:  # the sink joins last, as one more key of value 0
        row_max, row_sum, kept = join_sink(row_max, row_sum, sinks[s.n])
        acc *= kept[:, None]
    np.ldexp(acc / row_sum[:, None], fp.exponent, out=out[rows])  # undo the values' 2⁻ᵏ
    out[rows][empty] = 0.0  # a row whose keys are all masked is 0, whatever the values
    lse[rows] = row_max + np.log(row_sum)


def forward(pb: Problem, threads: int | None = None, kernels: Kernels = NUMPY) -> tuple[Array, Array]:
    """Return (O (B…, L, Ev), lse (B…, L))."""
    decoded = None if kernels.decode is None else kernels.decode(pb, threads)
    if decoded is not None:
        return decoded
    L, S = pb.lengths
    n = pb.slices
    exponent, finite = _value_exponent(pb.value, S)
    fp = ForwardPass(
        pb,
        np.ldexp(pb.value, -exponent) if exponent else pb.value,
        exponent,
        # Blocks with no key allowed are skipped only when no value there could make a NaN
        # (0·NaN): the result is then the same as reading them.
        finite,
        np.empty((n, L, pb.value.shape[-1]), dtype=pb.compute_dtype),  # (B·H, L, Ev)
        np.empty((n, L), dtype=pb.compute_dtype),  # (B·H, L)
    )
    compiled = kernels.forward_tasks(fp, threads) if kernels.forward_tasks is not None and pb.compiles_whole else None
    if compiled is not None:
        tasks = compiled
    else:
        slices = slice_views(pb, fp.value)
        tasks = [
            functools.partial(_forward_block, fp, s, rows, kernels)
            for rows in reversed(blocks(L, forward_block_q(pb)))  # causal: the last rows see the most keys
            for s in slices
        ]
    run(tasks, threads)
    return fp.output.reshape(pb.output_shape), fp.lse.reshape(*pb.batch_shape, L)  # (B…, L, Ev), (B…, L)


def _exact_rows(
    pb: Problem, grad_output: Array, saved: Saved, lse: Array, skip: bool, value: Array, exponent: int
) -> tuple[Array, Array, Array]:
    """(lse (n, L), lse_low (n, L), δ·2⁻ᵏ (n, L)) for the backward, the rows whose |lse| is
    at least EXACT_DELTA_FROM recomputed in the forward's order of operations:

        m = max(max_j Z_ij, sink),  l = Σ_j e^(Z_ij − m) + e^(sink − m)
        lse_i → m,  lse_low_i = log l,  so that P_ij = exp((Z_ij − m) − log l)
        δ_i → Σ_j P_ij·dP_ij − dlse_i

    lse = m + log l rounds away the digits of log l (and so of every P) once |m| is large,
    and rowsum(dO∘O), the same sum as Σ_j P_ij·dP_ij in another order, must be exactly dP_ij
    where one key takes a row's whole weight, or dZ = P∘(dP − δ) is a rounding error that
    dK = scale·dZᵀ·Q multiplies by the huge element; softmax's own backward (and torch's)
    makes it so. The saved δ = rowsum(dO∘O) − dlse becomes δ + (Σ_j P_ij·dP_ij −
    rowsum(dO∘O)), the difference of two nearly equal sums, exact (Sterbenz), so that
    without a dlse δ is Σ_j P_ij·dP_ij itself. All of δ in units of 2ᵏ, k = ``exponent``,
    with ``value`` = V·2⁻ᵏ. ``lse`` (n, L) is +∞ where every key is masked; other rows keep
    the saved lse and δ."""
    L = pb.lengths[0]
    delta = saved.delta.reshape(pb.slices, L)  # (B·H, L)
    delta = np.ldexp(delta, -exponent) if exponent else delta  # exact: a power of two
    low = np.zeros_like(lse)  # (B·H, L)
    risky = np.isfinite(lse) & (np.abs(lse) >= EXACT_DELTA_FROM)  # (B·H, L)
    if not risky.any():
        return lse, low, delta
    lse, delta = lse.copy(), delta.copy()
    output = saved.output.reshape(pb.slices, L, -1)  # O, (B·H, L, Ev)
    output = np.ldexp(output, -exponent) if exponent else output
    sinks = pb.per_slice(pb.rules["sinks"])
    for s in slice_views(pb, value):
        for rows in blocks(L, BLOCK_Q):
            keep = risky[s.n, rows]
            if keep.any():
                top, total, weighted = _row_sums(pb, s, rows, skip, grad_output, None if sinks is None else sinks[s.n])
                row_sums = np.einsum("le,le->l", grad_output[s.n, rows], output[s.n, rows])  # rowsum(dO∘O), (block_q,)
                lse[s.n, rows][keep] = top[keep]
                low[s.n, rows][keep] = np.log(total[keep])
                delta[s.n, rows][keep] += (weighted / total - row_sums)[keep]
    return lse, low, delta


def _row_sums(
    pb: Problem, s: Slice, rows: slice, skip: bool, grad_output: Array, sink: float | None
) -> tuple[Array, Array, Array]:
    """(m, l, Σ_j e^(Z_ij − m)·dP_ij) of the query rows ``rows`` of slice ``s`` (block_q,),
    by two passes over their blocks of keys (the first for m); ``_exact_rows``."""
    q_scaled = s.q[rows] * np.asarray(pb.scale, dtype=s.q.dtype)  # (block_q, E)
    count = rows.stop - rows.start
    top = np.full(count, -np.inf if sink is None else sink, dtype=q_scaled.dtype)  # m, (block_q,)
    cols_list = key_blocks(pb, rows, skip)
    for cols in cols_list:
        block = block_scores(pb, s, q_scaled, rows, cols, skip)
        if block is not None:
            np.maximum(top, block[0].max(axis=1), out=top)
    total = np.zeros(count, dtype=q_scaled.dtype) if sink is None else np.exp(sink - top)  # l, (block_q,)
    weighted = np.zeros(count, dtype=q_scaled.dtype)  # Σ_j e^(Z_ij − m)·dP_ij, (block_q,)
    for cols in cols_list:
        block = block_scores(pb, s, q_scaled, rows, cols, skip)
        if block is None:
            continue
        weights = np.exp(block[0] - top[:, None])  # e^(Z_ij − m), (block_q, block_k)
        grad_weights = grad_output[s.n, rows] @ s.v[cols].T  # dP_ij, (block_q, block_k)
        dropout = pb.dropout(s.n, rows, cols)
        if dropout is not None:
            grad_weights *= dropout
        total += weights.sum(axis=1)
        weighted += (weights * grad_weights).sum(axis=1)
    return top, total, weighted


def _backward_block(
    bp: BackwardPass, s: Slice, rows: slice, cols: slice, kernels: Kernels
) -> tuple[Array, Array | None, Array, Array] | None:
    """P_ij, the dropout factor, dZ_ij and dX_ij = dZ_ij∘softcap′ (dZ_ij itself without a
    softcap) of one block; None when it is skipped."""
    block = block_scores(bp.pb, s, s.q[rows] * bp.scale, rows, cols, bp.skip, derivative=True)  # Z_ij
    if block is None:
        return None
    weights, cap_derivative = block
    dropout = bp.pb.dropout(s.n, rows, cols)
    grad_scores = bp.grad_output[s.n, rows] @ s.v[cols].T  # dP_ij, (block_q, block_k)
    if dropout is not None:
        grad_scores *= dropout
    # P_ij, dZ = P∘(dP − δ)
    kernels.softmax_backward_(weights, bp.lse[s.n, rows], grad_scores, bp.delta[s.n, rows], bp.lse_low[s.n, rows])
    return weights, dropout, grad_scores, grad_scores if cap_derivative is None else grad_scores * cap_derivative


def _keys_task(bp: BackwardPass, s: Slice, cols: slice, kernels: Kernels, with_queries: bool = False) -> None:
    """dK_j and dV_j of one block of keys. ``with_queries`` also adds dX_ij·K_j into
    dQ_i, which only a task that owns the whole slice may do."""
    grad_key = np.zeros((cols.stop - cols.start, bp.grad_key.shape[-1]), dtype=bp.grad_key.dtype)  # (block_k, E)
    grad_value = np.zeros((cols.stop - cols.start, bp.grad_value.shape[-1]), dtype=bp.grad_value.dtype)
    for rows in _query_blocks(bp.pb, cols, bp.skip):
        block = _backward_block(bp, s, rows, cols, kernels)
        if block is None:
            continue
        weights, dropout, _, grad_logits = block
        if with_queries:
            bp.grad_query[s.n, rows] += grad_logits @ s.k[cols]
        if dropout is not None:
            weights *= dropout
        grad_value += weights.T @ bp.grad_output[s.n, rows]
        grad_key += grad_logits.T @ s.q[rows]
    bp.grad_key[s.n, cols] = grad_key * bp.scale
    bp.grad_value[s.n, cols] = grad_value


def _queries_task(bp: BackwardPass, group: list[Slice], rows: slice, kernels: Kernels, mask_slice: int) -> None:
    """dQ_i of one block of queries, for each slice of ``group``; with a float mask, also
    the part of its gradient over these rows that the group makes (the group is then the
    slices that share mask slice ``mask_slice``)."""
    float_mask = bp.pb.mask is not None and bp.pb.mask.dtype != bool
    if float_mask:
        mask_rows, mask_cols = (1, 1, *bp.pb.mask.shape)[-2:]  # type: ignore[union-attr]  # a 0-d or 1-d mask: 1s
        part = np.zeros((rows.stop - rows.start if mask_rows > 1 else 1, mask_cols), dtype=bp.grad_query.dtype)
    for s in group:
        grad_query = np.zeros((rows.stop - rows.start, bp.grad_query.shape[-1]), dtype=bp.grad_query.dtype)
        for cols in key_blocks(bp.pb, rows, bp.skip):
            block = _backward_block(bp, s, rows, cols, kernels)
            if block is None:
                continue
            grad_query += block[3] @ s.k[cols]
            if float_mask:  # dZ, summed along the dimensions the mask broadcasts along
                grad_scores = block[2] if mask_rows > 1 else block[2].sum(axis=0, keepdims=True)
                if mask_cols > 1:
                    part[:, cols] += grad_scores
                else:
                    part += grad_scores.sum(axis=1, keepdims=True)
        bp.grad_query[s.n, rows] = grad_query * bp.scale
    if float_mask:
        bp.grad_mask_parts[mask_slice, rows.start] = part


def _slice_task(bp: BackwardPass, s: Slice, kernels: Kernels) -> None:
    """The whole backward of one slice in one pass over its key blocks."""
    bp.grad_query[s.n] = 0.0
    for cols in blocks(bp.pb.lengths[1], BLOCK_K):
        _keys_task(bp, s, cols, kernels, with_queries=True)
    bp.grad_query[s.n] *= bp.scale


def _mask_slices(pb: Problem) -> Array:
    """The slice of a float mask that each of the n slices reads, (n,): its index in the
    mask's batch dimensions (all 0 where the mask broadcasts)."""
    assert pb.mask is not None
    batch = pb.mask.shape[:-2]
    return np.broadcast_to(np.arange(math.prod(batch)).reshape(batch), pb.batch_shape).reshape(-1)  # (n,)


def _backward_tasks(bp: BackwardPass, kernels: Kernels) -> list[Task]:
    """The backward's tasks in Python, largest first: with causal masking the first keys
    and the last queries have the most work."""
    pb = bp.pb
    L, S = pb.lengths
    slices = slice_views(pb, bp.value)
    float_mask = pb.mask is not None and pb.mask.dtype != bool
    if pb.slices >= ONE_PASS_BACKWARD_FROM and not float_mask:  # one task per slice: 5 products, one exp per block
        return [functools.partial(_slice_task, bp, s, kernels) for s in slices]
    # two passes, 7 products and two exps per block
    tasks: list[Task] = [
        functools.partial(_keys_task, bp, s, cols, kernels) for cols in blocks(S, BLOCK_K) for s in slices
    ]
    reads = _mask_slices(pb) if float_mask else np.arange(pb.slices)  # each group: the slices of one mask slice
    groups: dict[int, list[Slice]] = {}
    for s in slices:  # one pass: n slices each reading their own mask slice are n groups of one
        groups.setdefault(int(reads[s.n]), []).append(s)
    tasks += [
        functools.partial(_queries_task, bp, group, rows, kernels, m)
        for rows in reversed(blocks(L, BLOCK_Q))
        for m, group in groups.items()
    ]
    return tasks


def _grad_mask(bp: BackwardPass) -> Array | None:
    """A float mask's gradient, in its shape, from the query tasks' parts (summed in the
    order of their rows, whatever the order the tasks ran in)."""
    mask = bp.pb.mask
    if mask is None or mask.dtype == bool:
        return None
    shape = (*mask.shape[:-2], *(1, 1, *mask.shape)[-2:])  # (…, Lm, Sm), 1s before a 0-d or 1-d mask
    grad = np.zeros((math.prod(shape[:-2]), *shape[-2:]), dtype=bp.grad_query.dtype)  # (mask slices, Lm, Sm)
    for (m, first), part in sorted(bp.grad_mask_parts.items()):
        if shape[-2] > 1:
            grad[m, first : first + part.shape[0]] += part
        else:
            grad[m] += part
    return grad.reshape(mask.shape)


def backward(
    pb: Problem, grad_output: Array, saved: Saved, threads: int | None = None, kernels: Kernels = NUMPY
) -> tuple[Array, Array, Array, Array | None]:
    """(dQ (B…, L, E), dK (B…, S, E), dV (B…, S, Ev), the float mask's gradient in its
    shape or None) from dO (B…, L, Ev) and the forward's ``saved`` results; key and value
    heads expanded for GQA, as the naive engine gives them."""
    L, S = pb.lengths
    E, Ev = pb.query.shape[-1], pb.value.shape[-1]
    n = pb.slices
    dtype = pb.compute_dtype
    grad_output = np.broadcast_to(grad_output, pb.output_shape).reshape(n, L, Ev)  # dO, (B·H, L, Ev)
    lse = np.where(np.isneginf(saved.lse), np.inf, saved.lse).reshape(n, L)  # fully masked rows: P = 0, (B·H, L)
    # as in the forward: skip blocks with no key allowed only when they could add no NaN; a
    # finite bound of V or dO says that all its elements are finite, without a second pass
    bounds = _magnitude_bound(pb.value), _magnitude_bound(grad_output)
    finite = all(_sums_finitely(x) for x in (pb.query, pb.key, saved.delta)) and all(
        math.isfinite(bound) or _sums_finitely(x) for bound, x in zip(bounds, (pb.value, grad_output), strict=True)
    )
    exponent = _gradient_exponent(pb.value, grad_output, bounds)
    value = np.ldexp(pb.value, -exponent) if exponent else pb.value  # V·2⁻ᵏ, (B…, S, Ev)
    exact = bool((np.isfinite(lse) & (np.abs(lse) >= EXACT_DELTA_FROM)).any())  # rows _exact_rows recomputes
    with np.errstate(all="ignore"):
        lse, lse_low, delta = _exact_rows(pb, grad_output, saved, lse, finite, value, exponent)  # (B·H, L) each
    bp = BackwardPass(
        pb,
        value,
        grad_output,
        lse,
        lse_low,
        delta,
        finite,
        np.asarray(pb.scale, dtype=dtype),
        np.empty((n, L, E), dtype=dtype),  # (B·H, L, E)
        np.empty((n, S, E), dtype=dtype),  # (B·H, S, E)
        np.empty((n, S, Ev), dtype=dtype),  # (B·H, S, Ev)
    )
    # rows of a huge lse: their m and δ came from _scores' products, so their blocks' Z must too
    # (a compiled task's own product, MKL's on an AMD core, may round Z's maximum otherwise)
    whole = pb.compiles_whole and not exact
    compiled = kernels.backward_tasks(bp, threads) if kernels.backward_tasks is not None and whole else None
    tasks = _backward_tasks(bp, kernels) if compiled is None else compiled
    run(tasks, threads)
    grad_mask = _grad_mask(bp)
    if exponent:  # dZ was made in units of 2ᵏ: dQ, dK and the mask's gradient (not dV = Pᵀ·dO)
        for grad in (bp.grad_query, bp.grad_key, *([] if grad_mask is None else [grad_mask])):
            np.ldexp(grad, exponent, out=grad)
    batch = pb.batch_shape
    return (
        bp.grad_query.reshape(*batch, L, E),  # (B…, L, E)
        bp.grad_key.reshape(*batch, S, E),  # (B…, S, E), one key head per query head
        bp.grad_value.reshape(*batch, S, Ev),  # (B…, S, Ev)
        grad_mask,
    )


@dataclass(frozen=True)
class BlockedEngine:
    """An engine that runs by blocks of keys, :func:`forward` and :func:`backward` with its
    ``kernels``: O(L·Ev) extra memory, so it never holds the (L, S) weights, and its
    backward starts from the forward's O and lse (``attnlab.engine.EngineImpl``)."""

    name: Engine
    kernels: Kernels
    requirement: str | None = None  # what it needs installed, for the error when it is not available

    @property
    def blocked(self) -> bool:
        """True: it runs by blocks of keys."""
        return True

    @property
    def compiled(self) -> bool:
        """Whether its tasks are compiled whole when there is no mask and no dropout."""
        return self.kernels.forward_tasks is not None

    def available(self) -> bool:
        """True: NumPy is all it needs (the fused engine says otherwise)."""
        return True

    def forward(self, pb: Problem, threads: int | None) -> tuple[Array, Array, None]:
        """(O (B…, L, Ev), lse (B…, L), no weights), in the compute dtype."""
        return (*forward(pb, threads, self.kernels), None)

    def backward(
        self, pb: Problem, grad_output: Array, saved: Saved, threads: int | None
    ) -> tuple[Array, Array, Array, Array | None]:
        """:func:`backward` from the forward's ``saved`` results."""
        return backward(pb, grad_output, saved, threads, self.kernels)


TILED = BlockedEngine("tiled", NUMPY)
