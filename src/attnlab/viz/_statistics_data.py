"""What the statistics page carries, as JSON: a model's statistics at length
(``attnlab.trace.ModelStatistics``: every layer and head, no weights) packed to fit a page
of at most PAGE_LIMITS["page"] bytes. The keys are the names the page's script
(assets/js/length_state.js, ``statisticsOf``) reads.

Per head (a list of layers × heads strings, row-major), one zlib stream (``deflate``, as the
page's DecompressionStream reads it) in base64 of these little-endian arrays one after
another, so that the page decodes a head when it first shows it:

    received      float16   (S,)     Σ_i P_ij, the attention key j receives (2⁻¹¹ relative,
                                     2⁻²⁵ absolute; 65,504 at most)
    entropy       uint8     (L,)     round(255 · entropy_i / log L) (log L / 510 nats at most off)
    sink_share    uint8     (L,)     round(255 · sink_share_i) (1/510 at most off)
    top_keys      uint16    (L, k)   query i's k keys of largest weight, 65535 past the keys it sees
    top_weights   uint8     (L, k)   round(255 · their weights)

k is the statistics' top_k, or one fewer at a time while the compressed page would pass
PAGE_LIMITS["page"], down to the most whose page fits uncompressed (:func:`page_top_k`).
Per head too, as JSON numbers: the distance profile (each bin's share of the head's
weight, 4 digits) and the role (:mod:`._head_roles`) with its shares and sink keys.
"""

from __future__ import annotations

import base64
import math
import zlib
from typing import Any

import numpy as np

from .._validation import Array, fail
from ..engine import AttentionStatistics
from ..trace import ModelStatistics
from ..trace._display import display_text
from ._head_roles import ROLES, head_roles
from ._page_data import _sequence, check_lang
from ._page_size import PAGE_LIMITS

__all__ = ["NO_KEY", "page_cap", "page_top_k", "past_the_page", "statistics_bytes", "statistics_data"]

NO_KEY = 0xFFFF  # a top key past the keys a query sees (the statistics' −1)
_BYTES_A_POSITION = 2 + 1 + 1  # received (float16), entropy and sink share (uint8)
_BYTES_A_TOP_KEY = 2 + 1  # its index (uint16) and weight (uint8)
_LEVEL = 1  # zlib's fastest: within 4 % of its default's size on SmolLM2's statistics, in half the time
_FLOAT16_MAX = 65504.0  # a key that receives more (past 65,504 queries) reads as this


def page_cap() -> int:
    """The most tokens of the page of weights: √PAGE_LIMITS["head_cells"] (a head's L·S cells)."""
    return math.isqrt(PAGE_LIMITS["head_cells"])


def past_the_page(length: int, cap: int) -> str:
    """The line that says why a page shows statistics: ``length`` tokens, past the page of
    weights' ``cap`` tokens."""
    return (
        f"{length:,} tokens: past the {cap:,}-token page of weights, this page shows statistics computed "
        "exactly from the tiles"
    )


def statistics_bytes(heads: int, length: int, top_k: int) -> int:
    """About the bytes of a statistics page's data for ``heads`` heads in all (layers × heads)
    over ``length`` tokens with ``top_k`` top keys a query, in base64, uncompressed (the most
    it takes; the distance profiles and tokens are a few hundred kB more at most)."""
    return heads * length * (_BYTES_A_POSITION + _BYTES_A_TOP_KEY * top_k) * 4 // 3


def page_top_k(heads: int, length: int, top_k: int) -> int:
    """The most top keys a query (at most ``top_k``) whose page fits PAGE_LIMITS["page"]
    uncompressed (so before the statistics are known).

    Raises:
        ArgumentError: not even the per-position statistics fit (no top keys).
    """
    for k in range(top_k, -1, -1):
        if statistics_bytes(heads, length, k) <= PAGE_LIMITS["page"]:
            return k
    size = statistics_bytes(heads, length, 0) / 1e6
    raise fail(
        "statistics", "a page that a browser opens in a few seconds",
        f"{heads} heads × {length} tokens: about {size:.0f} MB, at most {PAGE_LIMITS['page'] / 1e6:g} MB",
    )  # fmt: skip


def _packed_heads(arrays: list[tuple[Array, str]]) -> list[str]:
    """Each head's numbers of ``arrays`` ((layers, heads, …) each, as its dtype), one after
    another, zlib-compressed and in base64, head by head."""
    heads = [  # (layers, heads, …) -> (layers·heads, n) each
        np.ascontiguousarray(x, dtype=dtype).reshape(x.shape[0] * x.shape[1], -1) for x, dtype in arrays
    ]
    return [
        base64.b64encode(zlib.compress(b"".join(part[n].tobytes() for part in heads), _LEVEL)).decode()
        for n in range(len(heads[0]))
    ]


