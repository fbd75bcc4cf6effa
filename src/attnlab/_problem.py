"""One attention call's arguments, validated once and shared by every engine.

Shape letters used throughout the package:
    B…  any number of leading batch dimensions (heads are the last of them)
    H   query heads; Hk key/value heads (H = G·Hk with GQA, G query heads per group)
    L   query length;  S   key/value length
    E   query/key width; Ev value width
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._dropout import dropout_seed
from ._validation import (
    broadcasts_to,
    compute_dtype,
    fail,
    float_array,
    probability,
    same_dtype,
)


@dataclass(frozen=True)
class Problem:
    """Validated inputs of scaled dot-product attention, in the compute dtype."""

    query: np.ndarray  # (B…, L, E)
    key: np.ndarray  # (B…, S, E), heads Hk
    value: np.ndarray  # (B…, S, Ev), heads Hk
    mask: np.ndarray | None  # bool (True = may attend) or float (added), broadcasts to (B…, L, S)
    is_causal: bool  # keys j > i are masked for query i (top-left aligned)
    scale: float  # multiplies Q·Kᵀ
    groups: int  # G: query heads per key/value head (1 without GQA)
    dropout_p: float
    dropout_seed: int | None  # Philox key of the dropout mask, None without dropout
    dtype: np.dtype  # dtype of the inputs and of every result
    batch_shape: tuple[int, ...]  # B…: the broadcast batch shape of the result, query heads last

    @property
    def shape(self) -> tuple[int, int, int]:
        """(L, S, Ev)."""
        return self.query.shape[-2], self.key.shape[-2], self.value.shape[-1]


def make_problem(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any,
    dropout_p: Any,
    is_causal: bool,
    scale: Any,
    enable_gqa: bool,
    rng: Any,
) -> Problem:
    """Check every argument of ``scaled_dot_product_attention`` and normalise it."""
    query = float_array("query", query)
    key = float_array("key", key)
    value = float_array("value", value)
    dtype = same_dtype(query=query, key=key, value=value)
    work = compute_dtype(dtype)
    L, E = query.shape[-2:]
    S = key.shape[-2]
    if key.shape[-1] != E:
        raise fail("key", f"last dimension E={E} as in query {query.shape}", f"shape {key.shape}")
    if value.shape[-2] != S:
        raise fail("value", f"S={S} rows as in key {key.shape}", f"shape {value.shape}")
    groups = 1
    if enable_gqa:
        if min(query.ndim, key.ndim, value.ndim) < 3:
            raise fail(
                "query, key, value",
                "a head dimension (..., H, L, E) with enable_gqa=True",
                f"shapes {query.shape}, {key.shape}, {value.shape}",
            )
        heads, kv_heads = query.shape[-3], key.shape[-3]
        if value.shape[-3] != kv_heads:
            raise fail("value", f"{kv_heads} heads as in key {key.shape}", f"shape {value.shape}")
        if heads % kv_heads:
            raise fail("key", f"a number of heads that divides the query's {heads}", f"{kv_heads} heads")
        groups = heads // kv_heads
    # heads are matched by GQA above, so only the dimensions before them must broadcast
    lead = 3 if groups > 1 else 2
    try:
        batch = tuple(np.broadcast_shapes(*(a.shape[:-lead] for a in (query, key, value))))
    except ValueError:
        raise fail(
            "query, key, value",
            "batch dimensions that broadcast together",
            f"shapes {query.shape}, {key.shape}, {value.shape}",
        ) from None
    if groups > 1:
        batch = (*batch, query.shape[-3])
    mask = None
    if attn_mask is not None:
        mask = np.asarray(attn_mask)
        if mask.dtype != bool and mask.dtype not in (np.float16, np.float32, np.float64):
            raise fail(
                "attn_mask",
                "a bool array (True = may attend) or a float array (added)",
                f"dtype {mask.dtype}",
                TypeError,
            )
        full = (*batch, L, S)
        if not broadcasts_to(mask.shape, full):
            raise fail("attn_mask", f"a shape that broadcasts to the attention shape {full}", f"shape {mask.shape}")
        if mask.dtype != bool:
            mask = mask.astype(work, copy=False)
    if scale is None:
        scale = 1.0 / np.sqrt(E)
    elif (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float, np.floating, np.integer))
        or not np.isfinite(scale)
    ):
        raise fail("scale", "a finite number or None", repr(scale))
    p = probability("dropout_p", dropout_p)
    return Problem(
        query=query.astype(work, copy=False),
        key=key.astype(work, copy=False),
        value=value.astype(work, copy=False),
        mask=mask,
        is_causal=bool(is_causal),
        scale=float(scale),
        groups=groups,
        dropout_p=p,
        dropout_seed=dropout_seed(rng) if p > 0 else None,
        dtype=dtype,
        batch_shape=batch,
    )
