"""What changes or removes scores, for every engine: softcapping, the score functions, the
additive biases and the masks (dropout is ``_dropout``'s).

The scores, on a block Z = scale·Q·Kᵀ (…, l, s) at query rows ``rows`` and keys ``cols``
of the full (L, S) matrix, in this order (:func:`modify_scores_`):

1. Z ← f(softcap(Z)) + float ``attn_mask`` + ALiBi (+ the bias of each variant registered
   from outside the package), softcap(x) = c·tanh(x/c), f the score functions
   (FlexAttention's ``score_mod``) of the variants registered from outside, in order.
2. −∞ where a key is ruled out, whatever Z was (NaN included): a bool mask's False, a
   float mask's −∞, a j − i outside the band of ``is_causal`` and the window, and the
   mask function's False.

The backward multiplies dZ by the derivative of step 1 with respect to the raw scores
(softcap′·f′; the biases add, the masks' −∞ have weight 0).
"""

from __future__ import annotations

import numpy as np

from .._validation import Array, fail
from ._problem import Problem
from .variants import BUILTINS, Band, Context, ScoreMod, Variant
from .variants.alibi import alibi_
from .variants.softcap import softcap_

__all__ = ["mask_mod_allows", "mask_scores_", "modify_scores_", "score_mod_derivative"]

SliceIndex = int | Array  # slice n, or an array of them shaped as B…
COMPLEX_STEP = 2.0**-100  # h of f′(z) = Im f(z + i·h)/h: its error h²·f‴/6 is far below any rounding


def _indices(pb: Problem, slices: SliceIndex, rows: slice, cols: slice) -> tuple[Array, Array, Array, Array]:
    """(batch, head, q_idx, kv_idx) of a block as FlexAttention's functions take them:
    integer arrays that broadcast to (…, l, s), batch indexing the dimensions before the heads."""
    batch, head = (x[..., None, None] for x in np.divmod(np.asarray(slices, dtype=np.int64), pb.heads))
    return batch, head, np.arange(rows.start, rows.stop)[:, None], np.arange(cols.start, cols.stop)[None, :]


def mask_mod_allows(pb: Problem, slices: SliceIndex, rows: slice, cols: slice) -> Array | None:
    """The mask function's verdict on a block, broadcast to (…, l, s) (True: may attend),
    or None without one; ``slices`` as :func:`modify_scores_`'s."""
    mask_mod = pb.rules["mask_mod"]
    if mask_mod is None:
        return None
    batch, head, q_idx, kv_idx = _indices(pb, slices, rows, cols)
    shape = np.broadcast_shapes(batch.shape, q_idx.shape, kv_idx.shape)
    allowed = mask_mod(batch, head, q_idx, kv_idx)
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
    block, ``allowed`` the mask function's (:func:`mask_mod_allows`). Returns, when
    ``derivative`` is asked for, step 1's derivative with respect to the raw scores
    (…, l, s): softcap's 1 − tanh²(x/c) times each score function's f′; None when there
    is neither (1).

    Raises:
        ArgumentError: a score function that returns no real array broadcasting to the block.
    """
    rules = pb.rules
    slope = pb.per_slice(rules["alibi_slopes"])
    chain = None
    if rules["softcap"] is not None:
        chain = softcap_(rules["softcap"], scores, derivative)
    outside = [(variant, value) for variant, value in rules.variants if variant.name not in BUILTINS]
    for variant, value in outside:
        function = variant.score_mod(value)
        if function is not None:
            indices = _indices(pb, slices, rows, cols)
            step = score_mod_derivative(variant, value, scores, indices) if derivative else None
            scores[...] = _score_mod_result(variant.name, function(scores.copy(), *indices), scores)
            chain = step if chain is None else chain if step is None else chain * step
    if mask is not None and mask.dtype != bool:
        scores += mask
    if slope is not None:
        alibi_(slope, rules.offset, scores, slices, rows, cols)
    if outside:
        context = Context(pb.batch_shape, pb.compute_dtype, pb.lengths, rules.offset)
        for variant, value in outside:
            bias = variant.bias(value, slices, rows, cols, context)
            if bias is not None:
                scores += bias
    if mask is not None:
        if mask.dtype == bool:
            np.copyto(scores, -np.inf, where=~mask)
        else:
            np.copyto(scores, -np.inf, where=np.isneginf(mask))  # −∞ masks even a NaN score
    if not rules.band.inside(rows, cols):
        np.copyto(scores, -np.inf, where=~rules.band.allowed(rows, cols))
    if allowed is not None:
        np.copyto(scores, -np.inf, where=~allowed)
    return chain


def _score_mod_result(name: str, result: object, scores: Array) -> Array:
    """A score function's result, checked: a real array that broadcasts to the block's shape."""
    expected = f"a score_mod returning real scores that broadcast to {scores.shape}"
    if not isinstance(result, (np.ndarray, np.generic)) or result.dtype.kind not in "fiu":
        got = f"dtype {result.dtype}" if isinstance(result, (np.ndarray, np.generic)) else type(result).__name__
        raise fail(name, expected, got)
    try:
        return np.broadcast_to(result, scores.shape)
    except ValueError:
        raise fail(name, expected, f"shape {result.shape}") from None


def score_mod_derivative(variant: Variant, value: object, scores: Array, indices: tuple[Array, ...]) -> Array:
    """∂f/∂z of a variant's score function f on the block ``scores`` (…, l, s): its own
    ``score_mod_derivative`` if it gives one, else by complex step, f′(z) = Im f(z + i·h)/h
    (h = 2⁻¹⁰⁰), exact to rounding for f written in NumPy operations that are analytic
    in z (+, ·, /, exp, log, tanh, powers, sin, …), with no subtraction to cancel.

    Its limits: the derivative is with respect to the score only (a tensor captured in
    f's closure has no gradient, unlike under torch's autograd); and an f that is not
    analytic (abs, maximum, where on a comparison of z, rounding) or that drops the
    imaginary part (``np.real``, ``float``, a cast) is refused or wrong at its kinks:
    such a variant gives ``score_mod_derivative``.

    Raises:
        ArgumentError: f returns no complex array for a complex score (it dropped the
            imaginary part), or it raises a TypeError on one (np.floor, np.mod: not defined
            on complex numbers).
    """
    given: ScoreMod | None = variant.score_mod_derivative(value)
    if given is not None:
        return _score_mod_result(variant.name, given(scores.copy(), *indices), scores).astype(scores.dtype)
    function = variant.score_mod(value)
    assert function is not None
    stepped = scores.astype(np.complex128) + 1j * COMPLEX_STEP  # z + i·h, (…, l, s)
    expected = ("a score_mod analytic in the score (NumPy operations that keep a complex score complex), "
                "for its derivative by complex step, or a variant that gives score_mod_derivative")  # fmt: skip
    try:
        with np.errstate(all="ignore"):
            result = function(stepped, *indices)
    except TypeError as error:  # an operation NumPy does not define on complex numbers (floor, mod, …)
        raise fail(variant.name, expected, f"{type(error).__name__}: {error}") from None
    if not isinstance(result, np.ndarray) or result.dtype.kind != "c":
        got = f"dtype {result.dtype}" if isinstance(result, np.ndarray) else type(result).__name__
        raise fail(variant.name, expected, got)
    slope = np.broadcast_to(result.imag / COMPLEX_STEP, scores.shape)
    return slope.astype(scores.dtype)


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
