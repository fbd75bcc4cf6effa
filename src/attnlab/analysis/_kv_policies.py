"""What a KV cache keeps, three ways: each policy is one function from what it reads to the
keys each generated token's query may see, per head.

n is the prompt's length, T the generated tokens, S = n + T the positions; generated token
t sits at position p = n + t, and its query sees its own key and ``budget`` earlier ones
(StreamingLLM, H2O: a cache of fixed size), or ``budget`` of the prompt's and every
generated one (SnapKV, which compresses the prompt once). A policy's "head" is a
key/value head: with grouped-query attention, the G query heads that share one vote
together (their weights summed), since a cache drops a key/value head's entries. Ties
between equal scores keep the lower position.

- :func:`streaming_llm` (Xiao et al. 2023, arXiv 2309.17453): the first ``sinks`` keys
  and the most recent ``budget − sinks``.
- :func:`h2o` (Zhang et al. 2023, arXiv 2306.14048): the ``recent`` most recent keys and
  the heavy hitters (the most attention accumulated since each key arrived), one key
  evicted greedily after each step.
- :func:`snapkv` (Li et al. 2024, arXiv 2404.14469): the prompt's last ``window`` queries
  vote with their weights, the votes pooled along the keys, the top keys kept with the
  window; the generated keys are all kept.
"""

from __future__ import annotations

import numpy as np

from .._validation import Array, fail

__all__ = ["POLICIES", "h2o", "pooled", "snapkv", "streaming_llm", "top_keys"]

POLICIES = ("streaming_llm", "h2o", "snapkv")


def top_keys(scores: Array, count: int) -> Array:
    """The ``count`` positions of the largest scores along the last axis, ties to the lower
    position: indices (…, count), in no set order. scores (…, m)."""
    order = np.argsort(-scores, axis=-1, kind="stable")  # (…, m), the largest first, equal ones by position
    return order[..., :count]


def streaming_llm(prompt: int, steps: int, budget: int, sinks: int = 4) -> Array:
    """StreamingLLM's cache: the query at p = prompt + t sees the keys j < ``sinks`` and
    p − (budget − sinks) ≤ j ≤ p, the same in every layer and head.

    Returns:
        (steps, prompt + steps) bool, row t the keys of generated token t's query.

    Raises:
        ArgumentError: a budget not above ``sinks``, a negative ``sinks``.
    """
    if sinks < 0:
        raise fail("sinks", "0 or more first keys kept", sinks)
    if budget <= sinks:
        raise fail("budget", f"more keys than the {sinks} sinks", budget)
    p = np.arange(prompt, prompt + steps)[:, None]  # (T, 1) the queries' positions
    j = np.arange(prompt + steps)[None, :]  # (1, S)
    return ((j < sinks) | (j >= p - (budget - sinks))) & (j <= p)


def pooled(votes: Array, kernel: int, pool: str) -> Array:
    """``votes`` (…, m) pooled along the last axis with stride 1 and ``kernel // 2`` cells
    of padding each side, the length kept (odd kernel): "max" pads with −∞, "avg" pads with
    0 and divides by ``kernel`` (torch's max_pool1d and avg_pool1d with their defaults).

    Raises:
        ArgumentError: an even or non-positive kernel, a pool other than "max" or "avg".
    """
    if kernel < 1 or kernel % 2 == 0:
        raise fail("kernel", "an odd kernel size ≥ 1", kernel)
    if pool not in ("max", "avg"):
        raise fail("pool", '"max" or "avg"', repr(pool))
    half, m = kernel // 2, votes.shape[-1]
    fill = -np.inf if pool == "max" else 0.0
    padded = np.pad(votes, [(0, 0)] * (votes.ndim - 1) + [(half, half)], constant_values=fill)  # (…, m + 2·half)
    windows = np.lib.stride_tricks.sliding_window_view(padded, kernel, axis=-1)  # (…, m, kernel)
    assert windows.shape[-2] == m
    return windows.max(axis=-1) if pool == "max" else windows.sum(axis=-1) / kernel


