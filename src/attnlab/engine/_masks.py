"""What changes, removes or rescales scores, for every engine: softcapping, the additive
biases, the masks and dropout.

The scores, on a block Z = scale·Q·Kᵀ (…, l, s) that starts at row ``row0`` and column
``col0`` of the full (L, S) matrix, in this order (:func:`modify_scores_`):

1. Z ← softcap(Z) + float ``attn_mask`` + ALiBi, softcap(x) = c·tanh(x/c).
2. −∞ where a key is ruled out, whatever Z was (NaN included): a bool mask's False, a
   float mask's −∞, a j − i outside the band of ``is_causal`` and the window, and the
   mask function's False.

Dropout: the keep mask of row i, key j of flattened batch-and-head slice n is ``u >= p``
for a uniform u drawn from a Philox stream keyed by the dropout seed and counted from
(n, i // TILE_ROWS, j // TILE_COLS). So the mask depends only on the seed and the
position, not on how an engine walks the matrix: every engine and the forward and the
backward all see the same mask. TILE_ROWS and TILE_COLS are part of that contract:
changing either changes every seeded mask ever drawn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._validation import Array, fail, int_seed

if TYPE_CHECKING:
    from ._problem import Problem

__all__ = [
    "TILE_COLS",
    "TILE_ROWS",
    "check_rng",
    "dropout_factor",
    "dropout_seed",
    "keep_mask",
    "mask_mod_allows",
    "mask_scores_",
    "modify_scores_",
]

TILE_ROWS = 64
TILE_COLS = 256

SliceIndex = int | Array  # slice n, or an array of them shaped as B…


def _distance(rows: slice, cols: slice) -> Array:
    """j − i over a block, (l, s)."""
    return np.arange(cols.start, cols.stop)[None, :] - np.arange(rows.start, rows.stop)[:, None]


def mask_mod_allows(pb: Problem, slices: SliceIndex, rows: slice, cols: slice) -> Array | None:
    """The mask function's verdict on a block, broadcast to (…, l, s) (True: may attend),
    or None without one; ``slices`` as :func:`modify_scores_`'s."""
    if pb.mask_mod is None:
        return None
    batch, head = (x[..., None, None] for x in np.divmod(np.asarray(slices, dtype=np.int64), pb.heads))
    q_idx = np.arange(rows.start, rows.stop)[:, None]
    kv_idx = np.arange(cols.start, cols.stop)[None, :]
    shape = np.broadcast_shapes(batch.shape, q_idx.shape, kv_idx.shape)
    allowed = pb.mask_mod(batch, head, q_idx, kv_idx)
    if not isinstance(allowed, (np.ndarray, np.bool_)) or allowed.dtype != bool:
        got = f"dtype {allowed.dtype}" if isinstance(allowed, np.ndarray) else type(allowed).__name__
        raise fail("mask_mod", f"a function returning a bool array that broadcasts to {shape}", got)
    try:
        return np.broadcast_to(allowed, shape)
    except ValueError:
        raise fail(
            "mask_mod", f"a function returning a bool array that broadcasts to {shape}", f"shape {allowed.shape}"
        ) from None


def modify_scores_(
    pb: Problem,
    scores: Array,
    mask: Array | None,
    slices: SliceIndex,
    rows: slice,
    cols: slice,
    allowed: Array | None = None,
    derivative: bool = False,
) -> Array | None:
    """Steps 1 and 2 above, in place, on the block of raw scores scale·Q·Kᵀ (…, l, s) at
    query rows ``rows`` and keys ``cols`` of the slices ``slices`` (an int n, or an array
    of them shaped as the block's leading dimensions); ``mask`` is the attention mask's
    block, ``allowed`` the mask function's (:func:`mask_mod_allows`). Returns softcap's
    derivative 1 − tanh²(x/c) (…, l, s) when ``derivative`` is asked for and there is a
    softcap, else None."""
    slope = pb.per_slice(pb.alibi)
    cap_derivative = None
    if pb.softcap is not None:
        scores /= pb.softcap
        np.tanh(scores, out=scores)
        if derivative:
            cap_derivative = 1.0 - scores * scores
        scores *= pb.softcap
    if mask is not None and mask.dtype != bool:
        scores += mask
    if slope is not None:
        distance = np.abs(_distance(rows, cols) - pb.offset).astype(scores.dtype)  # |j − (i + offset)|
        scores -= distance * np.asarray(slope[slices])[..., None, None]
    if mask is not None:
        if mask.dtype == bool:
            np.copyto(scores, -np.inf, where=~mask)
        else:
            np.copyto(scores, -np.inf, where=np.isneginf(mask))  # −∞ masks even a NaN score
    if not pb.band.inside(rows, cols):
        distance = _distance(rows, cols)
        np.copyto(scores, -np.inf, where=(distance < pb.band.lowest) | (distance > pb.band.highest))
    if allowed is not None:
        np.copyto(scores, -np.inf, where=~allowed)
    return cap_derivative


def mask_scores_(scores: Array, mask: Array | None, is_causal: bool) -> None:
    """Mask a whole (…, L, S) matrix of scores in place: the attention mask (bool or
    float) and the top-left causal rule, as :func:`modify_scores_` does (for the traces)."""
    if mask is not None:
        if mask.dtype == bool:
            np.copyto(scores, -np.inf, where=~mask)
        else:
            scores += mask
            np.copyto(scores, -np.inf, where=np.isneginf(mask))
    if is_causal:
        rows, cols = scores.shape[-2:]
        np.copyto(scores, -np.inf, where=np.arange(cols)[None, :] > np.arange(rows)[:, None])


def check_rng(rng: Any) -> int | np.random.Generator | None:
    """``rng`` once it is a Generator, an int seed in [0, 2**63) or None."""
    if rng is None or isinstance(rng, np.random.Generator):
        return rng
    if not isinstance(rng, (int, np.integer)) or isinstance(rng, (bool, np.bool_)):
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
