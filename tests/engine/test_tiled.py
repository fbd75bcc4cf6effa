"""The tiled engine against the naive one (and torch), with blocks small enough that
every test crosses many block edges."""

from __future__ import annotations

import tracemalloc

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

import attnlab as al
from attnlab.engine import _threads, _tiled
from attnlab.engine.fused import _engine as _fused
from helpers import covered_product, make, mask_for, use_small_blocks
from oracles import assert_close, optional_module, requires

torch = optional_module("torch")


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    use_small_blocks(monkeypatch, 16, 8, 24)


@pytest.fixture(params=["one-pass", "two-pass"])
def backward_kind(request, monkeypatch):
    """Run a test with each of the tiled backward's two schedules."""
    monkeypatch.setattr(_tiled, "ONE_PASS_BACKWARD_FROM", 1 if request.param == "one-pass" else 10**9)


MASKS = ["none", "bool-2d", "bool-4d", "float-2d", "float-3d", "fully-masked"]
BLOCKED = ["tiled", *(["fused"] if _fused.available() else [])]
SCHEDULES = {"one-pass": 1, "two-pass": 10**9}  # ONE_PASS_BACKWARD_FROM: each backward schedule
# 1,152 cases in all: every run takes their pairwise cover (every two values of any two
# dimensions, the engine and the backward's schedule included, meet in some case),
# pytest -m exhaustive the rest
DIMENSIONS = [
    [np.float64, np.float32], MASKS, [False, True], [(37, 53), (53, 37), (1, 70)], [False, True], [0.0, 0.3],
    BLOCKED, list(SCHEDULES),
]  # fmt: skip
CASES = covered_product(
    DIMENSIONS,
    ids=[
        ["float64", "float32"], MASKS, ["full", "causal"], ["L<S", "L>S", "L=1"], ["mha", "gqa"],
        ["no-dropout", "dropout"], BLOCKED, list(SCHEDULES),
    ],
)  # fmt: skip


@pytest.mark.parametrize("dtype, mask_kind, is_causal, lengths, gqa, dropout_p, engine, schedule", CASES)
def test_tiled_equals_naive_forward_lse_and_gradients(
    dtype, mask_kind, is_causal, lengths, gqa, dropout_p, engine, schedule, monkeypatch
):
    monkeypatch.setattr(_tiled, "ONE_PASS_BACKWARD_FROM", SCHEDULES[schedule])
    rng = np.random.default_rng(MASKS.index(mask_kind) * 64 + lengths[0] + 2 * is_causal + gqa)
    L, S = lengths
    q = make(rng, (2, 4, L, 8), dtype)
    k = make(rng, (2, 2 if gqa else 4, S, 8), dtype)
    v = make(rng, (1, 2 if gqa else 4, S, 5), dtype)  # batch 1 broadcasts against 2
    kwargs = dict(
        attn_mask=mask_for(mask_kind, rng, L, S, dtype),
        is_causal=is_causal,
        enable_gqa=gqa,
        dropout_p=dropout_p,
        rng=11 if dropout_p else None,
    )
    out, lse = al.scaled_dot_product_attention(q, k, v, engine=engine, return_lse=True, **kwargs)
    expected_out, expected_lse = al.scaled_dot_product_attention(q, k, v, engine="naive", return_lse=True, **kwargs)
    assert out.dtype == lse.dtype == dtype
    assert_close(out, expected_out, dtype)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(expected_lse))
    assert_close(np.where(np.isneginf(lse), 0, lse), np.where(np.isneginf(expected_lse), 0, expected_lse), dtype)

    grad = make(rng, out.shape, dtype)
    tiled = al.scaled_dot_product_attention_backward(grad, q, k, v, engine=engine, output=out, lse=lse, **kwargs)
    recomputed = al.scaled_dot_product_attention_backward(grad, q, k, v, engine=engine, **kwargs)
    naive = al.scaled_dot_product_attention_backward(grad, q, k, v, engine="naive", **kwargs)
    for ours, again, expected in zip(tiled, recomputed, naive, strict=True):
        assert ours.shape == expected.shape and ours.dtype == dtype and np.all(np.isfinite(ours))
        assert np.array_equal(ours, again)
        assert_close(ours, expected, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("is_causal", [False, True])
@requires("torch")
def test_tiled_matches_torch(dtype, is_causal):
    rng = np.random.default_rng(1)
    q, k, v = make(rng, (2, 3, 45, 16), dtype), make(rng, (2, 3, 61, 16), dtype), make(rng, (2, 3, 61, 16), dtype)
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    t_out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=is_causal)
    out, lse = al.scaled_dot_product_attention(q, k, v, is_causal=is_causal, engine="tiled", return_lse=True)
    assert_close(out, t_out.detach().numpy(), dtype)
    grad = make(rng, out.shape, dtype)
    t_out.backward(torch.tensor(grad))
    grads = al.scaled_dot_product_attention_backward(
        grad, q, k, v, is_causal=is_causal, engine="tiled", output=out, lse=lse
    )
    for ours, theirs in zip(grads, (tq, tk, tv), strict=True):
        assert_close(ours, theirs.grad.numpy(), dtype)


