"""The naive engine: the whole (L, S) score matrix of every head at once.

    S = scale · Q·Kᵀ + mask        P = softmax(S)        O = dropout(P)·V

Backward, with D = rowsum(dO∘O) = rowsum(dP∘P):

    dV = dropout(P)ᵀ·dO    dP = dropout(dO·Vᵀ)    dS = P∘(dP − D)
    dQ = scale · dS·K      dK = scale · dSᵀ·Q
"""

from __future__ import annotations

import numpy as np

from ._dropout import keep_mask
from ._problem import Problem
from ._softmax import softmax_lse_


def mask_scores_(scores: np.ndarray, mask: np.ndarray | None, is_causal: bool, row0: int = 0, col0: int = 0) -> None:
    """Mask a block of scores (…, l, s) in place; the block starts at row ``row0`` and
    column ``col0`` of the full matrix. A bool mask's False and the causal mask's
    j > i become −inf; a float mask is added."""
    if mask is not None:
        if mask.dtype == bool:
            np.copyto(scores, -np.inf, where=~mask)
        else:
            scores += mask
    if is_causal:
        rows, cols = scores.shape[-2:]
        first = max(0, row0 + 1 - col0)  # columns before this one are visible to every row of the block
        later = np.arange(col0 + first, col0 + cols)[None, :] > np.arange(row0, row0 + rows)[:, None]  # (l, s - first)
        np.copyto(scores[..., first:], -np.inf, where=later)


def dropout_scale(pb: Problem) -> np.ndarray | None:
    """keep / (1 − p) over (B…, L, S), or None without dropout."""
    if pb.dropout_seed is None:
        return None
    L, S, _ = pb.shape
    batch = pb.batch_shape
    keep = np.empty((*batch, L, S), dtype=bool)
    for head, index in enumerate(np.ndindex(*batch)):
        keep[index] = keep_mask(pb.dropout_seed, head, slice(0, L), slice(0, S), pb.dropout_p)
    return keep * np.asarray(1.0 / (1.0 - pb.dropout_p), dtype=pb.query.dtype)


def _expand_heads(pb: Problem) -> tuple[np.ndarray, np.ndarray]:
    """Key and value with each of their Hk heads repeated for its G query heads."""
    if pb.groups == 1:
        return pb.key, pb.value
    return np.repeat(pb.key, pb.groups, axis=-3), np.repeat(pb.value, pb.groups, axis=-3)


def _probabilities(pb: Problem, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P = softmax(scale · Q·Kᵀ + mask), (B…, L, S), and its rows' log-sum-exp (B…, L)."""
    scores = pb.query @ np.swapaxes(key, -1, -2)  # (B…, L, S)
    scores *= pb.scale
    mask_scores_(scores, pb.mask, pb.is_causal)
    return softmax_lse_(scores)


def forward(pb: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (output (B…, L, Ev), weights actually applied (B…, L, S), lse (B…, L))."""
    key, value = _expand_heads(pb)
    weights, lse = _probabilities(pb, key)
    scale = dropout_scale(pb)
    if scale is not None:
        weights *= scale
    return weights @ value, weights, lse


def backward(pb: Problem, grad_output: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients for query, key and value over the broadcast shapes (B…, ·, ·), with
    the key and value heads still expanded for GQA."""
    key, value = _expand_heads(pb)
    probs, _ = _probabilities(pb, key)
    scale = dropout_scale(pb)
    applied = probs if scale is None else probs * scale
    grad_value = np.swapaxes(applied, -1, -2) @ grad_output  # (B…, S, Ev)
    grad_probs = grad_output @ np.swapaxes(value, -1, -2)  # (B…, L, S)
    if scale is not None:
        grad_probs *= scale
    row_dot = (grad_probs * probs).sum(axis=-1, keepdims=True)  # D = rowsum(dO∘O), (B…, L, 1)
    grad_scores = probs * (grad_probs - row_dot)
    grad_scores *= pb.scale
    grad_query = grad_scores @ key  # (B…, L, E)
    grad_key = np.swapaxes(grad_scores, -1, -2) @ pb.query  # (B…, S, E)
    return grad_query, grad_key, grad_value
