"""``length_scale`` s (H,): Scalable-Softmax's length-scaled scores (Nakanishi, 2025,
arXiv 2501.19399). Query i's dot products are multiplied by m_i = s_h·log n_i:

    Z_ij = softcap(m_i · scale·q_i·k_j) + biases,    n_i = the keys query i may see,

so softmax over n keys keeps its largest weight as n grows (the paper's SSMax,
softmax(s·log n · z), multiplies the query: with no softcap or bias it is exactly that).
n_i counts the keys of the band (``is_causal`` and ``window``, on the diagonal of
``causal_alignment``) within the keys of query i's sequence (``key_lengths`` when given,
each sequence's diagonal at its own length bottom-right): the positional rules only. The
attention mask, ``mask_mod`` and dropout do not change n_i (they are data, not lengths),
and the sink is no key. log n_i is taken as 0 where n_i <= 1 (one key, or none: the row is
the same whatever m_i).

It is a row scale (``Variant.row_scale``): the engines run on Q's rows times m, so the
naive, tiled and fused engines and the fused decode path take it as they are. Its
gradient, dL/ds_h = Σ_i log n_i · (q_i·dq'_i) over every row of every slice of head h (dq'
the gradient of the scaled rows), is ``Gradients.length_scale``. Given as
``Rules.of(length_scale=s)`` (no torch function has a keyword for it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._validation import Array
from ._base import Band, register
from ._per_head import PerHead

__all__ = ["LENGTH_SCALE", "keys_seen"]

_WORDS = {
    "en": "length-scaled scores (Scalable-Softmax): query i's scores × s·log n_i, n_i the keys it may see (s {s})",
    "zh": "按长度缩放分数（Scalable-Softmax）：查询 i 的分数 × s·log n_i，n_i 为它可见的键数（s {s}）",
}


def keys_seen(band: Band, lengths: tuple[int, int], key_lengths: Array | None, bottom_right: bool) -> Array:
    """n_i, the keys of the band each query may see: (L,) without key lengths, else
    (B… without the heads, L), sequence b's band moved to its own diagonal bottom-right
    (as ``engine._ragged`` moves it) and cut at its key_lengths[b]."""
    L, S = lengths
    rows = np.arange(L)
    if key_lengths is None:
        first = np.clip(rows + band.lowest, 0, S)
        stop = np.clip(rows + band.highest + 1, 0, S)
        return np.maximum(stop - first, 0)  # (L,)
    length = key_lengths[..., None]  # (B…, 1), B… without the heads
    shift = length - S if bottom_right else 0
    first = np.clip(rows + band.lowest + shift, 0, length)
    stop = np.clip(rows + band.highest + shift + 1, 0, length)
    return np.maximum(stop - first, 0)  # (B…, L)


def _log_keys(pb: Any) -> Array:
    """log n_i (0 where n_i <= 1) broadcast to (B…, L) in the compute dtype, ``pb`` a Problem."""
    seen = keys_seen(pb.rules.band, pb.lengths, pb.key_lengths, pb.rules.bottom_right)
    if seen.ndim > 1:
        seen = seen[..., None, :]  # the heads' dimension, (B…, 1, L)
    logs = np.log(np.maximum(seen, 1).astype(pb.compute_dtype))
    return np.broadcast_to(logs, (*pb.batch_shape, pb.lengths[0]))


class _LengthScale(PerHead):
    name = "length_scale"
    compiled = True  # a row scale: every engine runs Q's scaled rows, compiled or not

    def row_scale(self, checked: Any, pb: Any) -> Array | None:
        return None if checked is None else checked[..., None] * _log_keys(pb)  # m = s_h·log n_i, (B…, L)

    def row_scale_gradient(self, checked: Any, pb: Any, grad_scale: Array) -> Array | None:
        if checked is None:
            return None
        per_slice = (grad_scale * _log_keys(pb)).sum(axis=-1)  # Σ_i log n_i · dL/dm_i, (B…)
        return per_slice.reshape(-1, pb.heads).sum(axis=0)  # (H,), (1,) for 2-D inputs

    def describe(self, recorded: Any, lang: str) -> str | None:
        return None if recorded is None else _WORDS[lang].format(s=", ".join(f"{s:.4g}" for s in recorded))


LENGTH_SCALE = register(_LengthScale())
