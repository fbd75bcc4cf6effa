"""One attention call's arguments, validated once and shared by every engine.

Shape letters, used with one meaning each throughout the package:

    B…  any number of leading batch dimensions (the query heads are the last of them)
    H   query heads;  Hk  key/value heads;  G = H / Hk  query heads per key/value head
    L   query length;  S  key/value length
    E   query/key width;  Ev  value width

And the matrices of one slice: Z = softcap(scale·Q·Kᵀ) + float mask + ALiBi, with −∞
where a mask rules a key out (L, S), the scores; P = softmax(Z) the weights (the sink
s_h, if any, joins every row's sum and is dropped); O = P·V (L, Ev) the output;
lse = log(Σ_j exp(Z_ij) + exp(s_h)) (L,). The variants are described in ``variants``; the
Problem holds them checked, as one :class:`variants.Checked` (``pb.rules["softcap"]``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np

from .._validation import (
    Array,
    array_of,
    broadcasts_to,
    compute_dtype,
    fail,
    flag,
    float_array,
    probability,
    real_number,
    same_dtype,
)
from . import variants
from ._dropout import check_rng, dropout_factor, dropout_seed
from .variants import NO_RULES, Checked, Rules

__all__ = ["Engine", "Problem", "Saved", "default_scale", "make_problem", "sum_to_shape"]

Engine = Literal["naive", "tiled", "fused"]  # the engines' names, the values of engine=


class Saved(NamedTuple):
    """What a backward starts from, in the compute dtype: the forward's O (B…, L, Ev) and
    lse (B…, L), δ = rowsum(dO∘O) − dlse (B…, L), and dlse, the gradient of the lse
    (B…, L), or None (0)."""

    output: Array
    lse: Array
    delta: Array
    grad_lse: Array | None = None


@dataclass(frozen=True)
class Problem:
    """Validated inputs of scaled dot-product attention, in the compute dtype."""

    query: Array  # (B…, L, E)
    key: Array  # (B…, S, E), Hk heads
    value: Array  # (B…, S, Ev), Hk heads
    mask: Array | None  # bool (True = may attend) or float (added), broadcasts to (B…, L, S)
    scale: float  # multiplies Q·Kᵀ
    # the variants checked: the offset, the band, each one's value by name (per-head ones broadcast to B…, read-only)
    rules: Checked
    groups: int  # G (1 without GQA)
    dropout_p: float
    dropout_seed: int | None  # Philox key of the dropout mask, None without dropout
    result_dtype: np.dtype  # the inputs' dtype, which every result is given back in
    batch_shape: tuple[int, ...]  # B…: the broadcast batch shape of the result, query heads last
    # keys per sequence, int64 of B… without the heads (read-only), or None: every sequence has S;
    # the keys from a sequence's length on do not exist for it (flash-attn's cache_seqlens)
    key_lengths: Array | None = None

    @property
    def compute_dtype(self) -> np.dtype:
        """The dtype the engines compute in: float32 for float16 inputs, else the inputs'."""
        return self.query.dtype

    @property
    def lengths(self) -> tuple[int, int]:
        """(L, S)."""
        return self.query.shape[-2], self.key.shape[-2]

    @property
    def slices(self) -> int:
        """The number of (batch, head) slices: the product of B…."""
        return math.prod(self.batch_shape)

    @property
    def compiles_whole(self) -> bool:
        """No attention mask, no dropout and only variants that the fused engine compiles
        (no mask function, none from outside the package): what it compiles whole (the
        band, softcap, ALiBi and sinks included)."""
        return self.mask is None and self.dropout_seed is None and self.rules.compiled

    @property
    def heads(self) -> int:
        """H, the last batch dimension (1 for inputs without one)."""
        return self.batch_shape[-1] if self.batch_shape else 1

    def visible_scores(self) -> int:
        """The scores of one slice inside the band of ``is_causal`` and the window: the
        (i, j) they allow, about what the blocked engines compute (they skip whole blocks)."""
        L, S = self.lengths
        rows = np.arange(L)
        first = np.clip(rows + self.rules.band.lowest, 0, S)
        stop = np.clip(rows + self.rules.band.highest + 1, 0, S)
        return int(np.maximum(stop - first, 0).sum())

    def per_slice(self, values: Array | None) -> Array | None:
        """A parameter broadcast to B…, flattened to one value per slice (n,)."""
        return None if values is None else values.reshape(-1)

    @property
    def output_shape(self) -> tuple[int, ...]:
        """(B…, L, Ev)."""
        return (*self.batch_shape, self.query.shape[-2], self.value.shape[-1])

    def dropout(self, n: int, rows: slice, cols: slice) -> Array | None:
        """keep / (1 − p) over block (rows, cols) of slice n, or None without dropout."""
        if self.dropout_seed is None:
            return None
        return dropout_factor(self.dropout_seed, self.dropout_p, n, rows, cols, self.compute_dtype)


