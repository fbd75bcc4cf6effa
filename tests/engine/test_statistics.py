"""attention_statistics: the statistics of the weights from the tiles, against a float64
oracle written out here from the dense softmax of the scores as the variants define them
(not the engine's code), for every variant; ties by hand; rows with no key; and the
memory, which never holds an (L, S) matrix. Each on both engines: the tiled one (NumPy) and
the fused one (the compiled pass, or the tiled loop with compiled kernels under a mask).

Tolerances: each statistic within 1e-12 (float64) or 1e-5 (float32) of its scale: log S
for an entropy, 1 for a weight or a share, L for the attention a key receives and for a
head's weight by distance (sums of up to L rows' weights), max(1, |lse|) for an lse.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import attnlab as al
from attnlab.engine._statistics import attention_row, attention_statistics, distance_bins
from attnlab.engine.fused import _engine as _fused
from attnlab.engine.variants import Rules
from helpers import use_small_blocks

# Every test of the statistics' values runs on both engines: the NumPy loop and the compiled pass
needs_numba = pytest.mark.skipif(not _fused.available(), reason="numba is not installed (attnlab[fast])")
ENGINES = ["tiled", pytest.param("fused", marks=needs_numba)]

B, H, L, S, E = 2, 4, 70, 90, 8
TOP_K, SINK_KEYS, LOCAL_KEYS = 5, 3, 7


def oracle(q, k, *, top_k=TOP_K, sink_keys=SINK_KEYS, local_keys=LOCAL_KEYS, scale=None, attn_mask=None,
           is_causal=False, causal_alignment="top_left", window=None, softcap=None, alibi_slopes=None, sinks=None,
           mask_mod=None, key_lengths=None, enable_gqa=False, length_scale=None):  # fmt: skip
    """Every statistic in float64 from the dense weights of (B, H, L, E) inputs, the rules
    as the docs state them: d = j − (i + offset), offset S_b − L bottom-right (S_b the
    sequence's key length); the band (causal d <= 0, window −left <= d <= right, j < S_b);
    Z = softcap(m_i·scale·q_i·k_j) + float mask − slope·|d|, m_i = s_h·log max(n_i, 1), n_i
    the band's keys; −∞ where a mask, the band or the mask function rules the key out;
    P = exp(Z − lse), lse = log(Σ_j e^Z + e^sink). Returns (the statistics by name, P)."""
    q, k = q.astype(np.float64), k.astype(np.float64)
    if enable_gqa:
        k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    b_, h_, l_, e_ = q.shape
    s_ = k.shape[2]
    scale = 1 / np.sqrt(e_) if scale is None else scale
    lengths = [s_] * b_ if key_lengths is None else list(key_lengths)
    i, j = np.arange(l_)[:, None], np.arange(s_)[None, :]
    mask = None if attn_mask is None else np.broadcast_to(attn_mask, (b_, h_, l_, s_))
    Z = np.full((b_, h_, l_, s_), -np.inf)
    seen = np.zeros((b_, h_, l_, s_), bool)
    stop = np.zeros((b_, l_), int)
    behind = np.zeros((b_, l_, s_), int)  # (i + offset) − j
    for b in range(b_):
        offset = lengths[b] - l_ if causal_alignment == "bottom_right" else 0
        d = j - (i + offset)
        behind[b] = -d
        band = np.broadcast_to(j < lengths[b], (l_, s_)).copy()
        if is_causal:
            band &= d <= 0
        if window is not None:
            band &= (d >= -window[0]) if window[0] is not None else True
            band &= (d <= window[1]) if window[1] is not None else True
        stop[b] = [row.nonzero()[0].max() + 1 if row.any() else 0 for row in band]
        n = band.sum(axis=1)
        for h in range(h_):
            m = 1.0 if length_scale is None else length_scale[h] * np.log(np.maximum(n, 1))[:, None]
            z = m * scale * (q[b, h] @ k[b, h].T)
            if softcap is not None:
                z = softcap * np.tanh(z / softcap)
            allowed = band.copy()
            if mask is not None and mask.dtype == bool:
                allowed &= mask[b, h]
            elif mask is not None:
                z = z + mask[b, h]
                allowed &= ~np.isneginf(mask[b, h])
            if alibi_slopes is not None:
                z = z - alibi_slopes[h] * np.abs(d)
            if mask_mod is not None:
                allowed &= np.broadcast_to(mask_mod(np.array(b), np.array(h), i, j), (l_, s_))
            Z[b, h] = np.where(allowed, z, -np.inf)
            seen[b, h] = allowed
    sink = -np.inf if sinks is None else np.asarray(sinks, np.float64)[None, :, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.logaddexp(np.logaddexp.reduce(Z, axis=-1), sink)  # (B, H, L)
        P = np.where(seen, np.exp(Z - lse[..., None]), 0.0)
        entropy = -np.where(P > 0, P * np.log(P), 0.0).sum(axis=-1)
        sinks_weight = np.zeros_like(lse) if sinks is None else np.exp(sink - lse)
    order = np.argsort(-np.where(seen, P, -1.0), axis=-1, kind="stable")[..., :top_k]  # ties: the lower key
    top_weights = np.take_along_axis(np.where(seen, P, -1.0), order, axis=-1)
    K = (l_ + s_).bit_length()
    edges = [(-(2**k - 1), -(2 ** (k - 1))) for k in range(K, 0, -1)]
    edges += [(0, 0)] + [(2 ** (k - 1), 2**k - 1) for k in range(1, K + 1)]
    local = (j >= stop[:, :, None] - local_keys) & (j < stop[:, :, None])  # (B, L, S)
    expected = {
        "lse": lse,
        "entropy": entropy,
        "max_weight": P.max(axis=-1),
        "top_keys": np.where(top_weights < 0, -1, order),
        "top_weights": np.maximum(top_weights, 0.0),
        "sink_share": P[..., :sink_keys].sum(axis=-1),
        "local_share": (P * local[:, None]).sum(axis=-1),
        "sinks_weight": sinks_weight,
        "received": P.sum(axis=-2),
        "distance": np.stack(
            [(P * ((behind >= lo) & (behind <= hi))[:, None]).sum(axis=(-2, -1)) for lo, hi in edges], axis=-1
        ),
        "distance_bins": np.array(edges),
    }
    return expected, P


def scale_of(name: str, expected: np.ndarray) -> np.ndarray | float:
    """The scale a statistic's error is measured against (the module's docstring)."""
    if name == "entropy":
        return np.log(S)
    if name in ("received", "distance"):
        return L
    if name == "lse":
        return np.maximum(1.0, np.abs(np.where(np.isfinite(expected), expected, 0.0)))
    return 1.0


def assert_statistics(stats, expected: dict, dtype) -> None:
    tolerance = 1e-12 if dtype == np.float64 else 1e-5
    for name, want in expected.items():
        got = getattr(stats, name)
        assert got.shape == want.shape, name
        if name in ("top_keys", "distance_bins"):
            continue
        if name == "lse":
            assert np.array_equal(np.isneginf(got), np.isneginf(want)), name
            got, want = np.where(np.isinf(want), 0.0, got), np.where(np.isinf(want), 0.0, want)
        error = np.abs(got.astype(np.float64) - want) / scale_of(name, want)
        assert error.max(initial=0.0) <= tolerance, f"{name}: {error.max()}"
    assert np.array_equal(stats.distance_bins, expected["distance_bins"])
    if dtype == np.float64:
        assert np.array_equal(stats.top_keys, expected["top_keys"])
    else:  # near-ties may order differently in float32: the keys' own weights must be the ones reported
        assert np.array_equal(stats.top_keys < 0, expected["top_keys"] < 0)


def inputs(dtype, gqa=False, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H, L, E)).astype(dtype)
    k = rng.standard_normal((B, H // 2 if gqa else H, S, E)).astype(dtype)
    return q, k, rng


def every_third_document(batch, head, q_idx, kv_idx):
    """A mask function that reads every index: keys in the query's document of 23, shifted by batch and head."""
    return (q_idx + batch + head) // 23 == (kv_idx + batch + head) // 23


