"""Non-finite values follow one rule in both engines (docs/design.md): IEEE arithmetic
over every key, as torch's math backend computes it, except that a row whose keys are
all masked is 0. No output is ever left unwritten."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import attnlab as al
from attnlab.engine.fused import _engine as _fused
from helpers import use_small_blocks
from oracles import optional_module, requires, torch_math

torch = optional_module("torch")

PLACES = ["query", "key", "value", "mask"]
VALUES = [np.nan, np.inf, -np.inf]
L, S, E = 5, 7, 4
ENGINES = ["naive", "tiled", *(["fused"] if _fused.available() else [])]


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    use_small_blocks(monkeypatch, 2, 1, 3)


@pytest.mark.parametrize("place, bad, is_causal", list(itertools.product(PLACES, VALUES, [False, True])))
@requires("torch")
def test_nan_and_inf_anywhere_match_torchs_math_and_each_engine(place, bad, is_causal):
    rng = np.random.default_rng(0)
    arrays = {
        "query": rng.standard_normal((2, L, E)),
        "key": rng.standard_normal((2, S, E)),
        "value": rng.standard_normal((2, S, E)),
        "mask": rng.standard_normal((L, S)),
    }
    arrays[place][(1, 2, 3)[: arrays[place].ndim]] = bad  # one element of the second batch (or the mask)
    q, k, v, mask = arrays.values()
    expected = torch_math(q, k, v, mask, is_causal)
    results = {}
    for engine in ENGINES:
        result = al.attention(q, k, v, attn_mask=mask, is_causal=is_causal, engine=engine)
        np.testing.assert_allclose(result.output, expected, rtol=1e-12, atol=1e-12, equal_nan=True)
        results[engine] = result
    grad = rng.standard_normal((2, L, E))
    expected_grads = results["naive"].backward(grad)
    for engine in ENGINES[1:]:
        for naive, blocked in zip(expected_grads, results[engine].backward(grad), strict=True):
            np.testing.assert_array_equal(np.isnan(naive), np.isnan(blocked))
            np.testing.assert_allclose(blocked, naive, rtol=1e-10, atol=1e-10, equal_nan=True)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_nan_in_one_query_is_nan_in_that_row_only(engine):
    q, k, v = np.ones((1, 4, 3)), np.ones((1, 6, 3)), np.full((1, 6, 3), 777.0)
    q[0, 2, 1] = np.nan
    out = al.attention(q, k, v, engine=engine).output
    assert np.isnan(out[0, 2]).all()
    np.testing.assert_array_equal(np.delete(out[0], 2, axis=0), 777.0)


@pytest.mark.parametrize("engine", ENGINES)
@requires("torch")
def test_huge_values_do_not_overflow_in_float32(engine):
    rng = np.random.default_rng(1)
    q, k = (rng.standard_normal((2, 40, 8), dtype=np.float32) for _ in range(2))
    v = np.full((2, 40, 8), 3e38, np.float32)
    v[:, ::2] = -3e38
    out = al.attention(q, k, v, engine=engine).output
    expected = torch_math(q, k, v, None, False)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e33)


@pytest.mark.parametrize("engine", ENGINES)
@requires("torch")
def test_huge_queries_with_a_tiny_scale_stay_finite(engine):
    q = k = np.full((1, 3, 4), 1e20)
    v = np.arange(12.0).reshape(1, 3, 4)
    out = al.attention(q, k, v, scale=1e-30, engine=engine).output
    expected = torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(x) for x in (q, k, v)), scale=1e-30)
    np.testing.assert_allclose(out, expected.numpy(), rtol=1e-12)


@pytest.mark.parametrize("engine", ENGINES)
def test_zero_width_queries_average_the_values(engine):
    v = np.arange(12.0).reshape(1, 4, 3)
    with np.errstate(all="raise"):
        out = al.attention(np.ones((1, 2, 0)), np.ones((1, 4, 0)), v, engine=engine).output
    np.testing.assert_allclose(out, np.broadcast_to(v.mean(axis=1), (1, 2, 3)))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_fully_masked_row_is_zero_even_over_nan_values(engine):
    v = np.ones((1, 4, 3))
    v[0, 1] = np.nan
    mask = np.ones((3, 4), bool)
    mask[1] = False
    result = al.attention(np.ones((1, 3, 3)), np.ones((1, 4, 3)), v, attn_mask=mask, engine=engine)
    np.testing.assert_array_equal(result.output[0, 1], 0.0)
    assert np.isneginf(result.lse[0, 1])


@pytest.mark.parametrize("engine", ENGINES)
def test_a_float_minus_infinity_masks_even_a_nan_score(engine):
    k = np.ones((1, 3, 2))
    k[0, 1] = np.nan  # its scores are NaN, but the mask says −∞ there
    mask = np.array([[0.0, -np.inf, 0.0], [-np.inf, -np.inf, -np.inf]])
    result = al.attention(np.ones((1, 2, 2)), k, np.arange(6.0).reshape(1, 3, 2), attn_mask=mask, engine=engine)
    np.testing.assert_allclose(result.output[0, 0], [2.0, 3.0])  # the mean of value rows 0 and 2
    np.testing.assert_array_equal(result.output[0, 1], 0.0)  # every key masked
