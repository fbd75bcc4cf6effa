"""Runner.statistics and Runner.row on both backends, against an oracle that is not the code
under test: each statistic computed here from the model's own dense weights and scores in a
trace of the same text (Runner.trace: the naive engine's (L, L) weights), at small L, for
builtin:coref (BERT, not causal), tiny random Llama (GQA), Qwen2 and Mistral (a sliding
window of 4 keys) checkpoints on attnlab's NumPy models, and on transformers.

Tolerances, float32: 2e-6 of each statistic's scale (log L for an entropy, 1 for a weight
or a share, L for the attention a key receives and a head's weight by distance, max(1, |lse|)
for an lse)."""

from __future__ import annotations

import numpy as np
import pytest

import attnlab
from attnlab import ArgumentError
from attnlab.trace import ModelStatistics
from checkpoints import SENTENCE, tiny_model

TOP_K, SINK_KEYS, LOCAL_KEYS = 3, 2, 3
TOLERANCE = 2e-6
IDS = [5, 17, 33, 2, 99, 120, 7, 250, 64, 11, 3, 48]  # 12 tokens: past Mistral's window of 4


def dense_statistics(trace, causal: bool) -> dict[str, np.ndarray]:
    """Every statistic of every layer (layers, H, …) in float64 from the trace's dense weights
    P (H, L, L) and scaled scores Z (−∞ where a key is ruled out), as the engine's docstring
    defines them: ties in the top-k to the lower key; the local keys the last LOCAL_KEYS a
    query sees (j <= i when causal, else every key); d = i − j in bins 0, ±[2^(k−1), 2^k − 1]."""
    out: dict[str, list] = {}
    for index in range(trace.num_layers):
        layer = trace.layers[index]
        P, Z = layer.weights.astype(np.float64), layer.scaled_scores.astype(np.float64)
        H, L, S = P.shape
        seen = np.isfinite(Z)
        i, j = np.arange(L)[:, None], np.arange(S)[None, :]
        stop = i + 1 if causal else np.full((L, 1), S)
        candidates = np.where(seen, P, -1.0)  # a key the row may not attend: never among its top keys
        order = np.argsort(-candidates, axis=-1, kind="stable")[..., :TOP_K]  # ties: the lower key
        ranked = np.take_along_axis(candidates, order, axis=-1)
        K = (L + S).bit_length()
        d = i - j
        bin_of = np.sign(d) * np.array([[int(abs(x)).bit_length() for x in row] for row in d])  # −K..K
        values = {
            "lse": np.log(np.where(seen, np.exp(np.where(seen, Z, 0.0)), 0.0).sum(axis=-1)),
            "entropy": -np.where(P > 0, P * np.log(np.where(P > 0, P, 1.0)), 0.0).sum(axis=-1),
            "max_weight": P.max(axis=-1),
            "top_keys": np.where(ranked < 0, -1, order),  # −1 past the keys the row may attend
            "top_weights": np.maximum(ranked, 0.0),
            "sink_share": P[..., :SINK_KEYS].sum(axis=-1),
            "local_share": np.where((j >= stop - LOCAL_KEYS) & (j < stop), P, 0.0).sum(axis=-1),
            "sinks_weight": np.zeros((H, L)),
            "received": P.sum(axis=-2),
            "distance": np.stack([np.where(bin_of == b, P, 0.0).sum(axis=(-2, -1)) for b in range(-K, K + 1)], -1),
        }
        for name, value in values.items():
            out.setdefault(name, []).append(value)
    return {name: np.stack(value) for name, value in out.items()}


def scale_of(name: str, want: np.ndarray, length: int) -> np.ndarray | float:
    if name == "entropy":
        return np.log(length)
    if name in ("received", "distance"):
        return length
    if name == "lse":
        return np.maximum(1.0, np.abs(want))
    return 1.0


def assert_matches(stats: ModelStatistics, trace, causal: bool) -> None:
    expected = dense_statistics(trace, causal)
    got = stats.statistics
    L = len(stats.tokens)
    assert stats.tokens == trace.tokens and stats.ids == trace.ids
    assert (stats.num_layers, stats.num_heads) == (trace.num_layers, trace.num_heads)
    for name, want in expected.items():
        have = getattr(got, name)
        assert have.shape == want.shape, name
        if name == "top_keys":
            continue
        error = np.abs(have.astype(np.float64) - want) / scale_of(name, want, L)
        assert error.max() <= TOLERANCE, f"{name}: {error.max()}"
    # the keys reported are the oracle's where no two weights are within the tolerance (float32 near-ties)
    weights = np.stack([trace.layers[i].weights for i in range(trace.num_layers)]).astype(np.float64)
    reported = np.where(got.top_keys < 0, 0.0, np.take_along_axis(weights, np.maximum(got.top_keys, 0), axis=-1))
    assert np.abs(reported - got.top_weights).max() <= TOLERANCE  # each key's own weight
    assert np.array_equal(got.top_keys < 0, expected["top_keys"] < 0) and (np.diff(got.top_weights, axis=-1) <= 0).all()
    gaps = np.diff(np.sort(weights, axis=-1), axis=-1)
    clear = (np.where(gaps > 0, gaps, np.inf).min(axis=-1) > 10 * TOLERANCE)[..., None]  # (layers, H, L, 1)
    assert np.array_equal(np.where(clear, got.top_keys, 0), np.where(clear, expected["top_keys"], 0))


