"""The tiled engine: online softmax over blocks of keys, O(L·Ev) extra memory per slice.

Forward, for one slice and one block of queries (Milakov & Gimelshein 2018; Dao 2023):

    m = −∞, l = 0, acc = 0
    for each block of keys K_j, V_j (when causal, blocks above the diagonal are skipped
    unless a non-finite value there would make a NaN, as the naive engine gives):
        Z_j = scale · Q·K_jᵀ + mask_j                     (block_q, block_k)
        m' = max(m, rowmax Z_j);  P_j = exp(Z_j − m')
        l = e^(m − m')·l + rowsum P_j
        acc = e^(m − m')·acc + dropout(P_j)·V_j
        m = m'
    O = acc / l,  lse = m + log l

Backward recomputes P_ij = exp(Z_ij − lse_i) block by block instead of storing P, with
δ_i = rowsum(dO_i∘O_i) and dZ_ij = P_ij∘(dO_i·V_jᵀ − δ_i):

    dV_j = Σ_i P_ijᵀ·dO_i    dK_j = scale·Σ_i dZ_ijᵀ·Q_i    dQ_i = scale·Σ_j dZ_ij·K_j

With many slices, each task owns one slice and makes all three in one pass. With few,
each slice is split: tasks over key blocks make dK_j and dV_j, tasks over query blocks
make dQ_i (P_ij computed twice). Either way no two tasks write the same rows.

The elementwise work on each block goes through ``Kernels``: NumPy's here, numba's in
``_fused`` (engine="fused"), which also compiles whole tasks for attention with no mask
and no dropout (several small slices to a task; causal forward blocks of CAUSAL_BLOCK_Q
queries). Tasks run on the thread pool of ``_threads``. A task's arithmetic depends only on the
block sizes, not on which thread runs it or how many there are, so the results are the
same bits for any thread count. Letters as in ``_problem``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ._masks import mask_scores_
from ._problem import Problem
from ._threads import run, thread_count

__all__ = ["BLOCK_K", "BLOCK_Q", "CAUSAL_BLOCK_Q", "NUMPY", "ONE_PASS_BACKWARD_FROM", "Kernels", "backward", "forward"]

# Block sizes: 512 queries × 512 keys of float32 scores is 1 MiB, which stays in a
# core's L2 cache with its Q and K rows, and makes each block's products large enough
# for BLAS to run near its peak (512 × 512 measured 10-15 % faster than 256 × 1024 with
# E = 64, forward and backward). They fix the order of every sum, so changing them
# changes the last bits of the results (never the dropout masks: see ``_masks``).
BLOCK_Q = 512
BLOCK_K = 512
# The compiled forward's query blocks when causal: a block on the diagonal computes a
# triangle of scores that the mask then removes, and smaller blocks waste less (256 measured
# 1-7 % faster than 512 on causal shapes from 14 heads of 512 to 8 of 4096).
CAUSAL_BLOCK_Q = 256
# From this many slices on, the backward gives each thread whole slices (one pass, less
# work); below it, it splits slices into blocks to keep every thread busy. A constant,
# not the thread count, decides, so the bits never depend on the thread count.
ONE_PASS_BACKWARD_FROM = 8
# The compiled tasks hold about this many scores (a forward slice of more is split into
# blocks of queries; smaller slices go several to a task, in the forward and the one-pass
# backward): enough to make a call's few µs of Python negligible.
TASK_SCORES = 2**18


@dataclass(frozen=True)
class Kernels:
    """The elementwise work on one block of scores Z (l, s), in place, and optionally
    whole tasks compiled. ``NUMPY`` is the oracle; ``attnlab.engine.fused`` compiles the same
    two block kernels (row by row, in cache) and the three tasks."""

    # m' = max(m, rowmax Z); Z ← exp(Z − m'[:, None]); l ← α·l + rowsum Z; m ← m'; returns
    # α = e^(m − m'), (l,); arguments Z, m, l, with m and l (l,) updated in place
    online_softmax_: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    # Z ← P = exp(Z − lse[:, None]);  dP ← dZ = P∘(dP − δ[:, None]);  arguments Z, lse, dP, δ
    softmax_backward_: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], None]
    # Whole tasks compiled, for attention with no mask and no dropout (None: the loops below,
    # in Python), with the arguments that ``_fused_kernels`` documents: the forward of some
    # slices and rows; the backward's dK, dV (and dQ) over blocks of keys; its dQ over blocks of queries.
    attend_: Callable[..., None] | None = None
    backward_keys_: Callable[..., None] | None = None
    backward_queries_: Callable[..., None] | None = None


def _online_softmax_numpy(scores: np.ndarray, row_max: np.ndarray, row_sum: np.ndarray) -> np.ndarray:
    new_max = np.maximum(row_max, scores.max(axis=1))
    shift = np.where(np.isneginf(new_max), 0.0, new_max)  # rows with no key visible yet: exp(−∞ − 0) = 0
    scores -= shift[:, None]
    np.exp(scores, out=scores)
    rescale = np.exp(row_max - shift)
    row_sum *= rescale
    row_sum += scores.sum(axis=1)
    row_max[...] = new_max
    return rescale


def _softmax_backward_numpy(scores: np.ndarray, lse: np.ndarray, grad: np.ndarray, delta: np.ndarray) -> None:
    scores -= lse[:, None]
    np.exp(scores, out=scores)
    grad -= delta[:, None]
    grad *= scores


NUMPY = Kernels(_online_softmax_numpy, _softmax_backward_numpy)


@dataclass(frozen=True)
class _Slice:
    """Views of one (batch, head) slice n: q (L, E), k (S, E), v (S, Ev), mask (L, S) or None."""

    n: int
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: np.ndarray | None


def _kv_batch(pb: Problem) -> tuple[int, ...]:
    """The batch shape of keys and values: B… with Hk = H / groups heads last."""
    batch = pb.batch_shape
    return (*batch[:-1], batch[-1] // pb.groups) if pb.groups > 1 else batch


def _slices(pb: Problem, value: np.ndarray) -> list[_Slice]:
    """One entry per (batch, head) slice, as views (broadcast dimensions are not copied)."""
    batch, kv_batch = pb.batch_shape, _kv_batch(pb)
    L, S = pb.lengths
    E, Ev = pb.query.shape[-1], value.shape[-1]
    q = np.broadcast_to(pb.query, (*batch, L, E))
    k = np.broadcast_to(pb.key, (*kv_batch, S, E))
    v = np.broadcast_to(value, (*kv_batch, S, Ev))
    mask = None if pb.mask is None else np.broadcast_to(pb.mask, (*batch, L, S))
    slices = []
    for n, index in enumerate(np.ndindex(*batch)):
        kv_index = np.unravel_index(n // pb.groups, kv_batch) if kv_batch else ()
        slices.append(_Slice(n, q[index], k[kv_index], v[kv_index], None if mask is None else mask[index]))
    return slices


def _stacked(pb: Problem, value: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q (B·H, L, E), k (B·Hk, S, E) and v (B·Hk, S, Ev) as C-contiguous stacks of slices
    (broadcast dimensions copied), the compiled kernels' layout: slice n reads key and
    value head n // groups."""
    L, S = pb.lengths
    E, Ev = pb.query.shape[-1], value.shape[-1]
    heads, kv_batch = pb.slices // pb.groups, _kv_batch(pb)
    q = np.ascontiguousarray(np.broadcast_to(pb.query, (*pb.batch_shape, L, E))).reshape(pb.slices, L, E)
    k = np.ascontiguousarray(np.broadcast_to(pb.key, (*kv_batch, S, E))).reshape(heads, S, E)
    v = np.ascontiguousarray(np.broadcast_to(value, (*kv_batch, S, Ev))).reshape(heads, S, Ev)
    return q, k, v  # (B·H, L, E), (B·Hk, S, E), (B·Hk, S, Ev)


