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
``fused`` (engine="fused"), whose kernels also schedule whole compiled tasks for
attention with no mask and no dropout (``fused._tasks``). Tasks run on the thread pool of
``_threads``. A task's arithmetic depends only on the block sizes, not on which thread
runs it or how many there are, so the results are the same bits for any thread count.
Letters as in ``_problem``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._validation import Array
from ._masks import mask_scores_
from ._problem import Engine, Problem
from ._threads import run

__all__ = [
    "BLOCK_K",
    "BLOCK_Q",
    "NUMPY",
    "ONE_PASS_BACKWARD_FROM",
    "TILED",
    "BackwardPass",
    "BlockedEngine",
    "ForwardPass",
    "Kernels",
    "Task",
    "backward",
    "blocks",
    "forward",
    "kv_batch_shape",
]

# Block sizes: 512 queries × 512 keys of float32 scores is 1 MiB, which stays in a
# core's L2 cache with its Q and K rows, and makes each block's products large enough
# for BLAS to run near its peak (512 × 512 measured 10-15 % faster than 256 × 1024 with
# E = 64, forward and backward). They fix the order of every sum, so changing them
# changes the last bits of the results (never the dropout masks: see ``_masks``).
BLOCK_Q = 512
BLOCK_K = 512
# From this many slices on, the backward gives each thread whole slices (one pass, less
# work); below it, it splits slices into blocks to keep every thread busy. A constant,
# not the thread count, decides, so the bits never depend on the thread count.
ONE_PASS_BACKWARD_FROM = 8

Task = Callable[[], None]


@dataclass(frozen=True)
class ForwardPass:
    """What every forward task reads, and the results they write (no two the same rows),
    over the n = B·H slices."""

    pb: Problem
    value: Array  # V·2⁻ᵏ, (B…, S, Ev)
    exponent: int  # k, undone on the output
    skip_causal: bool  # causal, and no block above the diagonal could make a NaN
    output: Array  # O, (n, L, Ev)
    lse: Array  # (n, L)


@dataclass(frozen=True)
class BackwardPass:
    """What every backward task reads, and the gradients they write (no two the same
    rows), over the n = B·H slices."""

    pb: Problem
    grad_output: Array  # dO, (n, L, Ev)
    lse: Array  # (n, L), +∞ where every key is masked (P = 0 there)
    delta: Array  # δ, (n, L)
    skip_causal: bool  # causal, and no block above the diagonal could make a NaN
    scale: Array  # 0-d, in the compute dtype
    grad_query: Array  # dQ, (n, L, E)
    grad_key: Array  # dK, (n, S, E), one key head per query head
    grad_value: Array  # dV, (n, S, Ev)


@dataclass(frozen=True)
class Kernels:
    """The elementwise work on one block of scores Z (l, s), in place, and optionally
    whole tasks compiled. ``NUMPY`` is the oracle; ``attnlab.engine.fused`` compiles the same
    two block kernels (row by row, in cache) and schedules its compiled tasks."""

    # m' = max(m, rowmax Z); Z ← exp(Z − m'[:, None]); l ← α·l + rowsum Z; m ← m'; returns
    # α = e^(m − m'), (l,); arguments Z, m, l, with m and l (l,) updated in place
    online_softmax_: Callable[[Array, Array, Array], Array]
    # Z ← P = exp(Z − lse[:, None]);  dP ← dZ = P∘(dP − δ[:, None]);  arguments Z, lse, dP, δ
    softmax_backward_: Callable[[Array, Array, Array, Array], None]
    # The tasks of a whole forward or backward, compiled, for attention with no mask and no
    # dropout, given the pass and the thread count (None: the loops below, in Python).
    forward_tasks: Callable[[ForwardPass, int | None], list[Task]] | None = None
    backward_tasks: Callable[[BackwardPass, int | None], list[Task]] | None = None


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


def _softmax_backward_numpy(scores: Array, lse: Array, grad: Array, delta: Array) -> None:
    scores -= lse[:, None]
    np.exp(scores, out=scores)
    grad -= delta[:, None]
    grad *= scores


