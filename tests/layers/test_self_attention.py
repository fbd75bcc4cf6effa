"""attnlab.SelfAttention (NumPy) against attnlab.reference."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

import attnlab as al
from attnlab import reference


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 9), st.integers(1, 8), st.integers(1, 8), st.integers(0, 10_000))
def test_numpy_layer_agrees_with_the_reference_to_1e_12(L, d_model, d_k, seed):
    X = np.random.default_rng(seed).normal(0, 3, size=(L, d_model))
    ref = reference.SelfAttention(d_model, d_k, seed=seed).trace(X.tolist())
    trace = al.SelfAttention(d_model, d_k, seed=seed).trace(X)
    for name in ("Q", "K", "V", "scores", "scaled_scores", "weights", "output"):
        np.testing.assert_allclose(getattr(trace, name), getattr(ref, name), atol=1e-12, rtol=0, err_msg=name)
    assert trace.scale == pytest.approx(1 / ref.scale_factor, rel=1e-15)


def test_batched_float32_and_weights():
    layer = al.SelfAttention(8, 6)
    X = np.random.default_rng(0).normal(size=(3, 5, 8))
    output, weights = layer.forward(X)
    assert output.shape == (3, 5, 6) and weights.shape == (3, 5, 5) and output.dtype == np.float64
    for b in range(3):
        ref_output, ref_weights = reference.SelfAttention(8, 6).forward(X[b].tolist())
        np.testing.assert_allclose(output[b], ref_output, atol=1e-12, rtol=0)
        np.testing.assert_allclose(weights[b], ref_weights, atol=1e-12, rtol=0)
    out32, _ = al.SelfAttention(8, 6, dtype=np.float32).forward(X.astype(np.float32))
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, output, atol=1e-6)


def test_causal_trace_masks_the_future():
    trace = al.SelfAttention(4, 3).trace(np.eye(4), is_causal=True)
    assert np.all(np.isneginf(trace.scaled_scores[np.triu_indices(4, 1)]))
    assert np.all(trace.weights[np.triu_indices(4, 1)] == 0)
    assert trace.weights[0, 0] == 1.0
    np.testing.assert_allclose(trace.weights.sum(axis=1), 1.0, atol=1e-15)
    np.testing.assert_allclose(trace.output, trace.weights @ trace.V, atol=1e-15)


def test_explicit_weights_and_errors():
    w = np.arange(6.0).reshape(3, 2)
    layer = al.SelfAttention(3, 2, weights=(w, w, w))
    assert np.array_equal(layer.Wq, w)
    with pytest.raises(ValueError, match=r"weights\[1\]: expected shape \(3, 2\), got shape \(2, 2\)"):
        al.SelfAttention(3, 2, weights=(w, w[:2], w))
    with pytest.raises(ValueError, match=r"X: expected shape \(L, 3\)"):
        layer.forward(np.ones((4, 5)))
    with pytest.raises(ValueError, match="d_k: expected an integer >= 1, got 0"):
        al.SelfAttention(3, 0)
