"""A trace built: attention run through the engine, with the scores beside its weights
and output, the scaled ones modified as the engine modified them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from .._validation import Array, fail, real_number
from ..engine._attention import attention, engine_problem
from ..engine._masks import mask_mod_allows, modify_scores_
from ..engine._problem import Problem, default_scale, make_problem
from ..engine.variants import BUILTINS, Rules
from ._trace import Trace
from ._variants import Variants

__all__ = ["build_trace"]


def build_trace(
    inputs: Array,
    Q: Array,
    K: Array,
    V: Array,
    *,
    scale: float | None,
    tokens: Sequence[str] | None,
    is_causal: bool = False,
    attn_mask: ArrayLike | None = None,
    key_tokens: Sequence[str] | None = None,
    rules: Rules | None = None,
) -> Trace:
    """The trace of attention over projections Q (…, L, d_k) of ``inputs`` (L, d_model)
    and K (…, S, d_k), V (…, S, d_v): of the same rows in self-attention (S = L), of
    another sequence's in cross-attention. The weights and output come from the engine,
    and the scores beside them for display, the scaled ones modified as the engine
    modified them, through the engine's own Problem (``engine._masks.modify_scores_``).

    Args:
        inputs: X, (L, d_model), the queries' input.
        Q: (…, L, d_k), one head or (H, L, d_k).
        K: (…, S, d_k).
        V: (…, S, d_v).
        scale: multiplies Q·Kᵀ; None: 1/√d_k (1 when d_k = 0).
        tokens: L labels of the rows, or None.
        is_causal: query i attends to keys j <= i only (j <= i + S − L bottom-right aligned).
        attn_mask: bool (True: may attend) or float (added), broadcasting to (…, L, S).
        key_tokens: S labels of K's and V's rows when they are not the queries' (the
            other sequence's tokens in cross-attention), or None (the same as ``tokens``).
        rules: the variants as one ``engine.variants.Rules`` (per-head values of H, or 1
            for one head), as :func:`attnlab.attention` takes it; ``is_causal`` is its
            keyword, given one way or the other.

    Raises:
        ValueError, TypeError: tokens that are not L labels, key tokens that are not S
            labels, and any argument that :func:`attnlab.attention` refuses.
    """
    scale = default_scale(Q.shape[-1]) if scale is None else real_number("scale", scale)
    L = len(inputs)
    if L == 0:  # a trace shows rows: none is nothing to show, and a page or plot of it would fail
        raise fail("X", "at least one row (token) to trace", "0 rows")
    if isinstance(tokens, str):
        raise fail("tokens", f"{L} labels, one per row of the input", "a string", TypeError)
    if tokens is not None and len(tokens) != L:
        raise fail("tokens", f"{L} labels, one per row of the input", f"{len(tokens)} labels")
    S = np.shape(K)[-2] if np.ndim(K) >= 2 else 0
    if isinstance(key_tokens, str):
        raise fail("key_tokens", f"{S} labels, one per row of K", "a string", TypeError)
    if key_tokens is not None and len(key_tokens) != S:
        raise fail("key_tokens", f"{S} labels, one per row of K and V", f"{len(key_tokens)} labels")
    result = attention(Q, K, V, attn_mask=attn_mask, is_causal=is_causal, scale=scale, need_weights=True, rules=rules)
    pb = result.problem
    multiplier = engine_problem(pb)[1]  # a row scale's m_i, (…, L), or None
    with np.errstate(over="ignore", invalid="ignore"):  # overflowing scores are shown as ±inf or NaN
        scores = Q @ np.swapaxes(K, -1, -2)  # (…, L, L)
        scaled = scores * scale
        if multiplier is not None:
            scaled *= multiplier[..., None]  # row i's dot products times m_i
        _modify(pb, scaled)  # softcap, the biases, and −inf where a rule rules key j out
    bias = None
    given = pb.rules.given
    outside = {  # the variants from outside the package that add a bias (a score function is none)
        variant.name: given.extra[variant.name]
        for variant, value in pb.rules.variants
        if variant.name not in BUILTINS and variant.score_mod(value) is None
    }
    if given.alibi_slopes is not None or outside or (pb.mask is not None and pb.mask.dtype != bool):
        float_mask = None if pb.mask is None or pb.mask.dtype == bool else pb.mask
        biases = Rules(causal_alignment=given.causal_alignment, alibi_slopes=given.alibi_slopes, extra=outside)
        additive = make_problem(Q, K, V, float_mask, 0.0, scale, False, None, biases)
        bias = np.zeros_like(scaled)
        _modify(additive, bias)  # the float mask, ALiBi and the outside variants' biases alone, (…, L, L)
    variants = Variants.of_problem(pb)
    labels = None if tokens is None else list(tokens)
    weights = result.weights
    assert weights is not None  # need_weights: the naive engine's
    key_labels = None if key_tokens is None else list(key_tokens)
    return Trace(
        inputs, Q, K, V, scores, scale, scaled, weights, result.output, labels, bias=bias, variants=variants,
        key_tokens=key_labels,
    )  # fmt: skip


def _modify(pb: Problem, scores: Array) -> None:
    """Steps 1 and 2 of ``engine._masks`` on the whole (…, L, S) matrix of scale·Q·Kᵀ, in place."""
    L, S = pb.lengths
    slices = np.arange(pb.slices).reshape(pb.batch_shape)  # n, (B…)
    rows, cols = slice(0, L), slice(0, S)
    modify_scores_(pb, scores, pb.mask, slices, rows, cols, mask_mod_allows(pb, slices, rows, cols))
