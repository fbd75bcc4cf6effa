"""The fused engine's compiled tasks, scheduled: which slices and rows each call of
``_kernels.attend``, ``backward_keys`` and ``backward_queries`` covers, for attention
with no attention mask, no mask function and no dropout (``Problem.compiles_whole``), with any
window, causal rule, softcap, ALiBi and sinks (``_tiled.Kernels.forward_tasks``,
``backward_tasks``).

The tasks follow the tiled engine's loops (``_tiled``): its block sizes, so the same sums
in the same order, and its choice between the one-pass and the two-pass backward.
Several small slices go to one task, so that a call's few µs of Python are negligible.
A task's blocks are always its slice's own, so the split never changes a bit of the
results. Letters as in ``_problem``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from ..._validation import Array
from .. import _tiled
from .._problem import Problem
from .._threads import thread_count
from .._tiled import BackwardPass, ForwardPass, Task, blocks, kv_batch_shape
from ._blas import products

__all__ = ["TASK_SCORES", "backward_tasks", "forward_tasks"]

# The compiled tasks hold about this many scores (a forward slice of more is split into
# blocks of queries; smaller slices go several to a task, in the forward and the one-pass
# backward): enough to make a call's few µs of Python negligible.
TASK_SCORES = 2**18


def _compiled(name: str) -> Callable[..., None]:
    """A whole-task kernel of ``_kernels`` (arguments as that module documents),
    imported on its first call."""

    def call(*arguments: Any) -> None:
        from . import _kernels as _fused_kernels

        getattr(_fused_kernels, name)(*arguments)

    call.__name__ = call.__qualname__ = name
    return call


_attend, _backward_keys, _backward_queries = map(_compiled, ("attend", "backward_keys", "backward_queries"))


def _stacked(pb: Problem, value: Array) -> tuple[Array, Array, Array]:
    """q (B·H, L, E), k (B·Hk, S, E) and v (B·Hk, S, Ev) as C-contiguous stacks of slices
    (broadcast dimensions copied), the compiled kernels' layout: slice n reads key and
    value head n // groups."""
    L, S = pb.lengths
    E, Ev = pb.query.shape[-1], value.shape[-1]
    heads, kv_batch = pb.slices // pb.groups, kv_batch_shape(pb)
    q = np.ascontiguousarray(np.broadcast_to(pb.query, (*pb.batch_shape, L, E))).reshape(pb.slices, L, E)
    k = np.ascontiguousarray(np.broadcast_to(pb.key, (*kv_batch, S, E))).reshape(heads, S, E)
    v = np.ascontiguousarray(np.broadcast_to(value, (*kv_batch, S, Ev))).reshape(heads, S, Ev)
    return q, k, v  # (B·H, L, E), (B·Hk, S, E), (B·Hk, S, Ev)