NUMPY = Kernels(_online_softmax_numpy, _softmax_backward_numpy)


@dataclass(frozen=True)
class _Slice:
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


def _slices(pb: Problem, value: Array) -> list[_Slice]:
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
        slices.append(_Slice(n, q[index], k[kv_index], v[kv_index], None if mask is None else mask[index]))
    return slices


def blocks(length: int, size: int) -> list[slice]:
    """[0, length) cut into consecutive slices of ``size`` (the last one shorter)."""
    return [slice(start, min(start + size, length)) for start in range(0, length, size)]


def _key_blocks(pb: Problem, rows: slice, skip_causal: bool) -> list[slice]:
    """The blocks of keys that query rows ``rows`` read; with ``skip_causal`` the last
    one ends at the diagonal (row i sees keys 0..i)."""
    S = pb.lengths[1]
    return blocks(min(S, rows.stop) if skip_causal else S, BLOCK_K)


def _value_exponent(value: Array, length: int) -> tuple[int, bool]:
    """(k, whether every value is finite), k such that Σ over ``length`` rows of the finite
    values scaled by 2⁻ᵏ cannot overflow: 0 unless they are within a factor ``length`` of
    the dtype's largest number. Scaling by a power of two is exact, so the results keep their bits."""
    low, high = float(value.min(initial=0.0)), float(value.max(initial=0.0))  # NaN if any is NaN
    finite = bool(np.isfinite(low) and np.isfinite(high))
    largest = max(-low, high) if finite else float(np.max(np.abs(value), initial=0.0, where=np.isfinite(value)))
    headroom = float(np.finfo(value.dtype).max) / max(length, 1) / 4
    return (max(0, int(np.ceil(np.log2(largest / headroom)))) if largest > headroom else 0), finite


def _scores(pb: Problem, s: _Slice, q_scaled: Array, rows: slice, cols: slice) -> Array:
    """Z = scale · Q_i·K_jᵀ + mask for one block, (rows, cols)."""
    scores = q_scaled @ s.k[cols].T  # (block_q, block_k)
    needs_causal = pb.is_causal and cols.stop - 1 > rows.start  # some key in the block is later than some query
    if s.mask is not None or needs_causal:
        mask_scores_(scores, None if s.mask is None else s.mask[rows, cols], needs_causal, rows.start, cols.start)
    return scores


def _forward_block(fp: ForwardPass, s: _Slice, rows: slice, kernels: Kernels) -> None:
    """Output rows and lse of one block of queries, by online softmax."""
    pb, out, lse = fp.pb, fp.output[s.n], fp.lse[s.n]
    q_scaled = s.q[rows] * np.asarray(pb.scale, dtype=s.q.dtype)  # (block_q, E)
    row_max = np.full(q_scaled.shape[0], -np.inf, dtype=q_scaled.dtype)  # m, (block_q,)
    row_sum = np.zeros(q_scaled.shape[0], dtype=q_scaled.dtype)  # l, before dropout, (block_q,)
    acc = np.zeros((q_scaled.shape[0], s.v.shape[1]), dtype=q_scaled.dtype)  # Σ P·V, (block_q, Ev)
    for cols in _key_blocks(pb, rows, fp.skip_causal):
        weights = _scores(pb, s, q_scaled, rows, cols)
        rescale = kernels.online_softmax_(weights, row_max, row_sum)  # P_j = exp(Z_j − m'); m, l updated
        acc *= rescale[:, None]  # e^(m − m'), 0 on the first block
        dropout = pb.dropout(s.n, rows, cols)
        if dropout is not None:
            weights *= dropout
        acc += weights @ s.v[cols]
    np.ldexp(acc / row_sum[:, None], fp.exponent, out=out[rows])  # undo the values' 2⁻ᵏ
    out[rows][row_sum == 0] = 0.0  # a row whose keys are all masked is 0, whatever the values
    lse[rows] = row_max + np.log(row_sum)