def case_keywords(case: str, dtype, rng) -> dict:
    """The keywords of attention_statistics for ``case`` (the oracle takes the same ones,
    with length_scale apart)."""
    slopes = rng.uniform(0.05, 0.5, H)
    logits = rng.standard_normal(H)
    float_mask = rng.standard_normal((B, 1, L, S)).astype(dtype)
    float_mask[rng.random((B, 1, L, S)) < 0.2] = -np.inf
    bool_mask = rng.random((L, S)) > 0.3
    bool_mask[11] = False  # a row with no key
    return {
        "plain": {},
        "causal": {"is_causal": True},
        "causal-bottom-right": {"is_causal": True, "causal_alignment": "bottom_right"},
        "window": {"window": (20, 5)},
        "window-causal-bottom-right": {"window": (30, None), "is_causal": True, "causal_alignment": "bottom_right"},
        "gqa": {"enable_gqa": True, "is_causal": True},
        "sinks": {"sinks": logits, "is_causal": True},
        "softcap": {"softcap": 1.5, "scale": 1.0},
        "large-scores": {"scale": 40.0, "is_causal": True},  # |lse| in the hundreds: one key takes most rows
        "alibi": {"alibi_slopes": slopes, "is_causal": True, "causal_alignment": "bottom_right"},
        "bool-mask": {"attn_mask": bool_mask},
        "float-mask": {"attn_mask": float_mask},
        "mask-mod": {"mask_mod": every_third_document},
        "key-lengths": {"key_lengths": np.array([90, 37]), "is_causal": True, "causal_alignment": "bottom_right"},
        "key-lengths-zero-sinks": {"key_lengths": np.array([0, 50]), "sinks": logits},
        "length-scale": {"length_scale": rng.uniform(0.5, 1.5, H), "is_causal": True},
        "everything": {
            "is_causal": True, "causal_alignment": "bottom_right", "window": (40, None), "softcap": 3.0,
            "alibi_slopes": slopes, "sinks": logits, "attn_mask": float_mask, "mask_mod": every_third_document,
            "key_lengths": np.array([61, 90]), "length_scale": rng.uniform(0.5, 1.5, H), "enable_gqa": True,
        },
    }[case]  # fmt: skip


