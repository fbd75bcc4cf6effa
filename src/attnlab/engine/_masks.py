"""What changes or removes scores, for every engine: softcapping, the additive biases and
the masks (dropout is ``_dropout``'s).

The scores, on a block Z = scale·Q·Kᵀ (…, l, s) that starts at row ``row0`` and column
``col0`` of the full (L, S) matrix, in this order (:func:`modify_scores_`):

1. Z ← softcap(Z) + float ``attn_mask`` + ALiBi (+ the bias of each variant registered
   from outside the package), softcap(x) = c·tanh(x/c).
2. −∞ where a key is ruled out, whatever Z was (NaN included): a bool mask's False, a
   float mask's −∞, a j − i outside the band of ``is_causal`` and the window, and the
   mask function's False.
"""

from __future__ import annotations

import numpy as np

from .._validation import Array, fail
from ._problem import Problem
from .variants import Band, Context
from .variants.alibi import alibi_
from .variants.softcap import softcap_

__all__ = ["mask_mod_allows", "mask_scores_", "modify_scores_"]

SliceIndex = int | Array  # slice n, or an array of them shaped as B…


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
        cap_derivative = softcap_(pb.softcap, scores, derivative)
    if mask is not None and mask.dtype != bool:
        scores += mask
    if slope is not None:
        alibi_(slope, pb.offset, scores, slices, rows, cols)
    if pb.extra:
        context = Context(pb.batch_shape, pb.compute_dtype, pb.lengths, pb.offset)
        for variant, value in pb.extra:
            bias = variant.bias(value, slices, rows, cols, context)
            if bias is not None:
                scores += bias
    if mask is not None:
        if mask.dtype == bool:
            np.copyto(scores, -np.inf, where=~mask)
        else:
            np.copyto(scores, -np.inf, where=np.isneginf(mask))  # −∞ masks even a NaN score
    if not pb.band.inside(rows, cols):
        np.copyto(scores, -np.inf, where=~pb.band.allowed(rows, cols))
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
        L, S = scores.shape[-2:]
        causal = Band.of(True, None, 0, (L, S))
        np.copyto(scores, -np.inf, where=~causal.allowed(slice(0, L), slice(0, S)))