def forward(pb: Problem, threads: int | None = None, kernels: Kernels = NUMPY) -> tuple[Array, Array]:
    """Return (O (B…, L, Ev), lse (B…, L))."""
    L, S = pb.lengths
    n = pb.slices
    exponent, finite = _value_exponent(pb.value, S)
    fp = ForwardPass(
        pb,
        np.ldexp(pb.value, -exponent) if exponent else pb.value,
        exponent,
        # Blocks above the diagonal are skipped only when no value there could make a NaN
        # (0·NaN): the result is then the same as reading them.
        pb.is_causal and finite,
        np.empty((n, L, pb.value.shape[-1]), dtype=pb.compute_dtype),  # (B·H, L, Ev)
        np.empty((n, L), dtype=pb.compute_dtype),  # (B·H, L)
    )
    if kernels.forward_tasks is not None and pb.plain:
        tasks = kernels.forward_tasks(fp, threads)
    else:
        slices = _slices(pb, fp.value)
        tasks = [
            functools.partial(_forward_block, fp, s, rows, kernels)
            for rows in reversed(blocks(L, BLOCK_Q))  # causal: the last rows see the most keys
            for s in slices
        ]
    run(tasks, threads)
    return fp.output.reshape(pb.output_shape), fp.lse.reshape(*pb.batch_shape, L)  # (B…, L, Ev), (B…, L)


def _backward_block(
    bp: BackwardPass, s: _Slice, rows: slice, cols: slice, kernels: Kernels
) -> tuple[Array, Array | None, Array]:
    """P_ij, the dropout factor and dZ_ij of one block."""
    weights = _scores(bp.pb, s, s.q[rows] * bp.scale, rows, cols)  # Z_ij
    dropout = bp.pb.dropout(s.n, rows, cols)
    grad_scores = bp.grad_output[s.n, rows] @ s.v[cols].T  # dP_ij, (block_q, block_k)
    if dropout is not None:
        grad_scores *= dropout
    kernels.softmax_backward_(weights, bp.lse[s.n, rows], grad_scores, bp.delta[s.n, rows])  # P_ij, dZ = P∘(dP − δ)
    return weights, dropout, grad_scores


def _keys_task(bp: BackwardPass, s: _Slice, cols: slice, kernels: Kernels, with_queries: bool = False) -> None:
    """dK_j and dV_j of one block of keys. ``with_queries`` also adds dZ_ij·K_j into
    dQ_i, which only a task that owns the whole slice may do."""
    grad_key = np.zeros((cols.stop - cols.start, bp.grad_key.shape[-1]), dtype=bp.grad_key.dtype)  # (block_k, E)
    grad_value = np.zeros((cols.stop - cols.start, bp.grad_value.shape[-1]), dtype=bp.grad_value.dtype)
    first = cols.start if bp.skip_causal else 0  # causal: keys j are seen by queries i >= j
    for rows in blocks(bp.pb.lengths[0], BLOCK_Q):
        if rows.stop <= first:
            continue
        weights, dropout, grad_scores = _backward_block(bp, s, rows, cols, kernels)
        if with_queries:
            bp.grad_query[s.n, rows] += grad_scores @ s.k[cols]
        if dropout is not None:
            weights *= dropout
        grad_value += weights.T @ bp.grad_output[s.n, rows]
        grad_key += grad_scores.T @ s.q[rows]
    bp.grad_key[s.n, cols] = grad_key * bp.scale
    bp.grad_value[s.n, cols] = grad_value


def _queries_task(bp: BackwardPass, s: _Slice, rows: slice, kernels: Kernels) -> None:
    """dQ_i of one block of queries."""
    grad_query = np.zeros((rows.stop - rows.start, bp.grad_query.shape[-1]), dtype=bp.grad_query.dtype)
    for cols in _key_blocks(bp.pb, rows, bp.skip_causal):
        grad_query += _backward_block(bp, s, rows, cols, kernels)[2] @ s.k[cols]
    bp.grad_query[s.n, rows] = grad_query * bp.scale


