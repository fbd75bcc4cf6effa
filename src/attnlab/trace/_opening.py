"""The view a trace's page and plot open on when nobody chose one: the rule, in one place.

1. A model whose config names its answering head (:attr:`ModelTrace.opens`, builtin:coref's
   layer 1, head 0 on the pronoun) opens there (set where the model traces).
2. Else, where the attention is causal (every weight above the diagonal 0), the last token
   of the text (the last one neither special nor put there by a chat template; else the
   last token), on the head the head detector scores highest as a previous-token head
   (prev[l, h] = mean over i = 1..L − 1 of A[l, h, i, i − 1], attnlab.analysis.head_types'
   "previous"), the first such (layer, head) on a tie. Never query 0: its row is 1.0.
3. Else (an encoder, a cross-attention, one query) the first layer, head 0, query 0.

A model's statistics (:class:`ModelStatistics`, the page at length) follow rules 2 and 3
from their distance profiles: causal where no weight lies ahead of the query (d < 0), the
previous-token score Σ_i A[i, i − 1] / (L − 1) being the weight at distance d = 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import Array

__all__ = ["is_causal", "previous_token_scores", "telling_statistics_view", "telling_view"]


def is_causal(weights: Array) -> bool:
    """Whether every weight above the diagonal is 0 (weights (..., L, S)): the first query sees only itself."""
    return not np.triu(weights, 1).any()


def previous_token_scores(weights: Array) -> Array:
    """prev[l, h] = mean over i = 1..L − 1 of A[l, h, i, i − 1].

    Args:
        weights: A, (layers, H, L, L), rows summing to 1 (L ≥ 2).

    Returns:
        (layers, H) float64.
    """
    return np.diagonal(weights, offset=-1, axis1=-2, axis2=-1).mean(axis=-1)  # (layers, H, L − 1) -> (layers, H)


def telling_view(trace: Any) -> dict[str, int]:
    """The view of rule 2 (module docstring) for a causal :class:`Trace` or
    :class:`ModelTrace` (its layer by the model's number, its head and query), else {}
    (rule 3: the caller's first layer, head 0, query 0)."""
    layers = dict(trace.layers) if hasattr(trace, "layers") else {0: trace}
    square = {}
    for i, one in layers.items():
        weights = np.asarray(one.weights, dtype=np.float64)
        weights = weights[None] if weights.ndim == 2 else weights  # (L, S) -> (1, L, S): one head
        if (
            weights.ndim == 3
            and weights.shape[-1] == weights.shape[-2] >= 2
            and getattr(one, "key_tokens", None) is None
        ):
            square[i] = weights
    if getattr(trace, "source_tokens", None) is not None or not square:
        return {}
    if not all(is_causal(w) for w in square.values()):
        return {}
    indices = sorted(square)
    heads = max(w.shape[0] for w in square.values())
    scores = np.full((len(indices), heads), -1.0)  # (layers, H): a layer of fewer heads left at −1
    for n, i in enumerate(indices):
        scores[n, : square[i].shape[0]] = previous_token_scores(square[i][None])[0]  # (1, H, L, L) -> (H,)
    best, head = np.unravel_index(int(np.argmax(scores)), scores.shape)  # the first largest, layer by layer
    return {
        "layer": int(indices[best]),
        "head": int(head),
        "query": _last_text_token(trace, square[indices[0]].shape[-1]),
    }


def telling_statistics_view(stats: Any) -> dict[str, int]:
    """The view of rule 2 (module docstring) for a :class:`ModelStatistics` whose every head
    is causal over one sequence (L = S, no weight at d < 0): its layer, head and query; else {}."""
    s, L = stats.statistics, len(stats.tokens)
    bins = np.asarray(s.distance_bins)  # (bins, 2): each bin's first and last d
    if L < 2 or s.received.shape[-1] != L or np.asarray(s.distance)[..., bins[:, 1] < 0].any():
        return {}
    previous = int(np.flatnonzero((bins[:, 0] == 1) & (bins[:, 1] == 1))[0])  # the bin of d = 1 alone
    scores = np.asarray(s.distance, dtype=np.float64)[..., previous] / (L - 1)  # (layers, heads)
    layer, head = np.unravel_index(int(np.argmax(scores)), scores.shape)  # the first largest, layer by layer
    return {"layer": int(layer), "head": int(head), "query": _last_text_token(stats, L)}


def _last_text_token(marked: Any, L: int) -> int:
    """The last of the L tokens neither special nor put there by a chat template (its
    ``special`` and ``template`` marks), else the last token."""
    special = list(getattr(marked, "special", None) or [False] * L)
    template = list(getattr(marked, "template", None) or [False] * L)
    text = [i for i in range(L) if not (special[i] or template[i])]
    return text[-1] if text else L - 1