def _blocks(length: int, size: int) -> list[slice]:
    return [slice(start, min(start + size, length)) for start in range(0, length, size)]


def _key_blocks(pb: Problem, rows: slice, skip_causal: bool) -> list[slice]:
    """The blocks of keys that query rows ``rows`` read; with ``skip_causal`` the last
    one ends at the diagonal (row i sees keys 0..i)."""
    S = pb.lengths[1]
    return _blocks(min(S, rows.stop) if skip_causal else S, BLOCK_K)


def _value_exponent(value: np.ndarray, length: int) -> tuple[int, bool]:
    """(k, whether every value is finite), k such that Σ over ``length`` rows of the finite
    values scaled by 2⁻ᵏ cannot overflow: 0 unless they are within a factor ``length`` of
    the dtype's largest number. Scaling by a power of two is exact, so the results keep their bits."""
    low, high = float(value.min(initial=0.0)), float(value.max(initial=0.0))  # NaN if any is NaN
    finite = bool(np.isfinite(low) and np.isfinite(high))
    largest = max(-low, high) if finite else float(np.max(np.abs(value), initial=0.0, where=np.isfinite(value)))
    headroom = float(np.finfo(value.dtype).max) / max(length, 1) / 4
    return (max(0, int(np.ceil(np.log2(largest / headroom)))) if largest > headroom else 0), finite


