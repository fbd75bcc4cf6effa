"""The tiled engine: online softmax over blocks of keys, O(L·d) extra memory per head.

Forward, for one head and one block of queries (Milakov & Gimelshein 2018; Dao 2023):

    m = −∞, l = 0, acc = 0
    for each block of keys K_j, V_j (blocks above the diagonal skipped when causal):
        S_j = scale · Q·K_jᵀ + mask_j                     (block_q, block_k)
        m' = max(m, rowmax S_j);  P_j = exp(S_j − m')
        l = e^(m − m')·l + rowsum P_j
        acc = e^(m − m')·acc + dropout(P_j)·V_j
        m = m'
    O = acc / l,  lse = m + log l

Backward recomputes P_ij = exp(S_ij − lse_i) block by block instead of storing P, with
D_i = rowsum(dO_i∘O_i) and dS_ij = P_ij∘(dO_i·V_jᵀ − D_i):

    dV_j = Σ_i P_ijᵀ·dO_i    dK_j = scale·Σ_i dS_ijᵀ·Q_i    dQ_i = scale·Σ_j dS_ij·K_j

With many heads, each task owns one head and makes all three in one pass. With few,
each head is split: tasks over key blocks make dK_j and dV_j, tasks over query blocks
make dQ_i (P_ij computed twice). Either way no two tasks write the same rows.

Work is split into tasks of (batch·head, block) run on a thread pool; BLAS is held to
one thread meanwhile. Each task's arithmetic does not depend on which thread runs it
or on how many there are, so the results are the same bits for any thread count.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from threadpoolctl import ThreadpoolController

from ._dropout import keep_mask
from ._naive import mask_scores_
from ._problem import Problem

BLOCK_Q = 256
BLOCK_K = 1024
THREADS_ENV = "ATTNLAB_NUM_THREADS"
# From this many (batch·head) slices on, the backward gives each thread whole heads (one
# pass, less work); below it, it splits heads into blocks to keep every thread busy. A
# constant, not the thread count, decides, so the bits never depend on the thread count.
FUSED_BACKWARD_FROM = 8


def default_threads() -> int:
    """The ``ATTNLAB_NUM_THREADS`` environment variable, else the machine's cores."""
    value = os.environ.get(THREADS_ENV)
    if value is not None:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{THREADS_ENV}: expected an integer >= 1, got {value!r}")
        return int(value)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@functools.cache
def _blas_controller() -> ThreadpoolController:
    """threadpoolctl's view of the loaded BLAS, inspected once (it scans the libraries)."""
    return ThreadpoolController()


@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    """One pool per thread count, kept for the life of the process."""
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="attnlab")


def _run(tasks: Sequence[Callable[[], None]], threads: int | None) -> None:
    """Run every task, BLAS held to one thread so that ours and its never oversubscribe.
    Each thread takes the next task from a shared queue; which thread runs a task
    never changes its bits. Tasks are best given largest first."""
    threads = min(default_threads() if threads is None else threads, len(tasks))
    queue = iter(tasks)
    lock = threading.Lock()

    def worker() -> None:
        with np.errstate(all="ignore"):  # per thread: masked rows take exp(−inf) and log(0) on purpose
            while True:
                with lock:
                    task = next(queue, None)
                if task is None:
                    return
                task()

    with _blas_controller().limit(limits=1, user_api="blas"):
        if threads == 1:
            worker()
            return
        for future in [_pool(threads).submit(worker) for _ in range(threads)]:
            future.result()


@dataclass(frozen=True)
class _Head:
    """Views of one (batch·head) slice n: q (L, E), k (S, E), v (S, Ev), mask (L, S) or None."""

    n: int
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: np.ndarray | None


