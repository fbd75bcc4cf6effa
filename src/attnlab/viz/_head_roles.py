"""Each head's role at length, from its statistics alone (the page's grid of profiles and
the plots say it with a colour and a word): "sink", "local", "long-range" or "mixed".

For a head over L queries (causal, top-left: d = i − j >= 0), with P_ij its weights,
received_j = Σ_i P_ij, distance_b its weight by the bin of d and T_i query i's top k keys
(``attnlab.engine.attention_statistics``), W = Σ_b distance_b (every query's weight on the
text's keys: L less the sinks' own weight), and the head's sink keys K its s keys that
receive the most (s = the statistics' sink_keys; ties to the lower key):

    sink       = Σ_{j in K} received_j / W              the share on its s most-received keys
    local      = Σ_{b: d <= 15} distance_b / W          the share within 15 keys behind the query
    long-range = mean over i >= 256 of Σ_{j in T_i, j not in K, i − j >= 256} P_ij
                                                        what a query's top keys 256 or more behind
                                                        it take, the sink keys aside: a head that
                                                        looks far at keys of its own (a diffuse
                                                        head's top keys take little)

and the role is the first that holds of: sink >= 0.5 → "sink"; local >= 0.5 → "local";
long-range >= 0.2 → "long-range"; else "mixed". A sink is any key that most queries attend
(a model's first token, and often a later one: SmolLM2 puts half its weight in layers 3–9
on a space at position 27), hence the most-received keys rather than the first s. The
distance bins are log-spaced (0, 1, 2–3, 4–7, 8–15, 16–31, …), so 15 is a bin edge and the
shares are exact; long-range is exact for the top k keys the statistics keep.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._validation import Array
from ..engine import AttentionStatistics

__all__ = ["FAR", "NEAR", "ROLES", "ROLE_RULE", "THRESHOLDS", "HeadRoles", "head_roles"]

NEAR = 15  # the largest distance that is "local"
FAR = 256  # the smallest distance that is "long-range"
THRESHOLDS = {"sink": 0.5, "local": 0.5, "long-range": 0.2}  # checked in this order
ROLES = ("sink", "local", "long-range", "mixed")
ROLE_RULE = (
    "a head is a sink head when at least half its weight is on the {s} keys it gives the most; else local when at "
    "least half is within 15 keys behind the query; else long-range when a query's top keys 256 or more behind it "
    "(those {s} aside) take a fifth of its weight or more, on average; else mixed"
)


class HeadRoles(NamedTuple):
    """Per head, (B…) as the statistics' batch (a model's (layers, heads)): its sink keys
    (B…, s), most received first, the shares of the module's docstring and the role, an
    index into :data:`ROLES`."""

    sinks: Array
    sink: Array
    local: Array
    far: Array
    role: Array


def head_roles(statistics: AttentionStatistics) -> HeadRoles:
    """The role of each head of ``statistics`` (B…, L) by the rule of the module's docstring.
    A head with no weight on the text (W = 0) has shares 0 and is "mixed"."""
    bins, s = statistics.distance_bins, statistics.sink_keys
    distance = statistics.distance.astype(np.float64)  # (B…, bins)
    total = distance.sum(axis=-1)  # (B…,)
    safe = np.where(total > 0, total, 1.0)
    received = statistics.received.astype(np.float64)  # (B…, S)
    sinks = np.argsort(-received, axis=-1, kind="stable")[..., :s]  # (B…, s): most received, ties to the lower key
    sink = np.take_along_axis(received, sinks, axis=-1).sum(axis=-1) / safe
    local = distance[..., (bins[:, 0] >= 0) & (bins[:, 1] <= NEAR)].sum(axis=-1) / safe
    keys, weights = statistics.top_keys, statistics.top_weights.astype(np.float64)  # (B…, L, k)
    queries = np.arange(keys.shape[-2])[:, None]  # (L, 1)
    a_sink = (keys[..., None] == sinks[..., None, None, :]).any(axis=-1)  # (B…, L, k)
    far_keys = (keys >= 0) & ~a_sink & (queries - keys >= FAR)  # (B…, L, k)
    far_rows = (far_keys * weights).sum(axis=-1)[..., FAR:]  # (B…, L − 256)
    far = far_rows.mean(axis=-1) if far_rows.shape[-1] else np.zeros_like(total)
    tests = [sink >= THRESHOLDS["sink"], local >= THRESHOLDS["local"], far >= THRESHOLDS["long-range"]]
    role = np.select(tests, [0, 1, 2], default=3)  # the first that holds
    role = np.where(total > 0, role, 3)
    return HeadRoles(sinks, sink, local, far, role.astype(np.int64))
