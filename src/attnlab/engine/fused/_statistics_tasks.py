"""The compiled statistics pass, scheduled (``_statistics_kernels``): for a problem the
fused engine compiles whole (``Problem.compiles_whole``: no attention mask, no mask
function), one task per slice (several small slices to a task, as the forward's), since
every block of queries of a slice adds into its ``received`` and ``distance``: a task's
results are its own slices', so the split never changes a bit. Letters as in ``_problem``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..._validation import Array
from .. import _tiled
from .._problem import Problem
from .._threads import thread_count
from .._tiled import Task
from ._blas import products
from ._tasks import _slice_groups, _stacked, _variant

__all__ = ["add_block", "statistics_tasks"]


def add_block(
    log_weights: Array, n: int, rows: slice, cols: slice, limits: tuple[int, ...], out: tuple[Array, ...]
) -> None:
    """A block of log P (l, c) of slice n, query rows ``rows`` and keys ``cols`` (−∞
    where masked; overwritten), into the statistics ``out`` (``_statistics_kernels``)."""
    from ._statistics_kernels import add_block as compiled

    compiled(log_weights, n, rows.start, cols.start, limits, out)


def _task(pb: Problem, arrays: tuple[Array, Array], slices: tuple[int, int], options: tuple[Any, ...]) -> None:
    """The statistics of slices ``slices``, its work arrays made here (so that a waiting
    task holds none): a block of scaled queries, a block of scores and a few rows."""
    from ._statistics_kernels import statistics

    block_q = _tiled.forward_block_q(pb)
    size_q, size_k = min(block_q, pb.lengths[0]), min(_tiled.BLOCK_K, pb.lengths[1])
    dtype = pb.compute_dtype
    work = (
        np.empty(size_q * pb.query.shape[-1], dtype),  # scale·Q_i, (l·E,)
        np.empty(size_q * size_k, dtype),  # Z, (l·c,)
        np.empty(size_k, dtype),  # P of one row, (c,)
        *(np.empty(size_q, dtype) for _ in range(3)),  # m, l, rescale, (l,) each
    )
    variant, skip, scale, limits, out, lse, sinks_weight = options
    blocks = (block_q, _tiled.BLOCK_K)
    statistics(
        products().gemm, arrays, pb.groups, slices, variant, skip, scale, blocks, work, limits, out, lse, sinks_weight
    )


def statistics_tasks(
    pb: Problem, limits: tuple[int, ...], out: tuple[Array, ...], lse: Array, sinks_weight: Array, threads: int | None
) -> list[Task] | None:
    """The statistics of ``pb`` as compiled tasks, for a problem the fused engine compiles
    whole (None for any other), writing slice n's at row n of ``out`` (the tuple of
    ``_statistics_kernels``), ``lse`` and ``sinks_weight`` (N, L)."""
    if not pb.compiles_whole:
        return None
    L, S = pb.lengths
    query, key = _stacked(pb, pb.value)[:2]  # (N, L, E), (N / groups, S, E)
    scale = np.asarray(pb.scale, dtype=pb.compute_dtype)[()]
    options = (_variant(pb), True, scale, limits, out, lse, sinks_weight)
    return [
        functools.partial(_task, pb, (query, key), slices, options)
        for slices in _slice_groups(pb.slices, L * S, thread_count(threads))
    ]
