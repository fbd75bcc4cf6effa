"""The attention problems ``attnlab bench`` times, and the callables that run each of
them: attnlab's engines, the textbook's three NumPy lines and torch's fused SDPA."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .._validation import Array
from ..engine._attention import ENGINES, Engine, attention
from ..engine.variants import Band

__all__ = ["Shape", "available_engines", "textbook_attention", "timed_runs"]


@dataclass(frozen=True)
class Shape:
    """One attention problem: a query (B…, L, E), its H heads the last of B…, against a
    key and a value (B…, S, E) of Hk heads; float32 unless ``dtype``; with ``key_lengths``,
    sequence b of B… = (B, H) has only its first key_lengths[b] keys."""

    batch: tuple[int, ...]  # B…, the query heads last
    L: int
    S: int
    E: int
    causal: bool = False
    backward: bool = False  # each forward followed by its backward
    kv_heads: int | None = None  # Hk, fewer than H (GQA); None: H
    dtype: Literal["float32", "float64"] = "float32"
    name: str = ""
    key_lengths: tuple[int, ...] | None = None  # keys of each of the B sequences (a padded cache); None: S each

    @property
    def decoding(self) -> bool:
        """A few queries against a long cache: bound by reading K and V, reported in GB/s."""
        return self.L <= 16 < self.S

    @property
    def flops(self) -> float:
        """The products' floating-point operations: 4·B·H·L·S·E forward over the allowed
        scores (about half of them causal with L = S), 3.5 times that forward and backward
        (the backward's five products to the forward's two)."""
        allowed = self.L * self.S - (self.L * (self.L - 1) // 2 if self.causal and self.L == self.S else 0)
        forward = 4.0 * self.slices * allowed * self.E
        return forward * (3.5 if self.backward else 1.0)

    @property
    def cache_bytes(self) -> float:
        """The bytes of keys and values a forward must read: 2·B·Hk·S·E elements (each
        sequence's own length with ``key_lengths``)."""
        heads = self.kv_heads or self.batch[-1]
        keys = sum(self.key_lengths) * heads if self.key_lengths else math.prod(self.batch[:-1]) * heads * self.S
        return 2.0 * keys * self.E * np.dtype(self.dtype).itemsize

    @property
    def slices(self) -> int:
        """The number of (batch, head) slices: the product of B…."""
        return math.prod(self.batch)

    @property
    def gqa(self) -> bool:
        """Fewer key/value heads than query heads."""
        return self.kv_heads is not None and self.kv_heads != self.batch[-1]

    @property
    def query_shape(self) -> tuple[int, ...]:
        """(B…, L, E)."""
        return (*self.batch, self.L, self.E)

    @property
    def key_shape(self) -> tuple[int, ...]:
        """(B…, S, E) with Hk heads in place of H."""
        return (*self.batch[:-1], self.kv_heads or self.batch[-1], self.S, self.E)


def available_engines() -> list[Engine]:
    """The engines this installation has (the fused one needs numba and SciPy)."""
    return [name for name, engine in ENGINES.items() if engine.available()]


def textbook_attention(q: Array, k: Array, v: Array, is_causal: bool) -> Array:
    """The three lines every tutorial writes (plus the causal mask): softmax(q·kᵀ/√E)·v,
    q (B…, L, E), k and v (B…, S, E), the (B…, L, S) scores whole in memory."""
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])  # (B…, L, S)
    if is_causal:
        L, S = scores.shape[-2:]
        scores = np.where(Band.of(True, None, 0, (L, S)).allowed(slice(0, L), slice(0, S)), scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)) @ v


def timed_runs(
    shape: Shape, engines: Iterable[Engine | None], *, textbook: bool = False, with_torch: bool = True
) -> dict[str, Callable[[], object]]:
    """One callable per attnlab engine (None: engine=None's choice, named "attnlab"), then
    the textbook's (when ``textbook`` and ``shape`` is forward only: it has no backward),
    then torch's fused ``scaled_dot_product_attention`` (when ``with_torch`` and torch is
    installed). Each runs ``shape``'s forward, then its backward when ``shape.backward``,
    on the same seeded standard-normal query, key, value and output gradient."""
    rng = np.random.default_rng(0)
    query = rng.standard_normal(shape.query_shape, dtype=shape.dtype)
    key, value = (rng.standard_normal(shape.key_shape, dtype=shape.dtype) for _ in range(2))
    grad = rng.standard_normal(shape.query_shape, dtype=shape.dtype)

    lengths = None if shape.key_lengths is None else np.array(shape.key_lengths)

    def ours(engine: Engine | None) -> Callable[[], object]:
        def run() -> None:
            result = attention(
                query, key, value, is_causal=shape.causal, enable_gqa=shape.gqa, engine=engine, key_lengths=lengths
            )
            if shape.backward:
                result.backward(grad)

        return run

    runs: dict[str, Callable[[], object]] = {engine or "attnlab": ours(engine) for engine in engines}
    if textbook and not shape.backward:
        runs["textbook"] = lambda: textbook_attention(query, key, value, shape.causal)
    if not with_torch:
        return runs
    try:
        import torch
    except ImportError:
        return runs
    tq, tk, tv = (torch.tensor(x, requires_grad=shape.backward) for x in (query, key, value))
    t_grad = torch.tensor(grad)
    # ragged lengths: a key-padding mask (B, 1, 1, S), True = may attend, as transformers passes it
    padding = None if lengths is None else torch.tensor(np.arange(shape.S) < lengths[:, None])[:, None, None, :]

    def theirs() -> None:
        out = torch.nn.functional.scaled_dot_product_attention(
            tq, tk, tv, attn_mask=padding, is_causal=shape.causal, enable_gqa=shape.gqa
        )
        if shape.backward:
            out.backward(t_grad)

    runs["torch"] = theirs
    return runs
