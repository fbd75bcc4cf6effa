"""The fused engine (numba kernels) against the NumPy tiled engine, its oracle, relative to
the scale of the terms each result sums (results can cancel to far below it): outputs
and lse to 4e-7 in float32 and 1e-15 in float64; gradients to 2e-6 and 1e-14.

Why 4e-7 and not 2e-7: each exponential of the fused engine is within 0.86 ulp (checked
below), but NumPy's own float32 exp, the oracle's, was measured within 2.3 ulp only
(NumPy 2.4.6 with AVX-512, on e^x for x in [−80, 0]), so two exact-enough engines can
differ by about 3 ulp, 4e-7.

The variants' compiled tasks (window, causal with either alignment, softcap, ALiBi,
sinks) against the tiled and the naive engines: there the scores Z themselves differ by a
few ulp of their size (the softcap's tanh is the kernels' own, ALiBi's product may be
fused), which e^Z turns into a relative difference of that size, so the tolerances above
grow by 1 + max |Z|."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

import attnlab as al
from attnlab.engine import _tiled
from attnlab.engine._problem import make_problem
from attnlab.engine.fused import _engine as _fused
from attnlab.engine.fused import _tasks
from helpers import use_small_blocks

if _fused.available():
    from attnlab.engine.fused import _kernels as _fused_kernels

pytestmark = pytest.mark.skipif(not _fused.available(), reason="numba is not installed (attnlab[fast])")
RTOL = {np.dtype(np.float32): 4e-7, np.dtype(np.float64): 1e-15}
GRAD_RTOL = {np.dtype(np.float32): 2e-6, np.dtype(np.float64): 1e-14}


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    use_small_blocks(monkeypatch, 16, 8, 24)


def score_terms(q: np.ndarray, k: np.ndarray) -> float:
    """max over query and key rows of scale·Σ_e |q_e|·|k_e| (scale 1/√E): the scale of a
    score's rounding, which differs between the engines, whose BLAS sum in orders of their own."""
    keys = np.repeat(k, q.shape[-3] // k.shape[-3], axis=-3) if q.ndim > 3 else k  # GQA: a key head per query head
    products = np.abs(q.astype(np.float64)) @ np.swapaxes(np.abs(keys.astype(np.float64)), -1, -2)
    return float(products.max(initial=0.0)) / max(q.shape[-1], 1) ** 0.5


def assert_equal_to_scale(fused: np.ndarray, tiled: np.ndarray, rtol: float, scale: float | None = None) -> None:
    """|fused − tiled| <= rtol · scale (default max |tiled|), with the same NaN and infinities."""
    np.testing.assert_array_equal(np.isfinite(fused), np.isfinite(tiled))
    finite = np.isfinite(tiled)
    scale = np.max(np.abs(tiled[finite]), initial=0.0) if scale is None else scale
    assert np.max(np.abs(fused[finite] - tiled[finite]), initial=0.0) <= rtol * max(scale, 1e-30)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([np.float32, np.float64]),
    st.integers(1, 3),  # batch
    st.integers(1, 50),  # L
    st.integers(1, 50),  # S
    st.integers(1, 9),  # E
    st.booleans(),  # causal
    st.sampled_from(["none", "bool", "float"]),
    st.sampled_from([0.0, 0.3]),  # dropout
    st.integers(0, 2**32 - 1),
)
@pytest.mark.slow
def test_fused_equals_tiled(dtype, batch, L, S, E, is_causal, mask_kind, dropout_p, seed):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((batch, n, E)).astype(dtype) * 3 for n in (L, S, S))
    mask = None
    if mask_kind == "bool":
        mask = rng.random((L, S)) > 0.3
    elif mask_kind == "float":
        mask = rng.standard_normal((L, S)).astype(dtype)
    kwargs = dict(attn_mask=mask, is_causal=is_causal, dropout_p=dropout_p, rng=seed)
    results = {engine: al.attention(q, k, v, engine=engine, **kwargs) for engine in ("tiled", "fused")}
    # the scores' rounding, relative to their terms, moves every result: growth = 1 + the terms' scale
    growth, rtol = 1 + score_terms(q, k), RTOL[np.dtype(dtype)]
    # O is a weighted mean of the rows of V: its terms' scale is max |V|
    assert_equal_to_scale(results["fused"].output, results["tiled"].output, rtol * growth, np.abs(v).max())
    lse = results["tiled"].lse
    assert_equal_to_scale(results["fused"].lse, lse, rtol, np.abs(lse[np.isfinite(lse)]).max(initial=0) + growth)
    grad = rng.standard_normal((batch, L, E)).astype(dtype)
    # the terms' scale: |dO|·|V| bounds dP and so dZ; times |K| or |Q| for dQ and dK
    terms = growth * float(np.abs(grad).max() * np.abs(v).max() * max(np.abs(q).max(), np.abs(k).max(), 1) * S)
    for fused, tiled in zip(results["fused"].backward(grad), results["tiled"].backward(grad), strict=True):
        assert fused.dtype == dtype
        assert_equal_to_scale(fused, tiled, GRAD_RTOL[np.dtype(dtype)], terms)


