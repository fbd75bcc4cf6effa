"""Model statistics made in the tests, for the statistics page and plots: heads of known
roles built from random q and k through attnlab.engine.attention_statistics, one head at a
time (each its own rules), stacked to (layers, heads) as attnlab.trace.ModelStatistics
holds them."""

from __future__ import annotations

import numpy as np

from attnlab.engine import AttentionStatistics, attention_statistics
from attnlab.trace import ModelStatistics


def head(kind: str, length: int, rng: np.random.Generator, width: int = 16) -> AttentionStatistics:
    """One causal head's statistics, (1, …): "sink" (key 0 every query's largest score by
    far), "local" (a window of 8 keys), "long-range" (query i ≥ 512 looks at key i − 512:
    q_i = 4·k_(i−512)) or "random"."""
    q = rng.standard_normal((1, length, width))
    k = rng.standard_normal((1, length, width))
    rules: dict[str, object] = {"is_causal": True}
    if kind == "sink":
        common = rng.standard_normal(width)
        q += 2 * common
        k[0, 0] = common * 4
    elif kind == "local":
        rules["window"] = (8, 0)
    elif kind == "long-range":
        q[0, 512:] = k[0, :-512] * 4
        q[0, :512] = 0
    return attention_statistics(q, k, top_k=4, **rules)


def stacked(row: list[AttentionStatistics]) -> AttentionStatistics:
    """One layer's heads, (1, …) each, as one AttentionStatistics of batch (heads,)."""
    first = row[0]
    names = ("lse", "entropy", "max_weight", "top_keys", "top_weights", "sink_share", "local_share", "sinks_weight")
    arrays = {name: np.concatenate([getattr(h, name) for h in row]) for name in (*names, "received", "distance")}
    return AttentionStatistics(
        **arrays, distance_bins=first.distance_bins, sink_keys=first.sink_keys, local_keys=first.local_keys
    )


def model_statistics(length: int, kinds: list[list[str]], seed: int = 0) -> ModelStatistics:
    """Statistics of a model whose heads are ``kinds`` (layers × heads of head()'s kinds), its
    tokens "t0", "t1", …, the first special."""
    rng = np.random.default_rng(seed)
    layers = [stacked([head(kind, length, rng) for kind in row]) for row in kinds]
    tokens = [f"t{i}" for i in range(length)]
    return ModelStatistics.from_layers(
        layers, model="random heads", ids=list(range(length)), tokens=tokens, special=[i == 0 for i in range(length)]
    )
