"""Model statistics made in the tests, for the statistics page and plots: heads of known
roles built from random q and k through attnlab.engine.attention_statistics, stacked to
(layers, heads) as attnlab.trace.ModelStatistics holds them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnlab.engine import AttentionStatistics, attention_statistics


@dataclass
class Statistics:
    """A stand-in with ModelStatistics' fields that the page reads."""

    statistics: AttentionStatistics
    tokens: list[str]
    model: str = "random heads"
    ids: list[int] = field(default_factory=list)
    special: list[bool] = field(default_factory=list)
    template: list[bool] | None = None
    notes: list[str] = field(default_factory=list)
    architecture: str = ""
    num_key_value_heads: int = 0


def head(kind: str, length: int, rng: np.random.Generator, width: int = 16) -> AttentionStatistics:
    """One causal head's statistics: "sink" (every query's keys 0 large), "local" (a window
    of 8 keys), "long-range" (each query looks at a key 512 back: q_i = k_(i−512)) or "random"."""
    q = rng.standard_normal((length, width))
    k = rng.standard_normal((length, width))
    rules: dict[str, object] = {"is_causal": True}
    if kind == "sink":
        common = rng.standard_normal(width)
        q += 2 * common
        k[0] = common * 4  # every query's largest score
    elif kind == "local":
        rules["window"] = (8, 0)
    elif kind == "long-range":
        q[512:] = k[:-512] * 4
        q[:512] = 0
    return attention_statistics(q, k, top_k=4, **rules)


def stacked(heads: list[list[AttentionStatistics]]) -> AttentionStatistics:
    """Heads (layers × heads of one-head statistics) as one AttentionStatistics of batch (layers, heads)."""
    first = heads[0][0]
    arrays = {
        name: np.stack([np.stack([getattr(h, name) for h in row]) for row in heads])
        for name in ("lse", "entropy", "max_weight", "top_keys", "top_weights", "sink_share", "local_share",
                     "sinks_weight", "received", "distance")
    }  # fmt: skip
    return AttentionStatistics(
        **arrays, distance_bins=first.distance_bins, sink_keys=first.sink_keys, local_keys=first.local_keys
    )


def model_statistics(length: int, kinds: list[list[str]], seed: int = 0) -> Statistics:
    """Statistics of a model whose heads are ``kinds`` (layers × heads of head()'s kinds)."""
    rng = np.random.default_rng(seed)
    stats = stacked([[head(kind, length, rng) for kind in row] for row in kinds])
    tokens = [f"t{i}" for i in range(length)]
    return Statistics(stats, tokens, ids=list(range(length)), special=[i == 0 for i in range(length)])