def test_one_and_two_threads_give_identical_bits():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((3, 70, 8), dtype=np.float32) for _ in range(3))
    grad = rng.standard_normal((3, 70, 8), dtype=np.float32)
    runs = []
    for threads in (1, 2):
        result = al.attention(q, k, v, is_causal=True, engine="fused", num_threads=threads)
        runs.append((result.output, result.lse, *result.backward(grad)))
    for one, two in zip(*runs, strict=True):
        assert np.array_equal(one, two)


@pytest.mark.parametrize("task_scores", [1, 2**30])
def test_the_compiled_forward_gives_the_same_bits_however_it_is_split(monkeypatch, task_scores):
    """Tasks of one block of queries of one slice, or of many whole slices, with GQA and a
    broadcast batch: the same bits, as each slice's arithmetic depends on the block sizes only."""
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 4, 40, 8), dtype=np.float32)
    k, v = (rng.standard_normal((1, 2, 50, 8), dtype=np.float32) for _ in range(2))
    kwargs = dict(is_causal=True, enable_gqa=True, engine="fused")
    expected = al.attention(q, k, v, **kwargs)
    monkeypatch.setattr(_tasks, "TASK_SCORES", task_scores)
    for threads in (1, 3):
        result = al.attention(q, k, v, num_threads=threads, **kwargs)
        assert np.array_equal(result.output, expected.output) and np.array_equal(result.lse, expected.lse)


def fused_exp(x: np.ndarray) -> np.ndarray:
    """e^x by the fused kernels' exponential: the backward kernel's P = exp(Z − lse) with lse = 0."""
    scores = x.copy()
    rows = np.zeros(x.shape[0], x.dtype)
    _fused.softmax_backward_(scores, rows, np.zeros_like(x), rows)
    return scores


def test_the_exponential_is_within_2_ulp_and_keeps_the_special_values():
    """Measured with FMA: 0.86 ulp in float32, 1.28 in float64."""
    for dtype in (np.float32, np.float64):
        x = np.linspace(-80, 0, 100_001, dtype=dtype)[None]  # e^x from 2e-35 to 1
        expected = np.exp(x.astype(np.longdouble))  # the oracle: 64-bit mantissas
        ulp = np.spacing(expected.astype(dtype)).astype(np.longdouble)
        # 1.5 and 2: what a machine without FMA (or NUMBA_CPU_NAME=generic) may reach
        assert np.max(np.abs(fused_exp(x) - expected) / ulp) <= (1.5 if dtype == np.float32 else 2)
        special = np.array([[-np.inf, np.nan, np.inf, -1000.0, 1000.0, -0.0]], dtype)
        np.testing.assert_array_equal(fused_exp(special), np.array([[0.0, np.nan, np.inf, 0.0, np.inf, 1.0]], dtype))
        # the ends of the range: the last normal numbers, then 0 (NumPy: subnormals, then 0) and
        # +∞ (NumPy: finite for 0.35 more)
        smallest, largest, zero, infinite = (
            (-87.33, 88.37, -87.69, 88.38) if dtype == np.float32 else (-708.39, 709.43, -708.75, 709.44)
        )
        ends = np.array([[smallest, largest]], dtype)
        np.testing.assert_allclose(fused_exp(ends), np.exp(ends.astype(np.longdouble)), rtol=4 * np.finfo(dtype).eps)
        np.testing.assert_array_equal(fused_exp(np.array([[zero, infinite]], dtype)), np.array([[0.0, np.inf]], dtype))


