"""The fused engine's decode path: one query, or a few, against a long key/value cache,
the cache read once (``_decode_kernels``; letters as in ``_problem``).

Decoding is memory-bound: each key and value row is used by only G·L query rows, so the
time is that of reading K and V. The path cuts each key/value head's keys into units of
DECODE_CHUNK (a fixed grid from key 0, cut at the band's edges), computes the scores,
softmax and weighted sum of V of a unit in cache for all the G·L rows of its group (the
G query heads of GQA share each read), shares the units among the threads, and merges
each head's partials by their lse in the order of the keys. The units and the merge
depend only on the problem, so the results are the same bits for any thread count.

It takes the problems ``decodes`` accepts: no attention mask, no mask function, no
dropout (``Problem.compiles_whole``), at most DECODE_QUERIES queries and DECODE_ROWS rows per
key/value head; any window, causal rule (either alignment), softcap, ALiBi, sinks, and
per-sequence key lengths (``Problem.key_lengths``: the keys from a sequence's length on
are never read, and its bottom-right diagonal is that of its own length).
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from ..._validation import Array
from .._problem import Problem
from .._threads import run, thread_count
from .._tiled import Task, _value_exponent, kv_batch_shape
from ._tasks import _variant

__all__ = ["DECODE_CHUNK", "DECODE_QUERIES", "DECODE_ROWS", "decode_forward", "decodes"]

# Keys per unit: the fewer units, the less each call pays to merge them (B1 H32 S=8192
# E128 measured 10.1, 9.7 and 9.3 ms with 512, 1024 and 2048 keys; 4096 no faster), and
# 2048 keys of E = 128 float32 are 1 MiB of K, which a core's L2 cache holds until the
# unit's scores are done. It fixes the order of the sums, so changing it changes the last bits.
DECODE_CHUNK = 2048
DECODE_QUERIES = 16  # L at most
DECODE_ROWS = 64  # G·L at most: each key row's products for that many query rows
UNITS_PER_THREAD = 4  # tasks per thread, so that a slow thread delays the call little
TASK_BYTES = 2**21  # of K and V at least per task: a smaller task costs more to hand to a thread than it saves


def decodes(pb: Problem) -> bool:
    """Whether the decode path takes ``pb``: plain (``Problem.compiles_whole``), L <= DECODE_QUERIES,
    G·L <= DECODE_ROWS, more keys than queries, and no empty dimension."""
    L, S = pb.lengths
    E, Ev = pb.query.shape[-1], pb.value.shape[-1]
    small = 0 < L <= DECODE_QUERIES and L * pb.groups <= DECODE_ROWS
    return pb.compiles_whole and small and S > L and E > 0 and Ev > 0 and pb.slices > 0


def _head_lengths(pb: Problem) -> Array:
    """The keys of each key/value head's sequence, (Nk,): its key length, else S."""
    S = pb.lengths[1]
    heads = pb.slices // pb.groups
    if pb.key_lengths is None:
        return np.full(heads, S, dtype=np.int64)
    per_slice = np.broadcast_to(pb.key_lengths[..., None], pb.batch_shape).reshape(-1)  # (N,)
    return np.ascontiguousarray(per_slice[:: pb.groups], dtype=np.int64)  # one per group, (Nk,)


def _units(pb: Problem, lengths: Array, shifts: Array, skip: bool) -> tuple[Array, Array]:
    """(units (U, 3) of (head, first key, stop), head_units (Nk + 1,): head h's units are
    head_units[h] … head_units[h + 1] − 1): DECODE_CHUNK-key blocks of a grid from key 0,
    over the keys the band lets any of the L queries see when ``skip``, else all of the
    sequence's keys."""
    L = pb.lengths[0]
    if skip:
        first = np.clip(pb.rules.band.lowest + shifts, 0, lengths)  # query 0's first key
        stop = np.clip(L - 1 + pb.rules.band.highest + shifts + 1, first, lengths)  # query L − 1's last, + 1
    else:
        first, stop = np.zeros_like(lengths), lengths
    units: list[tuple[int, int, int]] = []
    head_units = [0]
    for h, (a, b) in enumerate(zip(first.tolist(), stop.tolist(), strict=True)):
        for grid in range(a - a % DECODE_CHUNK, b, DECODE_CHUNK):
            units.append((h, max(grid, a), min(grid + DECODE_CHUNK, b)))
        head_units.append(len(units))
    return np.array(units, dtype=np.int64).reshape(-1, 3), np.array(head_units, dtype=np.int64)


def _task_ranges(units: Array, threads: int, row_bytes: int) -> list[tuple[int, int]]:
    """Consecutive runs of units, as (first, stop), with about equal numbers of keys, of
    at least TASK_BYTES of K and V (``row_bytes`` a key's) each."""
    count = units.shape[0]
    keys = np.cumsum(units[:, 2] - units[:, 1])
    largest = int(keys[-1]) * row_bytes // TASK_BYTES if count else 0
    tasks = min(count, UNITS_PER_THREAD * threads if threads > 1 else 1, max(largest, 1))
    if tasks == 0:
        return []
    cuts = np.searchsorted(keys, keys[-1] * np.arange(1, tasks) / tasks, side="right")
    bounds = [0, *sorted(set(cuts.tolist()) - {0, count}), count]
    return list(itertools.pairwise(bounds))


def _call(name: str, *arguments: object) -> None:
    from . import _decode_kernels

    getattr(_decode_kernels, name)(*arguments)