def _slice_task(bp: BackwardPass, s: _Slice, kernels: Kernels) -> None:
    """The whole backward of one slice in one pass over its key blocks."""
    bp.grad_query[s.n] = 0.0
    for cols in blocks(bp.pb.lengths[1], BLOCK_K):
        _keys_task(bp, s, cols, kernels, with_queries=True)
    bp.grad_query[s.n] *= bp.scale


def _backward_tasks(bp: BackwardPass, kernels: Kernels) -> list[Task]:
    """The backward's tasks in Python, largest first: with causal masking the first keys
    and the last queries have the most work."""
    L, S = bp.pb.lengths
    slices = _slices(bp.pb, bp.pb.value)
    if bp.pb.slices >= ONE_PASS_BACKWARD_FROM:  # one task per slice: 5 products and one exp per block
        return [functools.partial(_slice_task, bp, s, kernels) for s in slices]
    # few slices: split each in two passes, 7 products and two exps per block
    tasks: list[Task] = [
        functools.partial(_keys_task, bp, s, cols, kernels) for cols in blocks(S, BLOCK_K) for s in slices
    ]
    tasks += [
        functools.partial(_queries_task, bp, s, rows, kernels) for rows in reversed(blocks(L, BLOCK_Q)) for s in slices
    ]
    return tasks


def backward(
    pb: Problem,
    grad_output: Array,
    output: Array,
    lse: Array,
    threads: int | None = None,
    kernels: Kernels = NUMPY,
) -> tuple[Array, Array, Array]:
    """(dQ (B…, L, E), dK (B…, S, E), dV (B…, S, Ev)) from dO (B…, L, Ev) and the
    forward's O and lse; key and value heads expanded for GQA, as the naive engine gives them."""
    L, S = pb.lengths
    E, Ev = pb.query.shape[-1], pb.value.shape[-1]
    n = pb.slices
    dtype = pb.compute_dtype
    grad_output = np.broadcast_to(grad_output, pb.output_shape).reshape(n, L, Ev)  # dO, (B·H, L, Ev)
    delta = np.einsum("nle,nle->nl", grad_output, output.reshape(n, L, Ev))  # δ, (B·H, L)
    # as in the forward: skip blocks above the diagonal only when they could add no NaN
    finite = (np.isfinite(x).all() for x in (pb.query, pb.key, pb.value, grad_output, delta))
    bp = BackwardPass(
        pb,
        grad_output,
        np.where(np.isneginf(lse), np.inf, lse).reshape(n, L),  # fully masked rows: P = exp(−inf) = 0, (B·H, L)
        delta,
        pb.is_causal and all(finite),
        np.asarray(pb.scale, dtype=dtype),
        np.empty((n, L, E), dtype=dtype),  # (B·H, L, E)
        np.empty((n, S, E), dtype=dtype),  # (B·H, S, E)
        np.empty((n, S, Ev), dtype=dtype),  # (B·H, S, Ev)
    )
    if kernels.backward_tasks is not None and pb.plain:
        tasks = kernels.backward_tasks(bp, threads)
    else:
        tasks = _backward_tasks(bp, kernels)
    run(tasks, threads)
    batch = pb.batch_shape
    return (
        bp.grad_query.reshape(*batch, L, E),  # (B…, L, E)
        bp.grad_key.reshape(*batch, S, E),  # (B…, S, E), one key head per query head
        bp.grad_value.reshape(*batch, S, Ev),  # (B…, S, Ev)
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
        self, pb: Problem, grad_output: Array, saved: tuple[Array, Array] | None, threads: int | None
    ) -> tuple[Array, Array, Array]:
        """:func:`backward` from the forward's (O, lse), recomputed when ``saved`` is None."""
        output, lse = forward(pb, threads, self.kernels) if saved is None else saved
        return backward(pb, grad_output, output, lse, threads, self.kernels)


TILED = BlockedEngine("tiled", NUMPY)