def test_one_online_softmax_step_equals_numpys():
    """The fused step against the NumPy kernel, from a state with some rows that saw keys
    before and some that saw none, on blocks with masked (−∞) scores and whole masked rows."""
    rng = np.random.default_rng(4)
    for dtype in (np.float32, np.float64):
        scores = (rng.standard_normal((6, 37)) * 5).astype(dtype)
        scores[rng.random(scores.shape) < 0.3] = -np.inf
        scores[1] = -np.inf  # no key visible in this block
        scores[2, 3], scores[4, 5], scores[5, 0] = np.nan, -np.nan, -0.0  # both NaNs' signs, and −0
        row_max = np.array([-np.inf, 2.0, -np.inf, 30.0, -1.0, 0.5], dtype)
        row_sum = np.array([0.0, 3.0, 0.0, 1.5, 2.0, 1.0], dtype)
        states = {}
        for name, kernels in (("numpy", _tiled.NUMPY), ("fused", _fused.KERNELS)):
            z, m, s = scores.copy(), row_max.copy(), row_sum.copy()
            rescale = kernels.online_softmax_(z, m, s)
            states[name] = (z, m, s, rescale)
        for fused, numpy in zip(states["fused"], states["numpy"], strict=True):
            np.testing.assert_allclose(fused, numpy, rtol=RTOL[np.dtype(dtype)], atol=0)  # NaN where NumPy has NaN


def test_the_kernels_check_their_row_vectors():
    scores = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"row_max: expected \(2,\) float32"):
        _fused.online_softmax_(scores, np.zeros(2, np.float64), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"row_sum: expected \(2,\) float32"):
        _fused.online_softmax_(scores, np.zeros(2, np.float32), np.zeros(1, np.float32))
    with pytest.raises(ValueError, match=r"lse: expected \(2,\) float32"):
        _fused.softmax_backward_(scores, np.zeros(1, np.float32), scores.copy(), np.zeros(2, np.float32))


def test_empty_shapes_give_what_the_naive_engine_gives():
    for q_shape, kv_shape in [
        ((2, 0, 4), (2, 3, 4)),
        ((2, 3, 4), (2, 0, 4)),
        ((0, 3, 4), (0, 3, 4)),
        ((2, 3, 0), (2, 5, 0)),
    ]:
        q, kv = np.ones(q_shape, np.float32), np.ones(kv_shape, np.float32)
        results = {engine: al.attention(q, kv, kv, engine=engine) for engine in ("naive", "fused")}
        np.testing.assert_array_equal(results["fused"].output, results["naive"].output)
        np.testing.assert_array_equal(results["fused"].lse, results["naive"].lse)
        grad = np.ones(results["naive"].output.shape, np.float32)
        for fused, naive in zip(results["fused"].backward(grad), results["naive"].backward(grad), strict=True):
            np.testing.assert_array_equal(fused, naive)


@pytest.mark.parametrize("heads", [3, 10])  # the backward's two schedules: split slices, whole slices
def test_the_compiled_backward_gives_the_same_bits_for_one_two_or_three_threads(heads):
    rng = np.random.default_rng(5)
    q, k, v, grad = (rng.standard_normal((heads, 45, 8), dtype=np.float32) for _ in range(4))
    runs = []
    for threads in (1, 2, 3):
        result = al.attention(q, k, v, is_causal=True, engine="fused", num_threads=threads)
        runs.append((result.output, *result.backward(grad)))
    for one, other in zip(runs[0], runs[1], strict=True):
        assert np.array_equal(one, other)
    for one, other in zip(runs[0], runs[2], strict=True):
        assert np.array_equal(one, other)


# The variants of the compiled tasks: keyword arguments of attention(), with "H" and "BH"
# standing for ALiBi slopes of shape (H,) and (B, H), and True for sinks (H,).
VARIANTS = {
    "causal": dict(is_causal=True),
    "causal bottom-right": dict(is_causal=True, causal_alignment="bottom_right"),
    "window both sides": dict(window=(9, 4)),
    "window left, bottom-right": dict(window=(13, None), causal_alignment="bottom_right"),
    "window right": dict(window=(None, 6)),
    "sliding window": dict(is_causal=True, window=(20, 0)),
    "diagonal only, with sinks": dict(window=(0, 0), sinks=True),  # rows with no key where L > S
    "softcap": dict(softcap=2.5),
    "alibi (H,)": dict(alibi_slopes="H"),
    "alibi (B, H), bottom-right": dict(alibi_slopes="BH", is_causal=True, causal_alignment="bottom_right"),
    "sinks": dict(sinks=True),
    "softcap and sinks, windowed": dict(softcap=4.0, sinks=True, window=(11, 3)),
    "everything": dict(
        is_causal=True, causal_alignment="bottom_right", window=(17, 0), softcap=3.0, alibi_slopes="BH", sinks=True
    ),
}
B, H, HK, E = 2, 4, 2, 8  # GQA: two query heads per key head