def _scores(pb: Problem, s: _Slice, q_scaled: np.ndarray, rows: slice, cols: slice) -> np.ndarray:
    """Z = scale · Q_i·K_jᵀ + mask for one block, (rows, cols)."""
    scores = q_scaled @ s.k[cols].T  # (block_q, block_k)
    needs_causal = pb.is_causal and cols.stop - 1 > rows.start  # some key in the block is later than some query
    if s.mask is not None or needs_causal:
        mask_scores_(scores, None if s.mask is None else s.mask[rows, cols], needs_causal, rows.start, cols.start)
    return scores


def _forward_block(
    pb: Problem,
    s: _Slice,
    rows: slice,
    out: np.ndarray,
    lse: np.ndarray,
    skip_causal: bool,
    exponent: int,
    kernels: Kernels,
) -> None:
    """Output rows and lse of one block of queries, by online softmax."""
    q_scaled = s.q[rows] * np.asarray(pb.scale, dtype=s.q.dtype)  # (block_q, E)
    row_max = np.full(q_scaled.shape[0], -np.inf, dtype=q_scaled.dtype)  # m, (block_q,)
    row_sum = np.zeros(q_scaled.shape[0], dtype=q_scaled.dtype)  # l, before dropout, (block_q,)
    acc = np.zeros((q_scaled.shape[0], s.v.shape[1]), dtype=q_scaled.dtype)  # Σ P·V, (block_q, Ev)
    for cols in _key_blocks(pb, rows, skip_causal):
        weights = _scores(pb, s, q_scaled, rows, cols)
        rescale = kernels.online_softmax_(weights, row_max, row_sum)  # P_j = exp(Z_j − m'); m, l updated
        acc *= rescale[:, None]  # e^(m − m'), 0 on the first block
        dropout = pb.dropout(s.n, rows, cols)
        if dropout is not None:
            weights *= dropout
        acc += weights @ s.v[cols]
    np.ldexp(acc / row_sum[:, None], exponent, out=out[rows])  # undo the values' 2⁻ᵏ
    out[rows][row_sum == 0] = 0.0  # a row whose keys are all masked is 0, whatever the values
    lse[rows] = row_max + np.log(row_sum)