@pytest.mark.parametrize("dropout_p", [0.0, 0.2])
def test_one_and_two_threads_give_identical_bits(dropout_p, backward_kind):
    rng = np.random.default_rng(2)
    q, k, v = make(rng, (3, 50, 8), np.float32), make(rng, (3, 70, 8), np.float32), make(rng, (3, 70, 8), np.float32)
    grad = make(rng, (3, 50, 8), np.float32)
    kwargs = dict(is_causal=True, engine="tiled", dropout_p=dropout_p, rng=5)
    results = []
    for threads in (1, 2):
        out, lse = al.scaled_dot_product_attention(q, k, v, return_lse=True, num_threads=threads, **kwargs)
        grads = al.scaled_dot_product_attention_backward(grad, q, k, v, num_threads=threads, **kwargs)
        results.append((out, lse, *grads))
    for one, two in zip(*results, strict=True):
        assert np.array_equal(one, two)


def test_the_thread_count_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("ATTNLAB_NUM_THREADS", "3")
    assert _threads.default_threads() == 3
    monkeypatch.setenv("ATTNLAB_NUM_THREADS", "many")
    with pytest.raises(ValueError, match="ATTNLAB_NUM_THREADS: expected an integer >= 1, got 'many'"):
        al.scaled_dot_product_attention(np.ones((4, 2)), np.ones((4, 2)), np.ones((4, 2)), engine="tiled")
    with pytest.raises(ValueError, match="num_threads: expected an integer >= 1, got 0"):
        al.scaled_dot_product_attention(np.ones((4, 2)), np.ones((4, 2)), np.ones((4, 2)), num_threads=0)


def test_weights_need_the_naive_engine():
    x = np.ones((4, 2))
    with pytest.raises(ValueError, match="need_weights: expected False with engine='tiled'"):
        al.scaled_dot_product_attention(x, x, x, engine="tiled", need_weights=True)


def test_engine_none_picks_by_size(monkeypatch):
    monkeypatch.setattr(_tiled, "BLOCK_Q", 256)  # the choice counts the scores per task
    monkeypatch.setattr(_tiled, "BLOCK_K", 1024)

    def chosen(batch, L, S, weights=False):
        return al.attention(
            np.ones((*batch, L, 4)), np.ones((*batch, S, 4)), np.ones((*batch, S, 4)), need_weights=weights
        ).engine

    assert chosen((), 64, 64) == "naive"
    assert chosen((8,), 1024, 1024) == ("fused" if _fused.available() else "tiled")
    assert chosen((8,), 1024, 1024, weights=True) == "naive"