CASES = [
    "plain", "causal", "causal-bottom-right", "window", "window-causal-bottom-right", "gqa", "sinks", "softcap",
    "large-scores", "alibi", "bool-mask", "float-mask", "mask-mod", "key-lengths", "key-lengths-zero-sinks",
    "length-scale", "everything",
]  # fmt: skip


def run(q, k, keywords: dict, **sizes):
    """attention_statistics with ``keywords``: the variants of a case with length_scale as
    one Rules, the others' as keywords (both forms)."""
    keywords = dict(keywords)
    if "length_scale" in keywords:
        rules = {
            name: keywords.pop(name) for name in list(keywords) if name in Rules().values() or name == "length_scale"
        }
        return attention_statistics(q, k, rules=Rules.of(**rules), **keywords, **sizes)
    return attention_statistics(q, k, **keywords, **sizes)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES)
def test_every_variant_matches_the_dense_oracle(case, dtype, engine, monkeypatch):
    use_small_blocks(monkeypatch, 32, 16, 24)  # 70 × 90 crosses several blocks of queries and keys
    keywords = case_keywords(case, dtype, np.random.default_rng(1))
    q, k, _ = inputs(dtype, gqa=keywords.get("enable_gqa", False))
    sizes = {"top_k": TOP_K, "sink_keys": SINK_KEYS, "local_keys": LOCAL_KEYS}
    stats = run(q, k, keywords, **sizes, engine=engine, num_threads=2)
    expected, weights = oracle(q, k, **keywords)
    assert_statistics(stats, expected, dtype)
    reported = np.take_along_axis(weights, np.maximum(stats.top_keys, 0), axis=-1)  # the keys' own weights
    error = np.abs(np.where(stats.top_keys < 0, 0.0, reported) - stats.top_weights)
    assert error.max() <= (1e-12 if dtype == np.float64 else 1e-5)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_lse_is_the_same_engines_bit_for_bit(engine, dtype, monkeypatch):
    use_small_blocks(monkeypatch, 32, 16, 24)
    q, k, rng = inputs(dtype)
    keywords = {"is_causal": True, "sinks": rng.standard_normal(H), "alibi_slopes": rng.uniform(0.1, 0.5, H)}
    stats = attention_statistics(q, k, engine=engine, **keywords)
    assert np.array_equal(stats.lse, al.attention(q, k, k, engine=engine, **keywords).lse)


