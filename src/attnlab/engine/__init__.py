"""The attention engine: one call's arguments checked once (a :class:`Problem`), the
masks, the stable softmax, and three engines behind one interface (:class:`EngineImpl`,
registered by name in ``ENGINES``: ``naive``, ``tiled``, ``fused``) that compute the
output, the log-sum-exp and the exact gradients.

:func:`attention` is the entry point; :mod:`attnlab.functional` gives it torch's shape.
:func:`attention_statistics` gives the statistics of its weights (per query, per key, by
distance) from the tiles, never the (L, S) matrix; :func:`attention_row` one query's whole row.
"""

from ._attention import ENGINES, Attention, Engine, EngineImpl, Gradients, attention, backward, choose_engine
from ._problem import Problem, make_problem
from ._softmax import softmax
from ._statistics import AttentionStatistics, attention_row, attention_statistics

__all__ = [
    "ENGINES",
    "Attention",
    "AttentionStatistics",
    "Engine",
    "EngineImpl",
    "Gradients",
    "Problem",
    "attention",
    "attention_row",
    "attention_statistics",
    "backward",
    "choose_engine",
    "make_problem",
    "softmax",
]