def make_problem(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any,
    dropout_p: Any,
    scale: Any,
    enable_gqa: Any,
    rng: Any,
    rules: Rules | Checked = NO_RULES,
    *,
    key_lengths: Any = None,
) -> Problem:
    """Check every argument of an attention call and normalise it: ``rules`` are its
    variants (or their checked form, checked again from the rules given), each checked by
    its module in ``variants``."""
    query = float_array("query", query)
    key = float_array("key", key)
    value = float_array("value", value)
    dtype = same_dtype(query=query, key=key, value=value)
    work = compute_dtype(dtype)
    enable_gqa = flag("enable_gqa", enable_gqa)
    L, E = query.shape[-2:]
    S = key.shape[-2]
    if key.shape[-1] != E:
        raise fail("key", f"last dimension E={E} as in query {query.shape}", f"shape {key.shape}")
    if value.shape[-2] != S:
        raise fail("value", f"S={S} rows as in key {key.shape}", f"shape {value.shape}")
    groups = _groups(query, key, value) if enable_gqa else 1
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
    p = probability("dropout_p", dropout_p)
    rng = check_rng(rng)
    checked = variants.check(rules, batch, work, (L, S))
    lengths = _key_lengths(key_lengths, batch, S)
    if lengths is not None and p > 0:
        raise fail("dropout_p", "0 with key_lengths (decoding runs without dropout)", p)
    return Problem(
        query=query.astype(work, copy=False),
        key=key.astype(work, copy=False),
        value=value.astype(work, copy=False),
        mask=_mask(attn_mask, (*batch, L, S), work),
        scale=_scale(scale, E),
        rules=checked,
        groups=groups,
        dropout_p=p,
        dropout_seed=dropout_seed(rng) if p > 0 else None,
        result_dtype=dtype,
        batch_shape=batch,
        key_lengths=lengths,
    )


def _key_lengths(key_lengths: Any, batch: tuple[int, ...], S: int) -> Array | None:
    """Each sequence's number of keys, integers in [0, S] broadcast to B… without the
    heads (a read-only view), or None."""
    if key_lengths is None:
        return None
    lengths = array_of("key_lengths", key_lengths)
    if lengths.dtype.kind not in "iu":
        raise fail("key_lengths", "an array of integers (keys per sequence)", f"dtype {lengths.dtype}", TypeError)
    sequences = batch[:-1]
    if len(batch) < 2 or lengths.ndim == 0 or not broadcasts_to(lengths.shape, sequences):
        expected = f"shape {sequences} (one length per sequence, the batch without the heads)"
        raise fail("key_lengths", expected if len(batch) >= 2 else "inputs with a batch and a head dimension",
                   f"shape {lengths.shape} for the batch shape {batch}")  # fmt: skip
    if lengths.size and (lengths.min() < 0 or lengths.max() > S):
        raise fail("key_lengths", f"lengths in [0, S={S}]", f"{lengths.min()} … {lengths.max()}")
    return np.broadcast_to(lengths.astype(np.int64), sequences)


def _groups(query: Array, key: Array, value: Array) -> int:
    """G for grouped-query attention: query heads (dimension −3) per key/value head."""
    if min(query.ndim, key.ndim, value.ndim) < 3:
        raise fail(
            "query, key, value",
            "a head dimension (..., H, L, E) with enable_gqa=True",
            f"shapes {query.shape}, {key.shape}, {value.shape}",
        )
    heads, kv_heads = query.shape[-3], key.shape[-3]
    if value.shape[-3] != kv_heads:
        raise fail("value", f"{kv_heads} heads as in key {key.shape}", f"shape {value.shape}")
    if kv_heads == 0 or heads % kv_heads:
        raise fail("key", f"a number of heads that divides the query's {heads}", f"{kv_heads} heads")
    return heads // kv_heads


def default_scale(E: int) -> float:
    """torch's default multiplier of Q·Kᵀ, 1/√E (1 when E = 0: the scores are all 0): the one place it is computed."""
    return 1.0 / math.sqrt(E) if E else 1.0


def _scale(scale: Any, E: int) -> float:
    """The multiplier of Q·Kᵀ: ``scale`` if given, else :func:`default_scale`."""
    if scale is not None:
        return real_number("scale", scale)
    return default_scale(E)


def _mask(attn_mask: Any, full: tuple[int, ...], work: np.dtype) -> Array | None:
    """The attention mask, checked against the attention shape (B…, L, S); a float mask in ``work``."""
    if attn_mask is None:
        return None
    mask = array_of("attn_mask", attn_mask)
    if mask.dtype != bool and mask.dtype not in (np.float16, np.float32, np.float64):
        raise fail(
            "attn_mask", "a bool array (True = may attend) or a float array (added)", f"dtype {mask.dtype}", TypeError
        )
    if not broadcasts_to(mask.shape, full):
        raise fail("attn_mask", f"a shape that broadcasts to the attention shape {full}", f"shape {mask.shape}")
    return mask if mask.dtype == bool else mask.astype(work, copy=False)


def sum_to_shape(grad: Array, shape: tuple[int, ...]) -> Array:
    """Undo broadcasting: sum ``grad`` over the dimensions that ``shape`` broadcast along."""
    grad = grad.sum(axis=tuple(range(grad.ndim - len(shape))))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=stretched, keepdims=True) if stretched else grad