def assert_rows(runner, text, trace, cells) -> None:
    for layer, head, query in cells:
        row = runner.row(text, layer, head, query)
        want = trace.layers[layer].weights[head, query].astype(np.float64)
        assert row.shape == want.shape and row.dtype == np.float64
        np.testing.assert_allclose(row, want, rtol=0, atol=1e-6, err_msg=f"layer {layer}, head {head}, query {query}")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Tiny random checkpoints: Llama (2 key/value heads of 4), Qwen2, Mistral (window 4)."""
    saved = {}
    for kind in ("llama", "qwen2", "mistral"):
        path = tmp_path_factory.mktemp(kind)
        tiny_model(kind).save_pretrained(path)
        saved[kind] = path
    return saved


def test_builtin_coref_not_causal_matches_its_dense_weights():
    runner = attnlab.load_model("builtin:coref")
    stats = runner.statistics(SENTENCE, top_k=TOP_K, sink_keys=SINK_KEYS, local_keys=LOCAL_KEYS)
    trace = runner.trace(SENTENCE)
    assert_matches(stats, trace, causal=False)
    assert stats.model == "builtin:coref" and stats.special == trace.special
    assert_rows(runner, SENTENCE, trace, [(0, 0, 0), (1, 1, 9), (trace.num_layers - 1, 0, len(trace.tokens) - 1)])


@pytest.mark.parametrize("kind", ["llama", "qwen2", "mistral"])
def test_tiny_causal_checkpoints_match_their_dense_weights_gqa_and_window(checkpoints, kind):
    runner = attnlab.load_model(str(checkpoints[kind]), backend="numpy")
    stats = runner.statistics(IDS, top_k=TOP_K, sink_keys=SINK_KEYS, local_keys=LOCAL_KEYS)
    trace = runner.trace(IDS)
    assert_matches(stats, trace, causal=True)
    assert stats.num_key_value_heads == 2 and stats.architecture == kind
    if kind == "mistral":  # the window: no weight beyond 4 keys behind
        assert (stats.statistics.distance[..., stats.statistics.distance_bins[:, 0] >= 4] == 0).all()
    assert_rows(runner, IDS, trace, [(0, 0, 0), (0, 3, 11), (1, 2, 6)])


@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_the_transformers_backend_matches_its_dense_weights(kind):
    model = tiny_model(kind)
    runner = attnlab.load_model(model)
    assert runner.backend == "transformers"
    stats = runner.statistics(IDS, top_k=TOP_K, sink_keys=SINK_KEYS, local_keys=LOCAL_KEYS)
    trace = runner.trace(IDS)
    assert_matches(stats, trace, causal=True)
    assert stats.architecture == kind and stats.num_key_value_heads == 2
    assert_rows(runner, IDS, trace, [(0, 0, 0), (1, 3, 11)])


def test_both_backends_agree_on_one_checkpoint(checkpoints):
    numpy_runner = attnlab.load_model(str(checkpoints["mistral"]), backend="numpy")
    transformers = pytest.importorskip("transformers")
    hf_runner = attnlab.load_model(transformers.AutoModelForCausalLM.from_pretrained(checkpoints["mistral"]))
    a, b = (r.statistics(IDS).statistics for r in (numpy_runner, hf_runner))
    np.testing.assert_allclose(a.entropy, b.entropy, atol=1e-5)
    np.testing.assert_allclose(a.received, b.received, atol=1e-4)


def test_the_statistics_read_back_from_json():
    stats = attnlab.load_model("builtin:coref").statistics(SENTENCE)
    back = ModelStatistics.from_json(stats.to_json())
    assert back.statistics.lse.tobytes() == stats.statistics.lse.tobytes() and back.tokens == stats.tokens


def test_no_layer_keeps_its_weights(monkeypatch):
    """The forward never asks the engine for the weights: no (L, L) matrix per layer."""
    from attnlab.models import _network

    asked = []
    real = _network.attention

    def spy(*args, need_weights=False, **kwargs):
        asked.append(need_weights)
        return real(*args, need_weights=need_weights, **kwargs)

    monkeypatch.setattr(_network, "attention", spy)
    runner = attnlab.load_model("builtin:coref")
    runner.statistics(SENTENCE)
    assert asked and not any(asked)


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"top_k": 0}, r"^top_k: expected"),
        ({"sink_keys": -1}, r"^sink_keys: expected"),
        ({"local_keys": 1.5}, r"^local_keys: expected"),
    ],
)
def test_counts_below_one_are_refused_before_any_forward(keywords, message):
    with pytest.raises((ArgumentError, TypeError), match=message):
        attnlab.load_model("builtin:coref").statistics(SENTENCE, **keywords)


@pytest.mark.parametrize(
    ("cell", "message"),
    [((9, 0, 0), r"^layer: expected an index in 0\.\.\d+, got 9$"), ((0, 9, 0), r"^head: expected an index in 0\.\.\d+, got 9$"),
     ((0, 0, 99), r"^query: expected an index in 0\.\.\d+, got 99$")],
)  # fmt: skip
def test_a_row_out_of_range_is_refused_naming_it(cell, message):
    with pytest.raises(ArgumentError, match=message):
        attnlab.load_model("builtin:coref").row(SENTENCE, *cell)
