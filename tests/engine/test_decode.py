"""The fused engine's decode path (a few queries against a long cache, ``fused._decode``)
against the naive engine, and per-sequence key lengths (``key_lengths``) against torch
run on each sequence alone.

The decode path's outputs equal the naive engine's to 2e-7 (float32) and 1e-15 (float64)
relative to the scale of the terms they sum (max |V|: O is a weighted mean of V's rows, and
can cancel far below it), its lse to the same relative to max |lse|, over the variants,
GQA and ragged lengths. Units of a few keys (DECODE_CHUNK patched) make every test merge
several partials per row."""

from __future__ import annotations

import numpy as np
import pytest
from tests.oracles import assert_close, requires

import attnlab as al
from attnlab.engine import _attention
from attnlab.engine._problem import make_problem
from attnlab.engine._threads import run
from attnlab.engine.fused import _decode
from attnlab.engine.fused import _engine as _fused

pytestmark = pytest.mark.skipif(not _fused.available(), reason="numba is not installed (attnlab[fast])")
RTOL = {np.dtype(np.float32): 2e-7, np.dtype(np.float64): 1e-15}
VARIANTS = {
    "plain": {},
    "causal bottom-right": dict(is_causal=True, causal_alignment="bottom_right"),
    "causal top-left": dict(is_causal=True),
    "window": dict(window=(9, 0), causal_alignment="bottom_right"),
    "softcap": dict(softcap=2.5),
    "sinks": dict(sinks=np.linspace(-1.0, 2.0, 4)),
    "alibi": dict(alibi_slopes=np.linspace(0.05, 0.4, 4), is_causal=True, causal_alignment="bottom_right"),
}


@pytest.fixture(autouse=True)
def small_units(monkeypatch):
    monkeypatch.setattr(_decode, "DECODE_CHUNK", 16)


def assert_equal_to_scale(actual: np.ndarray, expected: np.ndarray, rtol: float, scale: float) -> None:
    """|actual − expected| <= rtol · scale, with the same NaN and infinities."""
    np.testing.assert_array_equal(np.isfinite(actual), np.isfinite(expected))
    finite = np.isfinite(expected)
    assert np.max(np.abs(actual[finite] - expected[finite]), initial=0.0) <= rtol * scale


def inputs(dtype, batch=2, heads=4, kv_heads=2, L=1, S=100, E=8, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, heads, L, E)).astype(dtype)
    k, v = (rng.standard_normal((batch, kv_heads, S, E)).astype(dtype) for _ in range(2))
    return q, k, v


def test_the_decode_path_takes_few_queries_against_many_keys():
    q, k, v = inputs(np.float32, L=3)
    assert _decode.decodes(make_problem(q, k, v, None, 0.0, None, True, None))
    assert not _decode.decodes(make_problem(q, k[..., :3, :], v[..., :3, :], None, 0.0, None, True, None))
    assert not _decode.decodes(make_problem(q, k, v, np.ones((3, 100), bool), 0.0, None, True, None))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("L", [1, 3])
def test_decode_equals_naive(dtype, variant, L):
    q, k, v = inputs(dtype, L=L, seed=L)
    kwargs = dict(enable_gqa=True, **VARIANTS[variant])
    decoded = al.attention(q, k, v, engine="fused", **kwargs)
    naive = al.attention(q, k, v, engine="naive", **kwargs)
    rtol = RTOL[np.dtype(dtype)]
    assert_equal_to_scale(decoded.output, naive.output, rtol, float(np.abs(v).max()))
    assert_equal_to_scale(decoded.lse, naive.lse, rtol, float(np.abs(naive.lse).max()))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("variant", ["plain", "causal bottom-right", "window", "sinks"])
def test_ragged_key_lengths_equal_naive_on_each_sequence_alone(dtype, variant):
    """Sequence b with key_lengths[b] keys is the naive engine on its keys cut to that
    length (its diagonal at its own length): a length of 0, of a few keys and of S."""
    q, k, v = inputs(dtype, batch=4, L=2, S=90, seed=5)
    lengths = np.array([0, 7, 50, 90])
    kwargs = dict(enable_gqa=True, **VARIANTS[variant])
    decoded = al.attention(q, k, v, key_lengths=lengths, engine="fused", **kwargs)
    rtol = RTOL[np.dtype(dtype)]
    for b, n in enumerate(lengths):
        if n == 0:
            sinks = VARIANTS[variant].get("sinks")
            assert not decoded.output[b].any()
            expected_lse = np.broadcast_to(-np.inf if sinks is None else sinks[:, None], (4, 2))
            np.testing.assert_allclose(decoded.lse[b], expected_lse, rtol=1e-7)
            continue
        alone = al.attention(q[b], k[b, :, :n], v[b, :, :n], engine="naive", **kwargs)
        assert_equal_to_scale(decoded.output[b], alone.output, rtol, float(np.abs(v).max()))
        assert_equal_to_scale(decoded.lse[b], alone.lse, rtol, float(np.abs(alone.lse).max()))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("groups", "L", "E"), [(4, 1, 128), (3, 2, 100), (2, 1, 64), (5, 1, 36)])