def variant_arguments(rng: np.random.Generator, name: str, dtype) -> dict:
    """The keyword arguments of VARIANTS[name], with their arrays drawn."""
    kwargs = dict(VARIANTS[name])
    if kwargs.get("alibi_slopes") is not None:
        kwargs["alibi_slopes"] = rng.uniform(0.05, 1.0, (H,) if kwargs["alibi_slopes"] == "H" else (B, H)).astype(dtype)
    if kwargs.get("sinks"):
        kwargs["sinks"] = rng.uniform(-2.0, 3.0, H).astype(dtype)
    return kwargs


def largest_score(q: np.ndarray, k: np.ndarray, kwargs: dict) -> float:
    """A bound on max |Z|: max |scale·q·kᵀ| (at most the softcap's c), plus ALiBi's largest bias."""
    keys = np.repeat(k, q.shape[-3] // k.shape[-3], axis=-3) if q.ndim > 2 else k  # GQA: a key head per query head
    raw = float(np.abs(q @ np.swapaxes(keys, -1, -2)).max() / q.shape[-1] ** 0.5)  # scale 1/√E
    largest = min(raw, kwargs["softcap"]) if kwargs.get("softcap") else raw
    if kwargs.get("alibi_slopes") is not None:
        largest += float(np.max(kwargs["alibi_slopes"])) * (q.shape[-2] + k.shape[-2])
    return largest


def results(q, k, v, grad, grad_lse, engine: str, kwargs: dict) -> list[np.ndarray]:
    """O, lse, dQ, dK, dV and the sinks' gradient (or nothing) of one engine."""
    result = al.attention(q, k, v, engine=engine, enable_gqa=True, **kwargs)
    grads = result.backward(grad, grad_lse=grad_lse)
    return [result.output, result.lse, *grads, *([] if grads.sinks is None else [grads.sinks])]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_the_compiled_variants_equal_the_tiled_and_naive_engines(monkeypatch, name, dtype):
    """Forward, lse and every gradient (with grad_lse; the sinks' too), for L < S, L > S and
    lengths one past the small blocks' edges, with both backward schedules (whole slices,
    and split over blocks of keys and of queries)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    for (L, S), one_pass in [((40, 23), True), ((17, 49), False), ((25, 25), False)]:
        monkeypatch.setattr(_tiled, "ONE_PASS_BACKWARD_FROM", 1 if one_pass else 10**9)
        q = (rng.standard_normal((B, H, L, E)) * 2).astype(dtype)
        k, v = ((rng.standard_normal((B, HK, S, E)) * 2).astype(dtype) for _ in range(2))
        grad = rng.standard_normal((B, H, L, E)).astype(dtype)
        grad_lse = rng.standard_normal((B, H, L)).astype(dtype)
        kwargs = variant_arguments(rng, name, dtype)
        growth = 1 + largest_score(q, k, kwargs)
        fused = results(q, k, v, grad, grad_lse, "fused", kwargs)
        terms = float(np.abs(grad).max() * np.abs(v).max() * max(np.abs(q).max(), np.abs(k).max(), 1) * S)
        scales = [np.abs(v).max(), None, terms, terms, terms, terms]  # O: a mean of V's rows; lse: its own
        rtols = [RTOL[np.dtype(dtype)] * growth] * 2 + [GRAD_RTOL[np.dtype(dtype)] * growth] * 4
        for engine in ("tiled", "naive"):
            expected = results(q, k, v, grad, grad_lse, engine, kwargs)
            assert len(fused) == len(expected) == (6 if kwargs.get("sinks") is not None else 5)
            for got, want, scale, rtol in zip(fused, expected, scales, rtols, strict=False):
                assert got.dtype == dtype and got.shape == want.shape
                assert_equal_to_scale(got, want, rtol, scale)


def test_a_row_with_no_key_gives_0_and_the_sinks_logit_as_its_lse():
    """Window (0, 0) with L > S: query i >= S sees no key. A hand computation: O = 0,
    lse = s_h with sinks and −∞ without; its gradients are 0."""
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((1, 2, n, 4)) for n in (30, 20, 20))
    sinks = np.array([0.5, -1.5])
    for with_sinks in (False, True):
        result = al.attention(q, k, v, window=(0, 0), sinks=sinks if with_sinks else None, engine="fused")
        np.testing.assert_array_equal(result.output[..., 20:, :], 0.0)
        expected = np.broadcast_to(sinks[:, None], (1, 2, 10)) if with_sinks else np.full((1, 2, 10), -np.inf)
        np.testing.assert_array_equal(result.lse[..., 20:], expected)
        grad_query = result.backward(rng.standard_normal(result.output.shape)).query
        np.testing.assert_array_equal(grad_query[..., 20:, :], 0.0)
        # the rows that see their key: O = V_i, P = 1 (or e^{Z_ii}/(e^{Z_ii} + e^{s}) with sinks)
        if not with_sinks:
            np.testing.assert_allclose(result.output[..., :20, :], v, rtol=1e-15)


def test_the_compiled_tasks_run_for_every_variant_and_the_block_loop_for_mask_mod(monkeypatch):
    """With the tiled engine's Python block loop made to raise, every variant still runs
    (the compiled tasks: no Python between blocks); a mask function takes the loop."""

    def loop(*arguments):
        raise AssertionError("the Python block loop ran")

    monkeypatch.setattr(_tiled, "_forward_block", loop)
    monkeypatch.setattr(_tiled, "_backward_tasks", loop)
    rng = np.random.default_rng(7)
    q = rng.standard_normal((B, H, 30, E), dtype=np.float32)
    k, v = (rng.standard_normal((B, HK, 40, E), dtype=np.float32) for _ in range(2))
    for name in VARIANTS:
        result = al.attention(q, k, v, engine="fused", enable_gqa=True, **variant_arguments(rng, name, np.float32))
        result.backward(np.ones_like(q))
    with pytest.raises(AssertionError, match="block loop"):
        al.attention(q, k, v, engine="fused", enable_gqa=True, mask_mod=lambda b, h, i, j: j <= i)


def test_the_real_block_sizes_skip_around_the_band(monkeypatch):
    """The engine's own blocks (512 keys, 512 queries, 256 when causal), lengths just past
    their edges and a band that starts and ends inside blocks: against the naive engine."""
    monkeypatch.setattr(_tiled, "BLOCK_Q", 512)
    monkeypatch.setattr(_tiled, "CAUSAL_BLOCK_Q", 256)
    monkeypatch.setattr(_tiled, "BLOCK_K", 512)
    rng = np.random.default_rng(8)
    q = rng.standard_normal((1, 2, 513, 8), dtype=np.float32)
    k, v = (rng.standard_normal((1, 2, 1030, 8), dtype=np.float32) for _ in range(2))
    grad = rng.standard_normal(q.shape, dtype=np.float32)
    kwargs = dict(is_causal=True, causal_alignment="bottom_right", window=(300, 0), softcap=5.0, sinks=np.ones(2))
    fused, naive = (results(q, k, v, grad, None, engine, kwargs) for engine in ("fused", "naive"))
    terms = float(np.abs(grad).max() * np.abs(v).max() * max(np.abs(q).max(), np.abs(k).max()) * 301)
    for got, want, scale in zip(fused, naive, [np.abs(v).max(), None, terms, terms, terms, terms], strict=True):
        assert_equal_to_scale(got, want, 6 * GRAD_RTOL[np.dtype(np.float32)], scale)


@pytest.mark.parametrize("heads", [3, 10])
def test_the_variants_give_the_same_bits_for_any_thread_count_or_split(monkeypatch, heads):
    """The compiled forward split into blocks of rows or many whole slices, and the
    backward's schedules, with every variant at once: the same bits."""
    rng = np.random.default_rng(9)
    q, k, v, grad = (rng.standard_normal((heads, 45, 8), dtype=np.float32) for _ in range(4))
    kwargs = dict(window=(20, 3), causal_alignment="bottom_right", softcap=2.0, sinks=rng.standard_normal(heads))
    kwargs["alibi_slopes"] = rng.random(heads)
    runs = []
    for threads, task_scores in [(1, _tasks.TASK_SCORES), (2, 1), (3, 2**30)]:
        monkeypatch.setattr(_tasks, "TASK_SCORES", task_scores)
        result = al.attention(q, k, v, engine="fused", num_threads=threads, **kwargs)
        runs.append((result.output, result.lse, *result.backward(grad)))
    for other in runs[1:]:
        for one, two in zip(runs[0], other, strict=True):
            assert np.array_equal(one, two)


@pytest.mark.parametrize("cap", [1.0, 50.0, 0.3])
def test_the_softcap_is_within_a_few_ulp_and_keeps_the_special_values(cap):
    """c·tanh(x/c) against a 64-bit-mantissa tanh. Measured with FMA: float32 (the
    rational function) within 5.2 ulp for c = 1 and 4.1 for c = 50 (mean 0.25), float64
    within 1.6 and 3.3 (x/c rounds once; NumPy's c·tanh(x/c): 2.5 and 2.2)."""
    for dtype, bound in ((np.float32, 6), (np.float64, 2 if cap == 1 else 4)):
        x = (np.concatenate([np.linspace(-25, 25, 500_001), np.geomspace(1e-30, 25, 200_001)]) * cap).astype(dtype)
        values, derivative = x.copy(), np.empty_like(x)
        _fused_kernels.softcap_(values, dtype(cap), derivative)
        tanh = np.tanh(x.astype(np.longdouble) / np.longdouble(dtype(cap)))  # the oracle
        expected = np.longdouble(dtype(cap)) * tanh
        ulp = np.spacing(np.abs(expected).astype(dtype)).astype(np.longdouble)
        assert np.max(np.abs(values - expected) / ulp) <= bound
        # 1 − t² is as exact as t near 0, and loses t's few ulp to cancellation near ±1
        np.testing.assert_allclose(derivative, 1 - tanh * tanh, rtol=0, atol=8 * bound * np.finfo(dtype).eps)
        negated = -x
        _fused_kernels.softcap_(negated, dtype(cap), derivative)
        np.testing.assert_array_equal(negated, -values)  # odd, exactly
        tiny = np.finfo(dtype).smallest_subnormal if cap == 1 else 0.0  # x/c may round to 0 (as NumPy's)
        special = np.array([-np.inf, np.inf, np.nan, -0.0, 0.0, 1e30, -1e-30, tiny], dtype)
        values = special.copy()
        _fused_kernels.softcap_(values, dtype(cap), np.empty_like(values))
        expected = np.array([-cap, cap, np.nan, -0.0, 0.0, cap, -1e-30, tiny], dtype)
        np.testing.assert_allclose(values, expected, rtol=2 * np.finfo(dtype).eps, atol=0)  # NaN where NaN
        assert np.signbit(values[3]) and not np.signbit(values[4])


@pytest.mark.parametrize("bad", [np.nan, -np.nan, np.inf, -np.inf])
def test_a_non_finite_query_with_a_softcap_gives_the_tiled_engines_nans(bad):
    """A NaN of either sign (the softcap's maximum may lose a negative NaN, whose row is
    NaN all the same) or an infinity (capped to ±c) in one query, with other variants."""
    rng = np.random.default_rng(10)
    for dtype in (np.float32, np.float64):
        q, k, v = (rng.standard_normal((2, n, 8)).astype(dtype) for n in (30, 40, 40))
        q[1, 7, 3] = bad
        kwargs = dict(softcap=2.0, window=(25, 2), sinks=np.array([0.5, -0.5]))
        runs = {}
        for engine in ("tiled", "fused"):
            result = al.attention(q, k, v, engine=engine, **kwargs)
            runs[engine] = (result.output, result.lse, *result.backward(np.ones_like(q)))
        assert np.isnan(runs["fused"][0][1, 7]).all() == np.isnan(bad)  # the NaN row
        for fused, tiled in zip(runs["fused"], runs["tiled"], strict=True):
            np.testing.assert_array_equal(np.isnan(fused), np.isnan(tiled))
            finite = np.abs(tiled[np.isfinite(tiled)]).max()
            assert_equal_to_scale(fused, tiled, 100 * GRAD_RTOL[np.dtype(dtype)], finite)


sides = st.one_of(st.none(), st.integers(0, 40))


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([np.float32, np.float64]),
    st.integers(1, 50),  # L
    st.integers(1, 50),  # S
    st.booleans(),  # causal
    st.one_of(st.none(), st.tuples(sides, sides)),  # window
    st.sampled_from(["top_left", "bottom_right"]),
    st.one_of(st.none(), st.floats(0.5, 20.0)),  # softcap
    st.booleans(),  # ALiBi (B, H)
    st.booleans(),  # sinks
    st.integers(0, 2**32 - 1),
)
def test_the_compiled_variants_equal_the_tiled_engine_for_any_shape(
    dtype, L, S, is_causal, window, alignment, softcap, alibi, sinks, seed
):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((B, H, L, E)) * 2).astype(dtype)
    k, v = ((rng.standard_normal((B, HK, S, E)) * 2).astype(dtype) for _ in range(2))
    kwargs = dict(is_causal=is_causal, window=window, causal_alignment=alignment, softcap=softcap)
    kwargs["alibi_slopes"] = rng.uniform(0.05, 1.0, (B, H)).astype(dtype) if alibi else None
    kwargs["sinks"] = rng.uniform(-2.0, 3.0, H).astype(dtype) if sinks else None
    grad, grad_lse = rng.standard_normal((B, H, L, E)).astype(dtype), rng.standard_normal((B, H, L)).astype(dtype)
    growth = 1 + largest_score(q, k, kwargs)
    fused, tiled = (results(q, k, v, grad, grad_lse, engine, kwargs) for engine in ("fused", "tiled"))
    terms = float(np.abs(grad).max() * np.abs(v).max() * max(np.abs(q).max(), np.abs(k).max(), 1) * S)
    # the lse's scale: its own, and with a softcap c also c, the scale of the written-out tanh's
    # error (5.2 ulp in float32), which the two engines' products, rounded apart, no longer cancel
    lse_scale = float(np.abs(tiled[1][np.isfinite(tiled[1])]).max(initial=0.0)) + (softcap or 0.0)
    scales = [np.abs(v).max(), lse_scale, terms, terms, terms, terms]
    rtols = [RTOL[np.dtype(dtype)] * growth] * 2 + [GRAD_RTOL[np.dtype(dtype)] * growth] * 4
    for got, want, scale, rtol in zip(fused, tiled, scales, rtols, strict=False):
        assert_equal_to_scale(got, want, rtol, scale)


