"""Reproducible dropout masks for attention weights, drawn tile by tile.

The keep mask of attention row i, key j in flattened batch-and-head slice h is
``u >= p`` for a uniform u drawn from a Philox stream keyed by the dropout seed and
counted from (h, i // TILE_ROWS, j // TILE_COLS). So the mask depends only on the seed
and the position, not on how an engine walks the matrix: the naive and tiled engines
and the forward and the backward all see the same mask.
"""

from __future__ import annotations

import numpy as np

TILE_ROWS = 64
TILE_COLS = 256


def dropout_seed(rng: int | np.random.Generator | None) -> int:
    """The Philox key for one dropout draw: the integer itself, a draw from the
    Generator, or fresh OS entropy when ``rng`` is None."""
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(2**63))
    if rng is None:
        return int(np.random.default_rng().integers(2**63))
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool) and rng >= 0:
        return int(rng)
    raise TypeError(f"rng: expected a numpy.random.Generator, a non-negative int or None, got {rng!r}")


def keep_mask(seed: int, head: int, rows: slice, cols: slice, p: float) -> np.ndarray:
    """Bool (rows, cols) block of the keep mask of slice ``head``; True = kept."""
    r0, r1, c0, c1 = rows.start, rows.stop, cols.start, cols.stop
    mask = np.empty((r1 - r0, c1 - c0), dtype=bool)
    for tr in range(r0 // TILE_ROWS, (r1 - 1) // TILE_ROWS + 1):
        for tc in range(c0 // TILE_COLS, (c1 - 1) // TILE_COLS + 1):
            bits = np.random.Philox(key=seed, counter=[0, tc, tr, head])
            tile = np.random.Generator(bits).random((TILE_ROWS, TILE_COLS)) >= p
            # the part of this tile inside [r0, r1) x [c0, c1), in tile and block coordinates
            tr0, tr1 = max(r0, tr * TILE_ROWS), min(r1, (tr + 1) * TILE_ROWS)
            tc0, tc1 = max(c0, tc * TILE_COLS), min(c1, (tc + 1) * TILE_COLS)
            mask[tr0 - r0 : tr1 - r0, tc0 - c0 : tc1 - c0] = tile[
                tr0 - tr * TILE_ROWS : tr1 - tr * TILE_ROWS, tc0 - tc * TILE_COLS : tc1 - tc * TILE_COLS
            ]
    return mask
