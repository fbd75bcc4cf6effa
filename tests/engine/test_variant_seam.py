"""A variant added from outside the package through the seam that docs/design.md's
"Adding a variant" describes: a ``Variant`` subclass, ``register``, and its value in
``Rules(extra=...)``. The toy variant adds −λ·(j − (i + offset))² to the scores; it runs
through the naive and tiled engines (forward and backward), a trace (its words, its bias,
JSON) and a page, each held to NumPy written out by hand in this file.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import attnlab as al
from attnlab.engine.variants import REGISTRY, Context, Rules, Variant, and_masks, or_masks, register
from attnlab.trace._build import build_trace


class QuadraticDistance(Variant):
    """Z −= λ·d², d = j − (i + offset): a penalty that grows with the distance."""

    name = "toy_quadratic"

    def check(self, value: Any, context: Context) -> float | None:
        if value is None:
            return None
        if not isinstance(value, float) or value < 0:
            raise al.ArgumentError(f"toy_quadratic: expected a float ≥ 0, got {value!r}")
        return value

    def bias(self, checked: Any, slices: Any, rows: slice, cols: slice, context: Context) -> Any:
        d = np.arange(cols.start, cols.stop)[None, :] - np.arange(rows.start, rows.stop)[:, None] - context.offset
        return (-checked * d * d).astype(context.dtype)

    def describe(self, recorded: Any, lang: str) -> str | None:
        return None if recorded is None else f"toy: −{recorded:g}·d² added to the scores"


TOY = REGISTRY.get("toy_quadratic") or register(QuadraticDistance())
LAMBDA = 0.01


def by_hand(q: np.ndarray, k: np.ndarray, v: np.ndarray, d_out: np.ndarray, causal: bool) -> dict[str, np.ndarray]:
    """The forward and backward written out: Z = Q·Kᵀ/√E − λ·(j − i)², causal mask, softmax."""
    L, E = q.shape[-2:]
    S = k.shape[-2]
    j_minus_i = np.arange(S)[None, :] - np.arange(L)[:, None]
    bias = -LAMBDA * j_minus_i.astype(np.float64) ** 2
    z = q @ np.swapaxes(k, -1, -2) / np.sqrt(E) + bias
    if causal:
        z = np.where(j_minus_i > 0, -np.inf, z)
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    o = p @ v
    d_p = d_out @ np.swapaxes(v, -1, -2)
    d_z = p * (d_p - (d_out * o).sum(axis=-1, keepdims=True))
    return {
        "output": o,
        "weights": p,
        "bias": bias,
        "dq": d_z @ k / np.sqrt(E),
        "dk": np.swapaxes(d_z, -1, -2) @ q / np.sqrt(E),
        "dv": np.swapaxes(p, -1, -2) @ d_out,
    }


@pytest.mark.parametrize("engine", ["naive", "tiled"])
@pytest.mark.parametrize("length", [7, 600])  # one block, and past the tiled engine's 512
def test_a_registered_variant_runs_in_the_naive_and_tiled_engines(engine: str, length: int) -> None:
    rng = np.random.default_rng(5)
    q, k, v, d_out = (rng.standard_normal((2, length, 8)) for _ in range(4))
    rules = Rules(is_causal=True, extra={"toy_quadratic": LAMBDA})
    result = al.attention(q, k, v, rules=rules, engine=engine)
    grads = result.backward(d_out)
    expected = by_hand(q, k, v, d_out, causal=True)
    np.testing.assert_allclose(result.output, expected["output"], rtol=0, atol=1e-12)
    for got, name in zip(grads, ("dq", "dk", "dv"), strict=True):
        np.testing.assert_allclose(got, expected[name], rtol=0, atol=1e-11)
    assert result.problem.rules.variants == ((REGISTRY["is_causal"], True), (TOY, LAMBDA))
    assert not result.problem.compiles_whole  # the fused engine's compiled tasks know only the built-ins


def test_a_registered_variant_is_checked_and_refused_beside_its_keywords() -> None:
    q = np.ones((3, 4))
    with pytest.raises(al.ArgumentError, match="toy_quadratic"):
        al.attention(q, q, q, rules=Rules(extra={"toy_quadratic": -1.0}))
    with pytest.raises(al.ArgumentError, match="rules"):
        al.attention(q, q, q, rules=Rules(extra={"no_such_variant": 1.0}))
    with pytest.raises(al.ArgumentError, match="rules"):
        al.attention(q, q, q, is_causal=True, rules=Rules(extra={"toy_quadratic": LAMBDA}))


def test_a_registered_variant_is_traced_said_and_drawn_on_the_page() -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((6, 4))
    Q, K, V = (rng.standard_normal((2, 6, 4)) for _ in range(3))
    rules = Rules(is_causal=True, extra={"toy_quadratic": LAMBDA})
    trace = build_trace(x, Q, K, V, scale=None, rules=rules, tokens=list("abcdef"))
    expected = by_hand(Q, K, V, np.zeros((2, 6, 4)), causal=True)
    np.testing.assert_allclose(trace.weights, expected["weights"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(trace.output, expected["output"], rtol=0, atol=1e-12)
    assert trace.bias is not None
    np.testing.assert_allclose(trace.bias, np.broadcast_to(expected["bias"], (2, 6, 6)), rtol=0, atol=0)
    words = "causal: query i sees keys j ≤ i; toy: −0.01·d² added to the scores"
    assert trace.variants is not None and trace.variants.describe("en") == words
    assert trace.variants.toy_quadratic == LAMBDA
    again = al.Trace.from_dict(trace.to_dict())
    assert again.variants == trace.variants
    page = al.view(trace)
    assert page is not None and "toy: −0.01·d² added to the scores" in page


def test_and_masks_and_or_masks_compose_as_flex_attention() -> None:
    def causal(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return q_idx >= kv_idx

    def near(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return q_idx - kv_idx <= 2

    q_idx, kv_idx = np.arange(5)[:, None], np.arange(5)[None, :]
    both = and_masks(causal, near)
    either = or_masks(causal, near)
    assert both is not None and either is not None
    np.testing.assert_array_equal(both(0, 0, q_idx, kv_idx), (q_idx >= kv_idx) & (q_idx - kv_idx <= 2))
    np.testing.assert_array_equal(either(0, 0, q_idx, kv_idx), (q_idx >= kv_idx) | (q_idx - kv_idx <= 2))
    assert and_masks(None, causal) is causal and and_masks() is None
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((1, 9, 4)) for _ in range(3))
    got = al.attention(q, k, v, mask_mod=both).output
    allowed = (np.arange(9)[:, None] >= np.arange(9)[None, :]) & (np.arange(9)[:, None] - np.arange(9)[None, :] <= 2)
    np.testing.assert_array_equal(got, al.attention(q, k, v, attn_mask=allowed).output)