def test_wide_vectors_mark_only_the_function_that_calls_them():
    """``_kernels._wide_vectors`` puts "prefer-vector-width"="512" on its caller's LLVM
    function and nowhere else; on a CPU with AVX-512 the caller's loop then adds and
    multiplies in 512-bit registers (zmm). The sum's order follows the vectors' width (the
    loop may reorder, as ``_row_sum``'s), so the bits may differ from the unmarked one's."""
    import re

    import llvmlite.binding as llvm
    from numba import config, njit

    fastmath = {"reassoc", "nsz"}

    @njit(fastmath=fastmath)
    def plain(x):  # type: ignore[no-untyped-def]
        total = np.float32(0.0)
        for j in range(x.shape[0]):
            total += x[j] * x[j]
        return total

    @njit(fastmath=fastmath)
    def wide(x):  # type: ignore[no-untyped-def]
        _fused_kernels._wide_vectors()
        total = np.float32(0.0)
        for j in range(x.shape[0]):
            total += x[j] * x[j]
        return total

    x = np.arange(1000, dtype=np.float32) / 1000
    exact = float(np.sum(x.astype(np.float64) ** 2))
    assert wide(x) == pytest.approx(exact, rel=1e-6) and plain(x) == pytest.approx(exact, rel=1e-6)
    assert '"prefer-vector-width"="512"' in next(iter(wide.inspect_llvm().values()))
    assert '"prefer-vector-width"' not in next(iter(plain.inspect_llvm().values()))
    features = config.CPU_FEATURES if config.CPU_NAME else llvm.get_host_cpu_features().flatten()
    if "+avx512f" in features.split(","):  # the loop's own arithmetic, not an index vector's
        arithmetic = re.compile(r"\tv(fmadd\w*|add|mul)ps\t[^\n]*%zmm")
        assert arithmetic.search(next(iter(wide.inspect_asm().values())))


def test_a_variant_that_is_off_still_gives_one_entry_per_slice():
    """The kernels read slice n's ALiBi slope and sink whether or not the variant is on,
    so an unused one is n zeros, never a shorter placeholder that they would read past."""
    q = np.ones((3, 4, 5, 8), np.float32)
    variant = _tasks._variant(make_problem(q, q, q, None, 0.0, None, True, None))
    for on, values in variant[3:]:
        assert not on
        np.testing.assert_array_equal(values, np.zeros(12, np.float32))