@pytest.mark.parametrize("engine", ENGINES)
def test_ties_go_to_the_lower_key_across_blocks(engine, monkeypatch):
    use_small_blocks(monkeypatch, 32, 16, 16)
    q = np.zeros((1, 1, 3, 4))
    q[..., 0] = 1.0
    k = np.zeros((1, 1, 50, 4))
    k[0, 0, ::5, 0] = 1.0  # keys 0, 5, …, 45 score 1, exactly; the others 0
    stats = attention_statistics(q, k, scale=1.0, top_k=12, engine=engine)
    # the ten keys of score 1 in key order, then the two lowest keys of score 0
    assert stats.top_keys[0, 0, 0].tolist() == [0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 1, 2]
    e = np.e
    high, low = e / (10 * e + 40), 1 / (10 * e + 40)
    np.testing.assert_allclose(stats.top_weights[0, 0, 0], [high] * 10 + [low] * 2, rtol=1e-15)
    assert stats.top_keys[0, 0, 0, 0] == 0 and stats.max_weight[0, 0, 0] == stats.top_weights[0, 0, 0, 0]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_row_that_sees_fewer_keys_than_top_k_pads_with_minus_one(engine):
    q, k, _ = inputs(np.float64)
    stats = attention_statistics(q[..., :4, :], k[..., :4, :], is_causal=True, top_k=3, engine=engine)
    assert stats.top_keys[0, 0, 0].tolist() == [0, -1, -1]
    assert stats.top_weights[0, 0, 0].tolist() == [1.0, 0.0, 0.0]
    assert (stats.top_keys[0, 0, 1, :2] >= 0).all() and stats.top_keys[0, 0, 1, 2] == -1


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("with_sinks", [False, True])
def test_a_row_with_no_key_is_zeros_with_lse_minus_infinity_or_the_sinks(with_sinks, engine):
    q, k, rng = inputs(np.float64)
    mask = np.ones((L, S), bool)
    mask[5] = False
    sinks = rng.standard_normal(H) if with_sinks else None
    stats = attention_statistics(q, k, attn_mask=mask, sinks=sinks, engine=engine)
    row = (slice(None), slice(None), 5)
    assert (stats.lse[row] == (-np.inf if sinks is None else sinks)).all()
    assert (stats.sinks_weight[row] == (0.0 if sinks is None else 1.0)).all()
    for name in ("entropy", "max_weight", "top_weights", "sink_share", "local_share"):
        assert (getattr(stats, name)[row] == 0.0).all(), name
    assert (stats.top_keys[row] == -1).all()


def test_the_distance_bins_are_log_spaced_around_the_diagonal():
    assert distance_bins((3, 4)).tolist() == [[-7, -4], [-3, -2], [-1, -1], [0, 0], [1, 1], [2, 3], [4, 7]]


