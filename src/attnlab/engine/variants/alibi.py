"""``alibi_slopes`` (H,) or (B, H): adds −slope·|d| to the scores, d = j − (i + offset)
(BLOOM's ALiBi). Its score rule (``alibi_``) is here; it has no gradient of its own (the
slopes are constants), and the fused kernels compile the same rule."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._validation import Array
from ._base import register
from ._per_head import PerHead

__all__ = ["ALIBI", "alibi_", "distance"]

_WORDS = {
    "en": "ALiBi: −slope·|j − i| added to the scores (slope {slopes})",
    "zh": "ALiBi：分数加上 −slope·|j − i|（slope {slopes}）",
}


def distance(rows: slice, cols: slice) -> Array:
    """j − i over a block, (l, s)."""
    return np.arange(cols.start, cols.stop)[None, :] - np.arange(rows.start, rows.stop)[:, None]


def alibi_(slope: Array, offset: int, scores: Array, slices: Any, rows: slice, cols: slice) -> None:
    """Z −= slope·|j − (i + offset)| in place, ``slope`` one per slice (n,)."""
    far = np.abs(distance(rows, cols) - offset).astype(scores.dtype)  # |j − (i + offset)|
    scores -= far * np.asarray(slope[slices])[..., None, None]


class _Alibi(PerHead):
    name = "alibi_slopes"
    compiled = True
    shapes = "(H,) or (B, H)"
    ndims = (1, 2)

    def describe(self, recorded: Any, lang: str) -> str | None:
        return None if recorded is None else _WORDS[lang].format(slopes=", ".join(f"{s:.4g}" for s in recorded))


ALIBI = register(_Alibi())