def test_wide_rows_equal_naive(dtype, groups, L, E):
    """Widths whose products run in the kernels' vector loops (64 and 128, as models have;
    100 and 36, with a remainder), and rows per key/value head M = G·L of 4, 6 (four, then
    two), 2 and 5 (four, then one), over units whose key counts are not all multiples of
    four (the last, 298 − 288 = 10)."""
    q, k, v = inputs(dtype, batch=1, heads=2 * groups, L=L, S=299, E=E, seed=E)
    decoded = al.attention(q, k, v, enable_gqa=True, engine="fused", key_lengths=np.array([298]))
    naive = al.attention(q, k[:, :, :298], v[:, :, :298], enable_gqa=True, engine="naive")
    rtol = RTOL[np.dtype(dtype)]
    assert_equal_to_scale(decoded.output, naive.output, rtol, float(np.abs(v).max()))
    assert_equal_to_scale(decoded.lse, naive.lse, rtol, float(np.abs(naive.lse).max()))


@pytest.mark.parametrize("threads", [2, 3])
def test_any_thread_count_gives_identical_bits(monkeypatch, threads):
    """One task on one thread against several tasks per thread (TASK_BYTES patched: a cache
    this small would be one task), their units shared differently among the threads."""
    monkeypatch.setattr(_decode, "TASK_BYTES", 1)
    tasks: list[int] = []

    def counted(work, threads):
        tasks.append(len(work))
        run(work, threads)

    monkeypatch.setattr(_decode, "run", counted)
    q, k, v = inputs(np.float32, batch=3, L=2, S=300, E=16)
    kwargs = dict(enable_gqa=True, key_lengths=np.array([300, 31, 170]), softcap=4.0, sinks=np.zeros(4))
    one = al.attention(q, k, v, engine="fused", num_threads=1, **kwargs)
    many = al.attention(q, k, v, engine="fused", num_threads=threads, **kwargs)
    assert tasks == [1, _decode.UNITS_PER_THREAD * threads]
    assert np.array_equal(one.output, many.output) and np.array_equal(one.lse, many.lse)


def test_a_cache_view_is_read_where_it_lies():
    """A preallocated cache (B, Hk, capacity, E) cut to its filled positions: the rows
    beyond are never read (NaN there changes nothing)."""
    q, k, v = inputs(np.float32, S=60)
    cache_k, cache_v = (np.full((2, 2, 80, 8), np.nan, np.float32) for _ in range(2))
    cache_k[:, :, :60], cache_v[:, :, :60] = k, v
    viewed = al.attention(q, cache_k[:, :, :60], cache_v[:, :, :60], enable_gqa=True, engine="fused")
    assert np.array_equal(viewed.output, al.attention(q, k, v, enable_gqa=True, engine="fused").output)


def test_a_nan_value_outside_the_window_reaches_the_row_as_in_the_naive_engine():
    q, k, v = inputs(np.float64, S=60)
    v[0, 0, 3, 0] = np.nan  # far left of the window of the last query
    kwargs = dict(enable_gqa=True, window=(5, 0), causal_alignment="bottom_right")
    decoded = al.attention(q, k, v, engine="fused", **kwargs)
    naive = al.attention(q, k, v, engine="naive", **kwargs)
    np.testing.assert_array_equal(np.isnan(decoded.output), np.isnan(naive.output))
    assert np.isnan(decoded.output[0, :2]).any() and not np.isnan(decoded.output[1]).any()


def test_values_near_the_largest_float_give_a_finite_output():
    """A sum of values near float32's largest overflows; the path reruns on V·2⁻ᵏ."""
    q, k, v = inputs(np.float32, S=200)
    v[...] = 3e38
    decoded = al.attention(q, k, v, enable_gqa=True, engine="fused")
    assert np.isfinite(decoded.output).all()
    np.testing.assert_allclose(decoded.output, 3e38, rtol=1e-6)


@pytest.mark.slow
@requires("torch")
def test_key_lengths_gradients_equal_torch_on_each_sequence():
    """Forward and backward of every engine with ragged lengths and a bottom-right
    causal rule, against torch's SDPA on each sequence's keys alone (float64)."""
    import torch

    q, k, v = inputs(np.float64, batch=3, L=2, S=40, seed=7)
    lengths = np.array([0, 13, 40])
    grad = np.random.default_rng(8).standard_normal(q.shape)
    for engine in ("naive", "tiled", "fused", None):
        result = al.attention(q, k, v, key_lengths=lengths, is_causal=True, causal_alignment="bottom_right",
                              enable_gqa=True, engine=engine)  # fmt: skip
        dq, dk, dv = result.backward(grad)
        for b, n in enumerate(lengths):
            if n == 0:
                assert not (result.output[b].any() or dq[b].any() or dk[b].any() or dv[b].any())
                continue
            tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q[b], k[b, :, :n], v[b, :, :n]))
            allowed = torch.ones(2, n, dtype=torch.bool).tril(diagonal=n - 2)  # bottom-right
            out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=allowed, enable_gqa=True)
            out.backward(torch.tensor(grad[b]))
            assert_close(result.output[b], out.detach().numpy())
            assert_close(dq[b], tq.grad.numpy())
            assert_close(dk[b, :, :n], tk.grad.numpy())
            assert_close(dv[b, :, :n], tv.grad.numpy())
            assert not (dk[b, :, n:].any() or dv[b, :, n:].any())