@pytest.mark.parametrize("engine", ENGINES)
def test_no_array_of_a_sixteenth_of_the_scores_is_ever_allocated(engine):
    """float64 at L = S = 4096 with the engine's own blocks: L·S·8/16 = 8 MiB, against
    O(L·top_k) results of 0.7 MiB and blocks of 512 × 512 (2 MiB). (The compiled pass's
    work arrays are made in Python, so traced; its kernels allocate nothing larger than a row.)"""
    n = 4096
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((1, n, 4)), rng.standard_normal((1, n, 4))
    attention_statistics(q[:, :8], k[:, :8], engine=engine)  # compiled (or loaded) before tracing
    tracemalloc.start()
    try:
        attention_statistics(q, k, num_threads=1, engine=engine)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < n * n * 8 / 16, f"{peak / 2**20:.1f} MiB"


@pytest.mark.parametrize(("keywords", "name"), [({"top_k": 0}, "top_k"), ({"sink_keys": -1}, "sink_keys"),
                                                ({"local_keys": 0}, "local_keys")])  # fmt: skip
def test_counts_below_one_are_refused(keywords, name):
    q, k, _ = inputs(np.float64)
    with pytest.raises(al.ArgumentError, match=name):
        attention_statistics(q, k, **keywords)


@pytest.mark.parametrize("engine", ["naive", "fast", 3])
def test_an_engine_that_does_not_work_by_blocks_is_refused(engine):
    q, k, _ = inputs(np.float64)
    with pytest.raises(al.ArgumentError, match="engine"):
        attention_statistics(q, k, engine=engine)


def test_rules_and_keywords_together_are_refused():
    q, k, _ = inputs(np.float64)
    with pytest.raises(al.ArgumentError, match="rules"):
        attention_statistics(q, k, is_causal=True, rules=Rules(is_causal=True))


def test_a_variant_no_rule_names_is_refused():
    q, k, _ = inputs(np.float64)
    with pytest.raises(al.ArgumentError, match="is_casual"):
        attention_statistics(q, k, is_casual=True)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_same_bits_for_any_thread_count(engine, monkeypatch):
    use_small_blocks(monkeypatch, 32, 16, 24)
    q, k, rng = inputs(np.float32)
    keywords = {"is_causal": True, "window": (25, None), "sinks": rng.standard_normal(H), "engine": engine}
    one, two = (attention_statistics(q, k, num_threads=threads, **keywords) for threads in (1, 2))
    for name in ("lse", "entropy", "top_keys", "top_weights", "local_share", "received", "distance"):
        assert np.array_equal(getattr(one, name), getattr(two, name)), name


ROW_CASES = [case for case in CASES if "key-lengths" not in case]  # attention_row takes no key lengths


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", ROW_CASES)
def test_one_rows_weights_match_the_dense_oracles_row(case, dtype, monkeypatch):
    use_small_blocks(monkeypatch, 32, 16, 24)  # a row over several blocks of keys
    keywords = case_keywords(case, dtype, np.random.default_rng(1))
    keywords.pop("key_lengths", None)  # "everything"'s: attention_row takes none
    q, k, _ = inputs(dtype, gqa=keywords.get("enable_gqa", False))
    P = oracle(q, k, **keywords)[1]  # (B, H, L, S)
    tolerance = 1e-12 if dtype == np.float64 else 1e-6
    if "length_scale" in keywords:
        rules = {
            name: keywords.pop(name) for name in list(keywords) if name in Rules().values() or name == "length_scale"
        }
        keywords["rules"] = Rules.of(**rules)
    for row in (0, 11, 37, L - 1):
        got = attention_row(q, k, row, **keywords)
        assert got.shape == (B, H, S) and got.dtype == dtype
        np.testing.assert_allclose(got, P[:, :, row], rtol=0, atol=tolerance, err_msg=f"row {row}")


@pytest.mark.parametrize("row", [-1, L, 2.0])
def test_a_row_outside_the_queries_is_refused(row):
    q, k, _ = inputs(np.float64)
    with pytest.raises(ValueError, match=rf"^row: expected a query index in 0..{L - 1}, got"):
        attention_row(q, k, row)
