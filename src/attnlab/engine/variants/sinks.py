"""``sinks`` (H,): one more key per head with logit s_h and value 0, joined to every row's
softmax and then dropped (gpt-oss's). The engines merge it after the last block; its
gradient, −Σ_i e^(s − lse_i)·δ_i, is ``sinks_gradient``, from the lse alone."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._validation import Array
from ._base import register
from ._per_head import PerHead

__all__ = ["SINKS", "sinks_gradient"]

_WORDS = {
    "en": "sinks: one logit per head joins each softmax (logit {sinks}), so a row's weights sum to less than 1",
    "zh": "sinks：每个头一个 logit 加入 softmax（logit {sinks}），一行的权重之和小于 1",
}


def sinks_gradient(logits: Array, lse: Array, delta: Array, slices: int, heads: int) -> Array:
    """dL/ds_h = −Σ_i e^(s_h − lse_i)·δ_i over every row of every slice of head h: (H,),
    (1,) for 2-D inputs; the sink ``logits`` s broadcast to B…, ``lse`` and ``delta`` (B…, L)."""
    with np.errstate(over="ignore", invalid="ignore"):
        sink_weight = np.exp(logits[..., None] - lse)  # (B…, L)
    per_slice = -(sink_weight * delta).sum(axis=-1)  # (B…)
    return per_slice.reshape(slices // max(heads, 1), heads).sum(axis=0)


class _Sinks(PerHead):
    name = "sinks"
    compiled = True

    def describe(self, recorded: Any, lang: str) -> str | None:
        return None if recorded is None else _WORDS[lang].format(sinks=", ".join(f"{s:.4g}" for s in recorded))


SINKS = register(_Sinks())