def test_key_lengths_through_the_functional_api():
    q, k, v = inputs(np.float64, batch=2, L=1, S=30)
    lengths = np.array([10, 30])
    out = al.scaled_dot_product_attention(q, k, v, enable_gqa=True, key_lengths=lengths)
    expected = al.scaled_dot_product_attention(q[:1, :, :, :], k[:1, :, :10], v[:1, :, :10], enable_gqa=True)
    assert_close(out[:1], expected)
    grads = al.scaled_dot_product_attention_backward(np.ones_like(out), q, k, v, enable_gqa=True, key_lengths=lengths)
    assert not grads.key[0, :, 10:].any()


@pytest.mark.parametrize(
    ("key_lengths", "kwargs", "error"),
    [
        (np.array([1, 2, 3]), {}, ValueError),  # three lengths for two sequences
        (np.array([-1, 2]), {}, ValueError),
        (np.array([2, 31]), {}, ValueError),  # beyond S
        (np.array([2.0, 3.0]), {}, TypeError),
        (np.array(3), {}, ValueError),  # one number, not one per sequence
        (np.array([2, 3]), dict(dropout_p=0.1), ValueError),
    ],
)
def test_bad_key_lengths_are_refused(key_lengths, kwargs, error):
    q, k, v = inputs(np.float64, S=30)
    with pytest.raises(error, match=r"key_lengths|dropout_p"):
        al.attention(q, k, v, enable_gqa=True, key_lengths=key_lengths, **kwargs)
    with pytest.raises(al.AttnlabError):
        al.attention(q, k, v, enable_gqa=True, key_lengths=key_lengths, **kwargs)


def test_the_engine_choice_takes_the_decode_path_for_a_long_cache():
    q, k, v = inputs(np.float32, batch=1, heads=32, kv_heads=8, S=4096, E=64)
    assert al.attention(q, k, v, enable_gqa=True).engine == "fused"
    small = inputs(np.float32, batch=1, heads=4, kv_heads=2, S=64, E=8)
    assert al.attention(*small, enable_gqa=True).engine == "naive"
    assert _attention.DECODE_FROM_BYTES > 64 * 2 * 16 * 4


@pytest.mark.parametrize("seed", range(12))
def test_random_shapes_and_variants_equal_naive(seed):
    """Random L, G, S, E ≠ Ev, broadcast batch dimensions, ragged lengths and variants."""
    rng = np.random.default_rng(100 + seed)
    dtype = (np.float32, np.float64)[seed % 2]
    batch, kv_heads, groups = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(1, 4))
    L, S, E, Ev = int(rng.integers(1, 5)), int(rng.integers(6, 70)), int(rng.integers(1, 10)), int(rng.integers(1, 10))
    heads = kv_heads * groups
    q = rng.standard_normal((1 if seed % 3 == 0 else batch, heads, L, E)).astype(dtype)  # broadcast over B
    k = rng.standard_normal((batch, kv_heads, S, E)).astype(dtype)
    v = rng.standard_normal((batch, kv_heads, S, Ev)).astype(dtype) * 3
    kwargs: dict = dict(enable_gqa=True, causal_alignment=("top_left", "bottom_right")[seed % 2])
    if seed % 4 == 1:
        kwargs.update(is_causal=True)
    if seed % 4 == 2:
        kwargs.update(window=(int(rng.integers(0, S)), int(rng.integers(0, 3))), softcap=3.0)
    if seed % 3 == 1:
        kwargs.update(sinks=rng.standard_normal(heads), alibi_slopes=rng.random(heads))
    lengths = rng.integers(0, S + 1, size=batch) if seed % 2 else None
    decoded = al.attention(q, k, v, engine="fused", key_lengths=lengths, **kwargs)
    assert _decode.decodes(make_problem(q, k, v, None, 0.0, None, True, None, key_lengths=lengths))
    rtol, scale = RTOL[np.dtype(dtype)], float(np.abs(v).max())
    for b in range(batch):
        n = S if lengths is None else int(lengths[b])
        if n == 0:
            assert not decoded.output[b].any()
            continue
        alone = al.attention(q[min(b, q.shape[0] - 1)], k[b, :, :n], v[b, :, :n], engine="naive", **kwargs)
        assert_equal_to_scale(decoded.output[b], alone.output, rtol, scale)
        assert_equal_to_scale(
            decoded.lse[b], alone.lse, rtol, max(float(np.abs(alone.lse[np.isfinite(alone.lse)]).max(initial=1.0)), 1.0)
        )