def test_extra_memory_is_a_block_not_the_score_matrix(monkeypatch):
    monkeypatch.setattr(_tiled, "BLOCK_Q", 256)
    monkeypatch.setattr(_tiled, "BLOCK_K", 1024)
    L, d = 4096, 16
    rng = np.random.default_rng(3)
    q, k, v = (make(rng, (1, L, d), np.float32) for _ in range(3))
    scores_bytes = L * L * 4  # 64 MiB: what the naive engine holds
    tracemalloc.start()
    al.scaled_dot_product_attention(q, k, v, engine="tiled", num_threads=2)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < scores_bytes / 8


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 3),  # batch
    st.integers(1, 60),  # L
    st.integers(1, 60),  # S
    st.integers(1, 9),  # E
    st.booleans(),  # causal
    st.sampled_from(["none", "bool", "float"]),
    st.integers(0, 2**32 - 1),
)
def test_tiled_equals_naive_for_any_shape(batch, L, S, E, is_causal, mask_kind, seed):
    rng = np.random.default_rng(seed)
    q, k, v = make(rng, (batch, L, E), np.float64), make(rng, (batch, S, E), np.float64), make(rng, (S, 3), np.float64)
    mask = None if mask_kind == "none" else mask_for(f"{mask_kind}-2d", rng, L, S, np.float64)
    outs = [al.scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal, engine=e) for e in ("tiled", "naive")]
    np.testing.assert_allclose(*outs, atol=1e-12, rtol=0)
    grad = make(rng, outs[0].shape, np.float64)
    grads = [
        al.scaled_dot_product_attention_backward(grad, q, k, v, mask, is_causal=is_causal, engine=e)
        for e in ("tiled", "naive")
    ]
    for tiled, naive in zip(*grads, strict=True):
        np.testing.assert_allclose(tiled, naive, atol=1e-12, rtol=0)


class _NoExactPasses(np.ndarray):
    """An array whose min and max fail: the one-pass bound must settle it alone."""

    def min(self, *arguments, **keywords):  # type: ignore[no-untyped-def]
        raise AssertionError("the exact passes ran")

    max = min


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_value_exponent_by_hand(dtype):
    """k = ⌈log₂(max|V| / headroom)⌉ with headroom = (the dtype's largest)/S/4, and whether
    every value is finite, whether the one-pass bound settles it or not: ordinary values
    (k = 0 from the bound alone), finite values whose sum of squares overflows (k = 0 from the
    exact passes), values near the largest (k by hand), a NaN, and strided and Fortran-ordered
    views."""
    big = float(np.finfo(dtype).max)
    ordinary = np.random.default_rng(0).standard_normal((3, 40, 8)).astype(dtype)
    assert _tiled._value_exponent(ordinary.view(_NoExactPasses), 40) == (0, True)
    assert _tiled._value_exponent(np.asfortranarray(ordinary).view(_NoExactPasses), 40) == (0, True)
    squares_overflow = np.full((3, 40, 8), np.sqrt(big) * 2, dtype)  # each finite, Σ v² = ∞
    assert _tiled._value_exponent(squares_overflow, 40) == (0, True)
    near_largest = ordinary.copy()
    near_largest[1, 7, 3] = -big / 2  # headroom big/160: max/headroom = 80, k = ⌈log₂ 80⌉ = 7
    assert _tiled._value_exponent(near_largest, 40) == (7, True)
    assert _tiled._value_exponent(near_largest[:, 1::2], 40) == (7, True)  # strided (row 7 kept): the exact passes
    with_nan = ordinary.copy()
    with_nan[0, 0, 0] = np.nan
    assert _tiled._value_exponent(with_nan, 40) == (0, False)


def test_gradient_exponent_by_hand():
    """k = ⌈log₂(max|V|·max|dO|·Ev·4 / (the largest float64))⌉, at least 0 (Ev = 8, and
    log₂ of the largest float64 rounds to 1024): 0 for ordinary arrays from the bounds
    alone; where the bounds say more, the exact passes: 0 again, and 7 by hand; where the
    bounds overflow, 96 by hand."""
    rng = np.random.default_rng(1)
    value, grad = rng.standard_normal((2, 30, 8)), rng.standard_normal((2, 20, 8))
    assert _tiled._gradient_exponent(value.view(_NoExactPasses), grad.view(_NoExactPasses)) == 0
    value[:], grad[1, 2, 5] = 2.0**500, -(2.0**515)  # exact: 500 + 515 + 3 + 2 = 1020 bits, k = 0;
    assert _tiled._gradient_exponent(value, grad) == 0  # the bounds (2·√480·2⁵⁰⁰, 2·2⁵¹⁵): over 1024
    value[:] = rng.standard_normal(value.shape)
    value[0, 3, 1] = 2.0**511  # 511 + 515 + 3 + 2 = 1031 bits: k = 7, the squares still finite
    assert np.isfinite(np.dot(value.ravel(), value.ravel()))
    assert _tiled._gradient_exponent(value, grad) == 7
    value[:] = 2.0**600  # 600 + 515 + 5 = 1120 bits: k = 96; Σ V² overflows
    assert _tiled._gradient_exponent(value, grad) == 96