def snapkv(window_weights: Array, window: int, budget: int, kernel: int = 5, pool: str = "avg") -> Array:
    """SnapKV's prompt cache: the vote of key j < n − w is the sum of the window's weights
    on it, over its ``window`` = w last prompt queries (and a group's query heads); the
    votes pooled (:func:`pooled`); the top ``budget − w`` keys of the prefix kept with the
    w window keys (the window counts in the budget).

    Args:
        window_weights: (heads, rows, n) the weights of the window's queries (rows = G·w)
            over the n prompt keys.
        window: w, the observation window.
        budget: the prompt keys kept per head.
        kernel, pool: the pooling (:func:`pooled`).

    Returns:
        (heads, n) bool: the prompt keys kept; every generated key is kept too.

    Raises:
        ArgumentError: a window not below the budget or the prompt, a bad kernel or pool.
    """
    heads, _, n = window_weights.shape
    if not 0 < window < min(budget, n):
        raise fail("window", f"1 to {min(budget, n) - 1}: fewer queries than the budget and the prompt", window)
    prefix = n - window
    votes = pooled(window_weights[:, :, :prefix].sum(axis=1), kernel, pool)  # (heads, rows, n) -> (heads, n − w)
    kept = np.zeros((heads, n), dtype=bool)
    np.put_along_axis(kept, top_keys(votes, min(budget - window, prefix)), True, axis=-1)
    kept[:, prefix:] = True
    return kept


def h2o(accumulated: Array, scores: Array, budget: int, recent: int | None = None) -> Array:
    """H2O's cache, step by step. After the prompt, each head keeps its ``recent`` = r last
    prompt keys and the ``budget − r`` heavy hitters among the others: the keys with the
    most attention ``accumulated`` over the prompt's queries. At step t the query at
    p = n + t sees the kept keys and its own, with weights softmax(scores) over them; each
    weight joins its key's accumulated attention; then the cache keeps the r keys
    p − r < j ≤ p and the ``budget − r`` of the rest with the most accumulated attention
    (so one key is evicted). The weights are recomputed here from the scores: those of
    the run that evicts, which :func:`evict` gives layer by layer.

    Args:
        accumulated: (heads, n) each prompt key's attention summed over the prompt's
            queries (and a group's query heads).
        scores: (heads, G, T, n + T) the scaled scores q·k·scale of the T generated
            queries, G query heads per key/value head; those past a query's position unread.
        budget: the keys kept between steps, per head.
        recent: r, the recent keys among them (default budget // 2, the paper's equal split).

    Returns:
        (heads, T, n + T) bool: row t the keys generated token t's query sees.

    Raises:
        ArgumentError: a budget below 1, ``recent`` outside 0..budget.
    """
    if budget < 1:
        raise fail("budget", "1 or more keys", budget)
    recent = budget // 2 if recent is None else recent
    if not 0 <= recent <= budget:
        raise fail("recent", f"0 to the budget, {budget}", recent)
    heads, _, T, S = scores.shape
    n = S - T
    acc = np.zeros((heads, S))
    acc[:, :n] = accumulated
    kept = np.zeros((heads, S), dtype=bool)
    kept[:, max(n - recent, 0) : n] = True
    older = acc[:, : max(n - recent, 0)]  # (heads, n − r)
    np.put_along_axis(kept, top_keys(older, min(budget - recent, older.shape[1])), True, axis=-1)
    seen = np.zeros((heads, T, S), dtype=bool)
    for t in range(T):
        p = n + t
        kept[:, p] = True
        seen[:, t] = kept
        x = np.where(kept[:, None, :], scores[:, :, t], -np.inf)  # (heads, G, S)
        weights = np.exp(x - x.max(axis=-1, keepdims=True))
        acc += (weights / weights.sum(axis=-1, keepdims=True)).sum(axis=1)  # (heads, G, S) -> (heads, S)
        if kept[0].sum() > budget:  # every head keeps the same count
            rest = np.where(kept, acc, -np.inf)
            rest[:, max(p - recent + 1, 0) : p + 1] = -np.inf  # the recent keys stay regardless
            heavy = np.zeros_like(kept)
            np.put_along_axis(heavy, top_keys(rest[:, : p + 1], budget - recent), True, axis=-1)
            kept = heavy
            kept[:, max(p - recent + 1, 0) : p + 1] = True
    return seen
