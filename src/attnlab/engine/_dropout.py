"""Dropout, the same for every engine: the keep mask of row i, key j of flattened
batch-and-head slice n is ``u >= p`` for a uniform u drawn from a Philox stream keyed by
the dropout seed and counted from (n, i // TILE_ROWS, j // TILE_COLS). So the mask
depends only on the seed and the position, not on how an engine walks the matrix: every
engine and the forward and the backward all see the same mask. TILE_ROWS and TILE_COLS
are part of that contract: changing either changes every seeded mask ever drawn.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import Array, fail, int_seed, is_integer

__all__ = ["TILE_COLS", "TILE_ROWS", "check_rng", "dropout_factor", "dropout_seed", "keep_mask"]

TILE_ROWS = 64
TILE_COLS = 256


def check_rng(rng: Any) -> int | np.random.Generator | None:
    """``rng`` once it is a Generator, an int seed in [0, 2**63) or None."""
    if rng is None or isinstance(rng, np.random.Generator):
        return rng
    if not is_integer(rng):
        raise fail("rng", "a numpy.random.Generator, an int seed in [0, 2**63) or None", repr(rng), TypeError)
    return int_seed("rng", rng)


def dropout_seed(rng: int | np.random.Generator | None) -> int:
    """The Philox key for one dropout draw from a checked ``rng``: the integer itself, a
    draw from the Generator, or fresh OS entropy when ``rng`` is None."""
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(2**63))
    if rng is None:
        return int(np.random.default_rng().integers(2**63))
    return rng


def keep_mask(key: int, n: int, rows: slice, cols: slice, p: float) -> Array:
    """Bool (rows, cols) block of the keep mask of slice ``n``; True = kept."""
    r0, r1, c0, c1 = rows.start, rows.stop, cols.start, cols.stop
    mask = np.empty((r1 - r0, c1 - c0), dtype=bool)
    for tr in range(r0 // TILE_ROWS, (r1 - 1) // TILE_ROWS + 1):
        for tc in range(c0 // TILE_COLS, (c1 - 1) // TILE_COLS + 1):
            bits = np.random.Philox(key=key, counter=[0, tc, tr, n])
            tile = np.random.Generator(bits).random((TILE_ROWS, TILE_COLS)) >= p
            # the part of this tile inside [r0, r1) x [c0, c1), in tile and block coordinates
            tr0, tr1 = max(r0, tr * TILE_ROWS), min(r1, (tr + 1) * TILE_ROWS)
            tc0, tc1 = max(c0, tc * TILE_COLS), min(c1, (tc + 1) * TILE_COLS)
            mask[tr0 - r0 : tr1 - r0, tc0 - c0 : tc1 - c0] = tile[
                tr0 - tr * TILE_ROWS : tr1 - tr * TILE_ROWS, tc0 - tc * TILE_COLS : tc1 - tc * TILE_COLS
            ]
    return mask


def dropout_factor(key: int, p: float, n: int, rows: slice, cols: slice, dtype: np.dtype) -> Array:
    """keep / (1 − p) over one block (rows, cols) of slice ``n``: what multiplies the weights."""
    return keep_mask(key, n, rows, cols, p) * np.asarray(1.0 / (1.0 - p), dtype=dtype)