def _slice_groups(slices: int, scores: int, threads: int) -> list[tuple[int, int]]:
    """Consecutive slices, as (first, stop), several to a group where each has few
    ``scores``: about TASK_SCORES in each, and at least 4 groups per thread when there
    are that many slices."""
    per_task = max(1, min(-(-TASK_SCORES // max(scores, 1)), slices // (4 * threads)))
    return [(n, min(n + per_task, slices)) for n in range(0, slices, per_task)]


def _forward_split(
    slices: int, L: int, S: int, block_q: int, threads: int
) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """How the compiled forward is split: (slices, rows) ranges, largest first. A slice of
    TASK_SCORES scores or more is split into its blocks of ``block_q`` queries; smaller
    ones go several to a task."""
    if L * S >= TASK_SCORES:
        return [((n, n + 1), (r.start, r.stop)) for r in reversed(blocks(L, block_q)) for n in range(slices)]
    return [(group, (0, L)) for group in _slice_groups(slices, L * S, threads)]


def _variant(pb: Problem) -> tuple[Any, ...]:
    """The variants as the compiled kernels take them (``_kernels``), in the compute dtype:
    ((lowest, highest), offset, (softcapped, c, 1/c), (with ALiBi, slopes (n,)), (with
    sinks, sinks (n,))), n zeros for a variant that is off (one type for every call; the
    kernels read slice n's entry whether or not its variant is on)."""
    real = pb.compute_dtype.type
    cap = real(1.0 if pb.rules["softcap"] is None else pb.rules["softcap"])
    slopes, sinks = pb.per_slice(pb.rules["alibi_slopes"]), pb.per_slice(pb.rules["sinks"])
    return (
        (int(pb.rules.band.lowest), int(pb.rules.band.highest)),
        int(pb.rules.offset),
        (pb.rules["softcap"] is not None, cap, real(1.0) / cap),
        *(
            (
                values is not None,
                np.zeros(pb.slices, pb.compute_dtype) if values is None else np.array(values, pb.compute_dtype),
            )
            for values in (slopes, sinks)
        ),
    )


def forward_tasks(fp: ForwardPass, threads: int | None) -> list[Task] | None:
    """The forward of ``fp`` as compiled tasks, for a plain problem (``Problem.compiles_whole``;
    None for any other): each writes the output and lse of its slices' rows (as
    ``_tiled``'s per-block loop, in its blocks of queries: ``_tiled.forward_block_q``)."""
    pb = fp.pb
    if not pb.compiles_whole:
        return None
    L, S = pb.lengths
    scale, unscale = (np.asarray(x, dtype=pb.compute_dtype)[()] for x in (pb.scale, 2.0**fp.exponent))
    block_q = _tiled.forward_block_q(pb)
    options = (_variant(pb), fp.skip, scale, unscale, (block_q, _tiled.BLOCK_K), fp.output, fp.lse)
    arrays, blas = _stacked(pb, fp.value), products().gemm
    return [
        functools.partial(_attend, blas, arrays, pb.groups, slices, rows, *options)
        for slices, rows in _forward_split(pb.slices, L, S, block_q, thread_count(threads))
    ]


def backward_tasks(bp: BackwardPass, threads: int | None) -> list[Task] | None:
    """The backward of ``bp`` as compiled tasks, for a plain problem (None for any other):
    with ONE_PASS_BACKWARD_FROM slices or more, each task makes dQ, dK and dV of whole
    slices in one pass; with fewer, tasks over blocks of keys make dK and dV, then tasks
    over blocks of queries dQ (as ``_tiled``)."""
    pb = bp.pb
    if not pb.compiles_whole:
        return None
    L, S = pb.lengths
    n = pb.slices
    low = bp.lse_low if bp.lse_low.any() else np.zeros((0, 0), bp.lse_low.dtype)  # empty: 0 in every row
    arrays = (*_stacked(pb, bp.value), np.ascontiguousarray(bp.grad_output), bp.lse, bp.delta, low)  # V·2⁻ᵏ
    options = (_variant(pb), bp.skip, bp.scale[()], (_tiled.BLOCK_Q, _tiled.BLOCK_K))
    blas = products().gemm
    keys = functools.partial(_backward_keys, blas, arrays, pb.groups)
    queries = functools.partial(_backward_queries, blas, arrays, pb.groups)
    grads = (bp.grad_query, bp.grad_key, bp.grad_value)
    if n >= _tiled.ONE_PASS_BACKWARD_FROM:  # several small slices to a task
        ranges = _slice_groups(n, L * S, thread_count(threads))
        return [functools.partial(keys, m, (0, S), True, *options, grads) for m in ranges]
    tasks: list[Task] = [
        functools.partial(keys, (m, m + 1), (c.start, c.stop), False, *options, grads)
        for c in blocks(S, _tiled.BLOCK_K)
        for m in range(n)
    ]
    tasks += [
        functools.partial(queries, (m, m + 1), (r.start, r.stop), *options, bp.grad_query)
        for r in reversed(blocks(L, _tiled.BLOCK_Q))
        for m in range(n)
    ]
    return tasks
