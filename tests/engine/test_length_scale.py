"""Length-scaled scores (Scalable-Softmax, Nakanishi 2025): query i's dot products times
s_h·log n_i, n_i the keys of the band (causal rule, window) within its sequence's key
length. Every engine (the fused decode path too), forward against a float64 oracle written
out here, backward (dQ, dK, dV and ds) against central finite differences; a trace records,
says and restores it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import attnlab as al
from attnlab.engine.fused import _decode
from attnlab.engine.fused import _engine as _fused
from attnlab.engine.variants import Rules
from oracles import numerical_gradient

ENGINES = ["naive", "tiled"] + (["fused"] if _fused.available() else [])


def by_hand(q, k, v, s, *, causal=False, window=None, key_lengths=None, bottom_right=False):
    """(O, lse) in float64 for (B, H, L, E) inputs, one row at a time: n_i counted from the
    rules as stated (the band on the diagonal, within the sequence's keys)."""
    B, H, L, E = q.shape
    S = k.shape[-2]
    out, lse = np.zeros((B, H, L, v.shape[-1])), np.full((B, H, L), -np.inf)
    for b in range(B):
        length = S if key_lengths is None else int(key_lengths[b])
        offset = length - L if bottom_right else 0  # the diagonal: the last query sees the last key
        for i in range(L):
            d = np.arange(length) - (i + offset)  # j − (i + offset)
            seen = np.ones(length, bool)
            if causal:
                seen &= d <= 0
            if window is not None:
                seen &= d >= -window[0] if window[0] is not None else True
                seen &= d <= window[1] if window[1] is not None else True
            n = int(seen.sum())
            for h in range(H):
                m = s[h] * np.log(max(n, 1))
                z = m * (k[b, h, :length] @ q[b, h, i]) / np.sqrt(E)
                z = np.where(seen, z, -np.inf)
                if n:
                    top = z.max()
                    p = np.exp(z - top)
                    out[b, h, i] = (p / p.sum()) @ v[b, h, :length]
                    lse[b, h, i] = top + np.log(p.sum())
    return out, lse


def inputs(L, S, seed=0, H=2):
    rng = np.random.default_rng(seed)
    q, k, v, d_out = (rng.standard_normal(shape) for shape in ((2, H, L, 8), (2, H, S, 8), (2, H, S, 8), (2, H, L, 8)))
    return q, k, v, d_out, rng.uniform(0.5, 1.5, H)


CASES = {
    "plain": dict(L=6, S=9),
    "causal": dict(L=7, S=7, causal=True),
    "window bottom-right": dict(L=5, S=12, causal=True, window=(3, None), bottom_right=True),
    "key lengths": dict(L=4, S=10, causal=True, bottom_right=True, key_lengths=np.array([10, 6])),
    "past a block": dict(L=600, S=600, causal=True, window=(100, 0)),
}


def rules_of(case, s):
    alignment = "bottom_right" if case.get("bottom_right") else "top_left"
    return Rules.of(is_causal=case.get("causal", False), window=case.get("window"), causal_alignment=alignment,
                    length_scale=s)  # fmt: skip


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", CASES)
def test_length_scaled_scores_are_the_float64_oracles(engine, name):
    case = CASES[name]
    q, k, v, _, s = inputs(case["L"], case["S"])
    result = al.attention(q, k, v, engine=engine, key_lengths=case.get("key_lengths"), rules=rules_of(case, s))
    options = {n: case.get(n) for n in ("window", "key_lengths")}
    output, lse = by_hand(q, k, v, s, causal=case.get("causal", False), bottom_right=case.get("bottom_right", False),
                          **options)  # fmt: skip
    np.testing.assert_allclose(result.output, output, rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.lse, lse, rtol=0, atol=1e-12)


@pytest.mark.skipif(not _fused.available(), reason="the fused engine needs numba")
def test_the_fused_decode_path_takes_length_scaled_scores():
    q, k, v, _, s = inputs(2, 300, seed=1)
    lengths = np.array([300, 123])
    rules = Rules.of(is_causal=True, causal_alignment="bottom_right", length_scale=s)
    result = al.attention(q, k, v, engine="fused", key_lengths=lengths, rules=rules)
    assert _decode.decodes(result.problem)
    output, lse = by_hand(q, k, v, s, causal=True, key_lengths=lengths, bottom_right=True)
    np.testing.assert_allclose(result.output, output, rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.lse, lse, rtol=0, atol=1e-12)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", ["causal", "window bottom-right", "key lengths"])
def test_length_scaled_gradients_are_the_finite_differences(engine, name):
    case = {**CASES[name]}
    q, k, v, d_out, s = inputs(case["L"], case["S"], seed=2)
    lengths = case.get("key_lengths")

    def loss():
        result = al.attention(q, k, v, key_lengths=lengths, rules=rules_of(case, s), engine="naive")
        return float((result.output * d_out).sum())

    grads = al.attention(q, k, v, engine=engine, key_lengths=lengths, rules=rules_of(case, s)).backward(d_out)
    for got, x in ((grads.query, q), (grads.key, k), (grads.value, v), (grads.length_scale, s)):
        np.testing.assert_allclose(got, numerical_gradient(loss, x), rtol=0, atol=1e-8)


def test_length_scale_is_checked_traced_said_and_restored():
    q = np.ones((2, 3, 4))
    with pytest.raises(al.ArgumentError, match=r"length_scale: expected shape \(H,\) with H=2"):
        al.attention(q, q, q, rules=Rules.of(length_scale=[1.0, 2.0, 3.0]))
    layer = al.MultiheadAttention(8, 2, seed=0, dtype=np.float64)
    x = np.random.default_rng(4).standard_normal((5, 8))
    trace = layer.trace(x, rules=Rules.of(is_causal=True, length_scale=[0.5, 2.0]))
    assert trace.variants.length_scale == (0.5, 2.0)
    assert "Scalable-Softmax" in trace.variants.describe("en") and "按长度缩放" in trace.variants.describe("zh")
    again = al.Trace.from_dict(json.loads(trace.to_json()))
    assert again.variants == trace.variants and again.head(1).variants.length_scale == (2.0,)
    # the trace's scaled scores: query i's scale·q·k times s_h·log(i + 1) (causal: i + 1 keys)
    raw = trace.Q @ np.swapaxes(trace.K, -1, -2) / 2.0  # (H, L, L), scale 1/√4
    m = np.array([0.5, 2.0])[:, None, None] * np.log(np.arange(1, 6))[None, :, None]
    expected = np.where(np.triu(np.ones((5, 5), bool), 1), -np.inf, raw * m)
    np.testing.assert_allclose(trace.scaled_scores, expected, rtol=0, atol=1e-12)
    with pytest.raises(al.ArgumentError, match="variants: length_scale"):
        al.Trace.from_dict({**trace.to_dict(), "variants": {"length_scale": [1.0, 2.0, 3.0]}})


def test_multihead_attention_passes_length_scales_gradient_and_refuses_it_with_appended_keys():
    layer = al.MultiheadAttention(8, 2, seed=1, dtype=np.float64, batch_first=True)
    x = np.random.default_rng(5).standard_normal((1, 6, 8))
    layer(x, x, x, rules=Rules.of(is_causal=True, length_scale=[1.0, 0.5]))
    assert layer.backward(np.ones((1, 6, 8))).length_scale.shape == (2,)
    appended = al.MultiheadAttention(8, 2, add_zero_attn=True, dtype=np.float64, batch_first=True)
    with pytest.raises(al.ArgumentError, match="length_scale: expected None with add_bias_kv or add_zero_attn"):
        appended(x, x, x, rules=Rules.of(length_scale=[1.0, 0.5]))
