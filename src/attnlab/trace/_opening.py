"""The view a trace's page and plot open on when nobody chose one: the rule, in one place.

1. A model whose config names its answering head (:attr:`ModelTrace.opens`, builtin:coref's
   layer 1, head 0 on the pronoun) opens there (set where the model traces).
2. Else, where the attention is causal (every weight above the diagonal 0), the last token
   of the text (the last one neither special nor put there by a chat template; else the
   last token), on the head the head detector scores highest as a previous-token head
   (prev[l, h] = mean over i = 1..L − 1 of A[l, h, i, i − 1], attnlab.analysis.head_types'
   "previous"), the first such (layer, head) on a tie. Never query 0: its row is 1.0.
3. Else (an encoder, a cross-attention, one query) the first layer, head 0, query 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import Array

__all__ = ["is_causal", "previous_token_scores", "telling_view"]


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
    L = square[indices[0]].shape[-1]
    special = list(getattr(trace, "special", None) or [False] * L)
    template = list(getattr(trace, "template", None) or [False] * L)
    text = [i for i in range(L) if not (special[i] or template[i])]
    return {"layer": int(indices[best]), "head": int(head), "query": text[-1] if text else L - 1}