def _heads(pb: Problem, value: np.ndarray | None = None) -> list[_Head]:
    """One entry per (batch·head) slice, as views (broadcast dimensions are not copied);
    ``value`` replaces the problem's values."""
    value = pb.value if value is None else value
    batch = pb.batch_shape
    L, S = pb.shape[:2]
    E, Ev = pb.query.shape[-1], value.shape[-1]
    kv_batch = (*batch[:-1], batch[-1] // pb.groups) if pb.groups > 1 else batch
    q = np.broadcast_to(pb.query, (*batch, L, E))
    k = np.broadcast_to(pb.key, (*kv_batch, S, E))
    v = np.broadcast_to(value, (*kv_batch, S, Ev))
    mask = None if pb.mask is None else np.broadcast_to(pb.mask, (*batch, L, S))
    heads = []
    for n, index in enumerate(np.ndindex(*batch)):
        kv_index = np.unravel_index(n // pb.groups, kv_batch) if kv_batch else ()
        heads.append(_Head(n, q[index], k[kv_index], v[kv_index], None if mask is None else mask[index]))
    return heads


def _key_blocks(pb: Problem, rows: slice) -> list[slice]:
    """The blocks of keys that query rows ``rows`` can see; when causal, the last one
    ends at the diagonal (row i sees keys 0..i)."""
    S = pb.shape[1]
    stop = min(S, rows.stop) if pb.is_causal else S
    return [slice(start, min(start + BLOCK_K, stop)) for start in range(0, stop, BLOCK_K)]


def _scores(pb: Problem, head: _Head, q_scaled: np.ndarray, rows: slice, cols: slice) -> np.ndarray:
    """scale · Q_i·K_jᵀ + mask for one block, (rows, cols)."""
    scores = q_scaled @ head.k[cols].T  # (block_q, block_k)
    needs_causal = pb.is_causal and cols.stop - 1 > rows.start  # some key in the block is later than some query
    if head.mask is not None or needs_causal:
        mask = None if head.mask is None else head.mask[rows, cols]
        mask_scores_(scores, mask, needs_causal, rows.start, cols.start)
    return scores


def _dropout(pb: Problem, head: _Head, rows: slice, cols: slice) -> np.ndarray | None:
    """keep / (1 − p) for one block, or None without dropout."""
    if pb.dropout_seed is None:
        return None
    keep = keep_mask(pb.dropout_seed, head.n, rows, cols, pb.dropout_p)
    return keep * np.asarray(1.0 / (1.0 - pb.dropout_p), dtype=pb.query.dtype)


def _forward_block(pb: Problem, head: _Head, rows: slice, out: np.ndarray, lse: np.ndarray) -> None:
    """Output rows and log-sum-exp of one block of queries, by online softmax. ``head.v``
    carries a last column of ones, so that acc's last column accumulates the row sums l
    inside the same matrix product (and is rescaled with it)."""
    q_scaled = head.q[rows] * np.asarray(pb.scale, dtype=head.q.dtype)  # (block_q, E)
    row_max = np.full((q_scaled.shape[0], 1), -np.inf, dtype=q_scaled.dtype)
    acc = np.zeros((q_scaled.shape[0], head.v.shape[1]), dtype=q_scaled.dtype)  # [Σ P·V, l], (block_q, Ev + 1)
    for cols in _key_blocks(pb, rows):
        probs = _scores(pb, head, q_scaled, rows, cols)
        new_max = np.maximum(row_max, probs.max(axis=1, keepdims=True))
        new_max[np.isneginf(new_max)] = 0.0  # rows with nothing visible yet: exp(-inf - 0) = 0
        probs -= new_max
        np.exp(probs, out=probs)  # P_j = exp(S_j − m')
        acc *= np.exp(row_max - new_max)  # e^(m − m'), 0 on the first block
        dropout = _dropout(pb, head, rows, cols)
        if dropout is None:
            acc += probs @ head.v[cols]
        else:  # l sums the weights before dropout
            acc[:, -1] += probs.sum(axis=1)
            probs *= dropout
            acc[:, :-1] += probs @ head.v[cols, :-1]
        row_max = new_max
    row_sum = acc[:, -1:]
    np.divide(acc[:, :-1], row_sum, out=out[rows], where=row_sum > 0)
    out[rows][row_sum[:, 0] == 0] = 0.0  # fully masked rows give 0
    lse[rows] = (row_max + np.log(row_sum))[:, 0]


def _row_blocks(length: int, size: int) -> list[slice]:
    return [slice(start, min(start + size, length)) for start in range(0, length, size)]


def forward(pb: Problem, threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Return (output (B…, L, Ev), lse (B…, L))."""
    L, _, Ev = pb.shape
    ones = np.ones((*pb.value.shape[:-1], 1), dtype=pb.value.dtype)
    heads = _heads(pb, np.concatenate([pb.value, ones], axis=-1))  # values with a column of ones, (B…, S, Ev + 1)
    out = np.empty((len(heads), L, Ev), dtype=pb.query.dtype)  # (B·H, L, Ev)
    lse = np.empty((len(heads), L), dtype=pb.query.dtype)
    tasks = [
        functools.partial(_forward_block, pb, head, rows, out[head.n], lse[head.n])
        for rows in reversed(_row_blocks(L, BLOCK_Q))  # causal: the last rows see the most keys
        for head in heads
    ]
    _run(tasks, threads)
    return out.reshape(*pb.batch_shape, L, Ev), lse.reshape(*pb.batch_shape, L)  # (B…, L, Ev), (B…, L)


def backward(
    pb: Problem,
    grad_output: np.ndarray,
    output: np.ndarray | None = None,
    lse: np.ndarray | None = None,
    threads: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients over the broadcast shapes (B…, ·, ·), key and value heads expanded for
    GQA, as the naive engine returns them. ``output`` and ``lse`` are the forward's;
    they are recomputed when not given."""
    if output is None or lse is None:
        output, lse = forward(pb, threads)
    L, S, Ev = pb.shape
    E = pb.query.shape[-1]
    heads = _heads(pb)
    n = len(heads)
    dtype = pb.query.dtype
    grad_output = np.broadcast_to(grad_output, (*pb.batch_shape, L, Ev)).reshape(n, L, Ev)  # (B·H, L, Ev)
    lse = np.ascontiguousarray(lse, dtype=dtype).reshape(n, L, 1)  # (B·H, L, 1)
    lse = np.where(np.isneginf(lse), np.inf, lse)  # fully masked rows: P = exp(−inf) = 0
    row_dot = np.einsum("nle,nle->nl", grad_output, output.reshape(n, L, Ev).astype(dtype))[..., None]  # D, (B·H, L, 1)
    grad_q = np.empty((n, L, E), dtype=dtype)
    grad_k = np.empty((n, S, E), dtype=dtype)
    grad_v = np.empty((n, S, Ev), dtype=dtype)
    scale = np.asarray(pb.scale, dtype=dtype)

    def block(head: _Head, rows: slice, cols: slice) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """P_ij, the dropout scale and dS_ij of one block."""
        probs = _scores(pb, head, head.q[rows] * scale, rows, cols)
        probs -= lse[head.n, rows]
        np.exp(probs, out=probs)
        dropout = _dropout(pb, head, rows, cols)
        grad_probs = grad_output[head.n, rows] @ head.v[cols].T  # (block_q, block_k)
        if dropout is not None:
            grad_probs *= dropout
        grad_probs -= row_dot[head.n, rows]
        grad_probs *= probs  # dS = P∘(dP − D)
        return probs, dropout, grad_probs

    def keys_task(head: _Head, cols: slice, with_queries: bool = False) -> None:
        """dK_j and dV_j of one block of keys. ``with_queries`` also adds dS_ij·K_j into
        dQ_i, which only a task that owns the whole head may do."""
        gk = np.zeros((cols.stop - cols.start, E), dtype=dtype)
        gv = np.zeros((cols.stop - cols.start, Ev), dtype=dtype)
        first = cols.start if pb.is_causal else 0  # causal: keys j are seen by queries i >= j
        for rows in _row_blocks(L, BLOCK_Q):
            if rows.stop <= first:
                continue
            probs, dropout, grad_scores = block(head, rows, cols)
            if with_queries:
                grad_q[head.n, rows] += grad_scores @ head.k[cols]
            if dropout is not None:
                probs *= dropout
            gv += probs.T @ grad_output[head.n, rows]
            gk += grad_scores.T @ head.q[rows]
        grad_k[head.n, cols] = gk * scale
        grad_v[head.n, cols] = gv

    def queries_task(head: _Head, rows: slice) -> None:
        gq = np.zeros((rows.stop - rows.start, E), dtype=dtype)
        for cols in _key_blocks(pb, rows):
            gq += block(head, rows, cols)[2] @ head.k[cols]
        grad_q[head.n, rows] = gq * scale

    def head_task(head: _Head) -> None:
        """The whole backward of one head in one pass over its key blocks."""
        grad_q[head.n] = 0.0
        for cols in _row_blocks(S, BLOCK_K):
            keys_task(head, cols, with_queries=True)
        grad_q[head.n] *= scale

    tasks: list[functools.partial[None]]
    if n >= FUSED_BACKWARD_FROM:  # one task per head: 5 products and one exp per block
        tasks = [functools.partial(head_task, head) for head in heads]
    else:  # few heads: split each head in two passes, 7 products and two exps per block
        # largest first: with causal masking the first keys and the last queries have the most work
        tasks = [functools.partial(keys_task, head, cols) for cols in _row_blocks(S, BLOCK_K) for head in heads]
        tasks += [
            functools.partial(queries_task, head, rows) for rows in reversed(_row_blocks(L, BLOCK_Q)) for head in heads
        ]
    _run(tasks, threads)
    batch = pb.batch_shape
    return (
        grad_q.reshape(*batch, L, E),  # (B…, L, E)
        grad_k.reshape(*batch, S, E),  # (B…, S, E), one key head per query head
        grad_v.reshape(*batch, S, Ev),  # (B…, S, Ev)
    )