def _flat(x: Array, batch: tuple[int, ...]) -> tuple[Array, Array]:
    """(x's memory as a flat read-only array, where each of its heads' rows start in it
    (Nk,)) for x (…, S, width) broadcast to (*batch, S, width), uncopied where its rows
    are contiguous (a KV cache's view: (B, Hk, capacity, E)[..., :S, :])."""
    rows, width = x.shape[-2:]
    x = np.broadcast_to(x, (*batch, rows, width))
    item = x.itemsize
    if x.strides[-1] != item or x.strides[-2] != width * item or any(s < 0 or s % item for s in x.strides):
        x = np.ascontiguousarray(x)
    starts = np.zeros(1, dtype=np.int64)
    for size, stride in zip(batch, x.strides[:-2], strict=True):  # every head's first element
        starts = (starts[:, None] + np.arange(size, dtype=np.int64) * (stride // item)).reshape(-1)
    span = int(starts.max(initial=0)) + rows * width
    flat = np.lib.stride_tricks.as_strided(x, shape=(span,), strides=(item,), writeable=False)  # (span,)
    return flat, starts


def _valid_values(pb: Problem, lengths: Array) -> list[Array]:
    """Each key/value head's values of its sequence's keys, (length, Ev) each."""
    S, Ev = pb.lengths[1], pb.value.shape[-1]
    value = np.broadcast_to(pb.value, (*kv_batch_shape(pb), S, Ev)).reshape(-1, S, Ev)  # (Nk, S, Ev)
    return [value[h, :length] for h, length in enumerate(lengths.tolist())]


def _partials(units: Array, rows: int, width: int, dtype: np.dtype) -> tuple[Array, Array, Array]:
    """Empty m and l (U, M) and acc (U, M, Ev)."""
    count = units.shape[0]
    return np.empty((count, rows), dtype), np.empty((count, rows), dtype), np.empty((count, rows, width), dtype)


def _run(pb: Problem, value: Array, exponent: int, skip: bool, threads: int | None) -> tuple[Array, Array, bool]:
    """(O (N, L, Ev), lse (N, L), whether every partial and output is finite) of the
    decode path over ``value`` (V·2⁻ᵏ)."""
    L, S = pb.lengths
    E, groups, dtype = pb.query.shape[-1], pb.groups, pb.compute_dtype
    kv_batch = kv_batch_shape(pb)
    heads = math.prod(kv_batch)
    query = np.broadcast_to(pb.query, (*pb.batch_shape, L, E)).reshape(heads, groups * L, E)  # (Nk, G·L, E)
    queries = query * np.asarray(pb.scale, dtype=dtype)  # scale·Q, a new (Nk, G·L, E) array
    cache = (*_flat(pb.key, kv_batch), *_flat(value, kv_batch))
    lengths = _head_lengths(pb)
    shifts = lengths - S if pb.rules.bottom_right else np.zeros_like(lengths)  # each sequence's own diagonal
    units, head_units = _units(pb, lengths, shifts, skip)
    variant = _variant(pb)
    modified = pb.rules["softcap"] is not None or pb.rules["alibi_slopes"] is not None or pb.rules.band.limits((L, S))
    partials = _partials(units, groups * L, value.shape[-1], dtype)
    options = (shifts, variant, groups, L, modified, DECODE_CHUNK, partials)
    tasks: list[Task] = [
        functools.partial(_call, "decode_units", queries, cache, units, first, stop, *options)
        for first, stop in _task_ranges(units, thread_count(threads), (E + value.shape[-1]) * dtype.itemsize)
    ]
    run(tasks, threads)
    output = np.empty((pb.slices, L, value.shape[-1]), dtype)  # (N, L, Ev)
    lse = np.empty((pb.slices, L), dtype)  # (N, L)
    unscale = np.asarray(2.0**exponent, dtype=dtype)[()]
    with np.errstate(all="ignore"):
        _call("merge", partials, head_units, groups, L, variant, unscale, output, lse)
        finite = bool(np.isfinite(partials[2]).all() and np.isfinite(output).all())
    return output, lse, finite


def decode_forward(pb: Problem, threads: int | None) -> tuple[Array, Array] | None:
    """(O (B…, L, Ev), lse (B…, L)) by the decode path when ``decodes`` takes ``pb``, else
    None. The values are read as they are; only when a partial sum is not finite are they
    checked: if they are all finite, a sum overflowed, and the path runs again on V·2⁻ᵏ
    (``_tiled``'s exponent). Keys outside the band are skipped only when every value of
    the sequence is finite (else 0·NaN reaches the row, as in the naive engine)."""
    if not decodes(pb):
        return None
    L, S = pb.lengths
    lengths = _head_lengths(pb)
    values: list[Array] | None = None
    skip = True
    if pb.rules.band.limits((L, S)):
        values = _valid_values(pb, lengths)
        skip = all(np.isfinite(v).all() for v in values)
    output, lse, finite = _run(pb, pb.value, 0, skip, threads)
    if not finite:
        values = _valid_values(pb, lengths) if values is None else values
        exponent, all_finite = _value_exponent(np.concatenate(values) if values else pb.value[..., :0, :], S)
        if exponent and all_finite:
            output, lse, _ = _run(pb, np.ldexp(pb.value, -exponent), exponent, skip, threads)
    return output.reshape(pb.output_shape), lse.reshape(*pb.batch_shape, L)  # (B…, L, Ev), (B…, L)
