"""Which rows of the whole sequence each rank holds, and the sequence from its shards.

Positions: ``layout`` says which rows of the whole sequence a shard holds: "contiguous",
one run (rank r after ranks 0 … r − 1), or "zigzag", two runs, chunk r and chunk 2P − 1 − r
of 2P (the first ⌈n/2⌉ rows, then the rest), so that causal work is even across ranks.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import Array

__all__ = ["LAYOUTS", "runs_of", "shard", "shard_lengths", "unshard"]

LAYOUTS = ("contiguous", "zigzag")


def runs_of(lengths: list[int], layout: str) -> list[list[tuple[int, int, int]]]:
    """For each rank, its runs of the whole sequence: (row in the shard, position, length)."""
    P = len(lengths)
    if layout == "contiguous":
        starts = np.cumsum([0, *lengths[:-1]])
        return [[(0, int(starts[r]), n)] for r, n in enumerate(lengths)]
    first = [math.ceil(n / 2) for n in lengths]
    second = [n - a for n, a in zip(lengths, first, strict=True)]
    head = np.cumsum([0, *first[:-1]])  # first runs in rank order
    tail_start = sum(first)
    tail = [tail_start + sum(second[r + 1 :]) for r in range(P)]  # second runs in reverse rank order
    return [[(0, int(head[r]), first[r]), (first[r], tail[r], second[r])] for r in range(P)]


def shard_lengths(total: int, world_size: int, layout: str) -> list[int]:
    """The number of rows :func:`shard` gives each of ``world_size`` ranks of a sequence of
    ``total`` rows: near-equal runs, the longer first ("contiguous"), or chunks r and
    2P − 1 − r of 2P near-equal chunks ("zigzag")."""
    if layout == "contiguous":
        return [total // world_size + (r < total % world_size) for r in range(world_size)]
    chunks = [total // (2 * world_size) + (c < total % (2 * world_size)) for c in range(2 * world_size)]
    return [chunks[r] + chunks[2 * world_size - 1 - r] for r in range(world_size)]


def shard(x: Array, world_size: int, rank: int, layout: str, axis: int) -> Array:
    """Rank ``rank``'s rows of the whole sequence ``x`` (along ``axis``)."""
    if layout == "contiguous":
        return np.array_split(x, world_size, axis=axis)[rank]
    chunks = np.array_split(x, 2 * world_size, axis=axis)
    return np.concatenate((chunks[rank], chunks[2 * world_size - 1 - rank]), axis=axis)


def unshard(shards: list[Array], layout: str, axis: int) -> Array:
    """The whole sequence from every rank's shard, in rank order (inverse of :func:`shard`)."""
    if layout == "contiguous":
        return np.concatenate(shards, axis=axis)
    runs = runs_of([s.shape[axis] for s in shards], layout)
    parts = [
        (position, np.take(s, np.arange(offset, offset + n), axis=axis))
        for s, rank_runs in zip(shards, runs, strict=True)
        for offset, position, n in rank_runs
    ]
    return np.concatenate([p for _, p in sorted(parts, key=lambda item: item[0])], axis=axis)