def _head_arrays(s: AttentionStatistics, k: int, log_length: float) -> list[str]:
    """The page's heads (the module's docstring) with ``k`` top keys a query."""
    top_keys = np.where(s.top_keys[..., :k] >= 0, s.top_keys[..., :k], NO_KEY)  # (layers, heads, L, k)
    return _packed_heads([
        (np.minimum(s.received, _FLOAT16_MAX), "<f2"), (_unit(s.entropy / log_length), "u1"),
        (_unit(s.sink_share), "u1"), (top_keys, "<u2"), (_unit(s.top_weights[..., :k]), "u1"),
    ])  # fmt: skip


def _unit(x: Array) -> Array:
    """x in [0, 1] as round(255·x), uint8 (NaN as 0)."""
    return np.rint(np.clip(np.nan_to_num(x), 0.0, 1.0) * 255).astype(np.uint8)


def _as_text(token: str) -> str:
    """A token as the text panel writes it: :func:`display_text`'s, its newlines and tabs kept (the text's lines)."""
    return "\n".join("\t".join(display_text(piece) for piece in line.split("\t")) for line in token.split("\n"))


def statistics_data(
    stats: ModelStatistics, lang: str = "en", opens: dict[str, int] | None = None, cap: int | None = None
) -> dict[str, Any]:
    """The statistics page's data (the module's docstring): the tokens and their marks (and
    as the text panel writes them: newlines and tabs kept), the counts (layers, heads, L,
    k), the packed heads, each head's distance profile and role, the model's name and
    notes, ``cap`` (where the page stands in for the page of weights, past its ``cap``
    tokens, which its top says in the page's language), the view it opens on
    (``opens``: layer, head, token; default layer 0, head 0, token 0) and the language
    ``lang``.

    Raises:
        ArgumentError: ``lang`` is neither "en" nor "zh"; a page past its size.
    """
    check_lang(lang)
    s = stats.statistics
    layers, heads, length = s.entropy.shape  # (layers, heads, L)
    if length >= NO_KEY:  # the page's top keys are uint16, NO_KEY their −1
        raise fail("statistics", f"at most {NO_KEY - 1:,} tokens on a page", f"{length:,} tokens")
    log_length = float(np.log(max(length, 2)))
    k = s.top_keys.shape[-1]
    packed = _head_arrays(s, k, log_length)
    while sum(map(len, packed)) > PAGE_LIMITS["page"] and k > page_top_k(layers * heads, length, k):
        k -= 1  # compressed, still too large: one top key fewer, down to what fits uncompressed
        packed = _head_arrays(s, k, log_length)
    roles = head_roles(s)
    with np.errstate(invalid="ignore", divide="ignore"):
        distance = s.distance / s.distance.sum(axis=-1, keepdims=True)  # (layers, heads, bins): shares
    tokens = [display_text(t) for t in stats.tokens]
    return {
        "kind": "statistics",
        "model": display_text(stats.model),
        "architecture": display_text(stats.architecture),
        "kv_heads": stats.num_key_value_heads,
        "lang": lang,
        "cap": cap,
        "notes": [display_text(n) for n in stats.notes],
        "text": [_as_text(t) for t in stats.tokens],
        "sequence": _sequence("tokens", tokens, list(stats.special), list(stats.parts), stats.template),
        "layers": layers,
        "heads": heads,
        "length": length,
        "keys": s.received.shape[-1],
        "top_k": k,
        "sink_keys": s.sink_keys,
        "local_keys": s.local_keys,
        "log_length": log_length,
        "head_data": packed,
        "distance_bins": s.distance_bins.tolist(),
        "distance": np.round(np.nan_to_num(distance), 4).reshape(layers * heads, -1).tolist(),  # (layers·heads, bins)
        "roles": {
            "names": list(ROLES),
            "role": roles.role.reshape(-1).tolist(),  # (layers, heads) -> (layers·heads,), as the rest
            "sinks": roles.sinks.reshape(layers * heads, -1).tolist(),  # (layers·heads, s)
            "sink": np.round(roles.sink, 4).reshape(-1).tolist(),
            "local": np.round(roles.local, 4).reshape(-1).tolist(),
            "far": np.round(roles.far, 4).reshape(-1).tolist(),
        },
        "opens": {"layer": 0, "head": 0, "token": 0, **(opens or {})},
    }