def _slice_groups(slices: int, scores: int, threads: int) -> list[tuple[int, int]]:
    """Consecutive slices, as (first, stop), several to a group where each has few
    ``scores``: about TASK_SCORES in each, and at least 4 groups per thread when there
    are that many slices."""
    per_task = max(1, min(-(-TASK_SCORES // max(scores, 1)), slices // (4 * threads)))
    return [(n, min(n + per_task, slices)) for n in range(0, slices, per_task)]


def _compiled_tasks(
    slices: int, L: int, S: int, block_q: int, threads: int
) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """How ``Kernels.attend_`` splits the forward: (slices, rows) ranges, largest first. A
    slice of TASK_SCORES scores or more is split into its blocks of ``block_q`` queries;
    smaller ones go several to a task. Either way a task's blocks are the slice's own, so
    the split never changes a bit of the results."""
    if L * S >= TASK_SCORES:
        return [((n, n + 1), (r.start, r.stop)) for r in reversed(_blocks(L, block_q)) for n in range(slices)]
    return [(group, (0, L)) for group in _slice_groups(slices, L * S, threads)]


def forward(pb: Problem, threads: int | None = None, kernels: Kernels = NUMPY) -> tuple[np.ndarray, np.ndarray]:
    """Return (O (B…, L, Ev), lse (B…, L))."""
    L, S = pb.lengths
    Ev = pb.value.shape[-1]
    exponent, finite = _value_exponent(pb.value, S)
    value = np.ldexp(pb.value, -exponent) if exponent else pb.value
    # Blocks above the diagonal are skipped only when no value there could make a NaN
    # (0·NaN): the result is then the same as reading them.
    skip_causal = pb.is_causal and finite
    n = pb.slices
    out = np.empty((n, L, Ev), dtype=pb.compute_dtype)  # (B·H, L, Ev)
    lse = np.empty((n, L), dtype=pb.compute_dtype)  # (B·H, L)
    tasks: list[Callable[[], None]]
    if kernels.attend_ is not None and pb.plain:
        scale, unscale = (np.asarray(x, dtype=pb.compute_dtype)[()] for x in (pb.scale, 2.0**exponent))
        block_q = CAUSAL_BLOCK_Q if pb.is_causal else BLOCK_Q
        options = ((pb.is_causal, skip_causal), scale, unscale, (block_q, BLOCK_K), out, lse)
        arrays = _stacked(pb, value)
        tasks = [
            functools.partial(kernels.attend_, arrays, pb.groups, slices, rows, *options)
            for slices, rows in _compiled_tasks(n, L, S, block_q, thread_count(threads))
        ]
    else:
        slices = _slices(pb, value)
        tasks = [
            functools.partial(_forward_block, pb, s, rows, out[s.n], lse[s.n], skip_causal, exponent, kernels)
            for rows in reversed(_blocks(L, BLOCK_Q))  # causal: the last rows see the most keys
            for s in slices
        ]
    run(tasks, threads)
    return out.reshape(pb.output_shape), lse.reshape(*pb.batch_shape, L)  # (B…, L, Ev), (B…, L)


def backward(
    pb: Problem,
    grad_output: np.ndarray,
    output: np.ndarray,
    lse: np.ndarray,
    threads: int | None = None,
    kernels: Kernels = NUMPY,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dQ (B…, L, E), dK (B…, S, E), dV (B…, S, Ev)) from dO (B…, L, Ev) and the
    forward's O and lse; key and value heads expanded for GQA, as the naive engine gives them."""
    L, S = pb.lengths
    E, Ev = pb.query.shape[-1], pb.value.shape[-1]
    n = pb.slices
    dtype = pb.compute_dtype
    grad_output = np.broadcast_to(grad_output, pb.output_shape).reshape(n, L, Ev)  # dO, (B·H, L, Ev)
    lse = np.where(np.isneginf(lse), np.inf, lse).reshape(n, L)  # fully masked rows: P = exp(−inf) = 0, (B·H, L)
    delta = np.einsum("nle,nle->nl", grad_output, output.reshape(n, L, Ev))  # δ, (B·H, L)
    # as in the forward: skip blocks above the diagonal only when they could add no NaN
    finite = (np.isfinite(x).all() for x in (pb.query, pb.key, pb.value, grad_output, delta))
    skip_causal = pb.is_causal and all(finite)
    grad_q = np.empty((n, L, E), dtype=dtype)
    grad_k = np.empty((n, S, E), dtype=dtype)
    grad_v = np.empty((n, S, Ev), dtype=dtype)
    scale = np.asarray(pb.scale, dtype=dtype)

    def block(s: _Slice, rows: slice, cols: slice) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """P_ij, the dropout factor and dZ_ij of one block."""
        weights = _scores(pb, s, s.q[rows] * scale, rows, cols)  # Z_ij
        dropout = pb.dropout(s.n, rows, cols)
        grad_scores = grad_output[s.n, rows] @ s.v[cols].T  # dP_ij, (block_q, block_k)
        if dropout is not None:
            grad_scores *= dropout
        kernels.softmax_backward_(weights, lse[s.n, rows], grad_scores, delta[s.n, rows])  # P_ij, dZ = P∘(dP − δ)
        return weights, dropout, grad_scores

    def keys_task(s: _Slice, cols: slice, with_queries: bool = False) -> None:
        """dK_j and dV_j of one block of keys. ``with_queries`` also adds dZ_ij·K_j into
        dQ_i, which only a task that owns the whole slice may do."""
        gk = np.zeros((cols.stop - cols.start, E), dtype=dtype)
        gv = np.zeros((cols.stop - cols.start, Ev), dtype=dtype)
        first = cols.start if skip_causal else 0  # causal: keys j are seen by queries i >= j
        for rows in _blocks(L, BLOCK_Q):
            if rows.stop <= first:
                continue
            weights, dropout, grad_scores = block(s, rows, cols)
            if with_queries:
                grad_q[s.n, rows] += grad_scores @ s.k[cols]
            if dropout is not None:
                weights *= dropout
            gv += weights.T @ grad_output[s.n, rows]
            gk += grad_scores.T @ s.q[rows]
        grad_k[s.n, cols] = gk * scale
        grad_v[s.n, cols] = gv

    def queries_task(s: _Slice, rows: slice) -> None:
        gq = np.zeros((rows.stop - rows.start, E), dtype=dtype)
        for cols in _key_blocks(pb, rows, skip_causal):
            gq += block(s, rows, cols)[2] @ s.k[cols]
        grad_q[s.n, rows] = gq * scale

    def slice_task(s: _Slice) -> None:
        """The whole backward of one slice in one pass over its key blocks."""
        grad_q[s.n] = 0.0
        for cols in _blocks(S, BLOCK_K):
            keys_task(s, cols, with_queries=True)
        grad_q[s.n] *= scale

    tasks: list[Callable[[], None]]
    if kernels.backward_keys_ and kernels.backward_queries_ and pb.plain:
        arrays = (*_stacked(pb, pb.value), np.ascontiguousarray(grad_output), lse, delta)
        options = ((pb.is_causal, skip_causal), scale[()], (BLOCK_Q, BLOCK_K))
        keys, queries = (
            functools.partial(kernel, arrays, pb.groups)
            for kernel in (kernels.backward_keys_, kernels.backward_queries_)
        )
        grads = (grad_q, grad_k, grad_v)
        if n >= ONE_PASS_BACKWARD_FROM:  # as slice_task, several small slices to a task
            ranges = _slice_groups(n, L * S, thread_count(threads))
            tasks = [functools.partial(keys, m, (0, S), True, *options, grads) for m in ranges]
        else:  # as keys_task and queries_task
            tasks = [
                functools.partial(keys, (m, m + 1), (c.start, c.stop), False, *options, grads)
                for c in _blocks(S, BLOCK_K)
                for m in range(n)
            ]
            tasks += [
                functools.partial(queries, (m, m + 1), (r.start, r.stop), *options, grad_q)
                for r in reversed(_blocks(L, BLOCK_Q))
                for m in range(n)
            ]
    elif n >= ONE_PASS_BACKWARD_FROM:  # one task per slice: 5 products and one exp per block
        tasks = [functools.partial(slice_task, s) for s in _slices(pb, pb.value)]
    else:  # few slices: split each in two passes, 7 products and two exps per block
        # largest first: with causal masking the first keys and the last queries have the most work
        slices = _slices(pb, pb.value)
        tasks = [functools.partial(keys_task, s, cols) for cols in _blocks(S, BLOCK_K) for s in slices]
        tasks += [functools.partial(queries_task, s, rows) for rows in reversed(_blocks(L, BLOCK_Q)) for s in slices]
    run(tasks, threads)
    batch = pb.batch_shape
    return (
        grad_q.reshape(*batch, L, E),  # (B…, L, E)
        grad_k.reshape(*batch, S, E),  # (B…, S, E), one key head per query head
        grad_v.reshape(*batch, S, Ev),  # (B…, S, Ev)
    )
