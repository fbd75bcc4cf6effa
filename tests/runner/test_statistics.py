"""Runner.statistics and Runner.row on both backends, against an oracle that is not the code
under test: each statistic computed here from the model's own dense weights and scores in a
trace of the same text (Runner.trace: the naive engine's (L, L) weights), at small L, for
builtin:coref (BERT, not causal), tiny random Llama (GQA), Qwen2 and Mistral (a sliding
window of 4 keys) checkpoints on attnlab's NumPy models, and on transformers.

The oracle and its tolerances: tests/oracles.py (assert_model_statistics)."""

from __future__ import annotations

import numpy as np
import pytest

import attnlab
from attnlab import ArgumentError
from attnlab.trace import ModelStatistics
from checkpoints import SENTENCE, tiny_model
from oracles import LOCAL_KEYS, SINK_KEYS, TOP_K, assert_model_statistics, assert_rows

IDS = [5, 17, 33, 2, 99, 120, 7, 250, 64, 11, 3, 48]  # 12 tokens: past Mistral's window of 4


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
    assert_model_statistics(stats, trace, causal=False)
    assert stats.model == "builtin:coref" and stats.special == trace.special
    assert_rows(runner, SENTENCE, trace, [(0, 0, 0), (1, 1, 9), (trace.num_layers - 1, 0, len(trace.tokens) - 1)])


@pytest.mark.parametrize("kind", ["llama", "qwen2", "mistral"])
def test_tiny_causal_checkpoints_match_their_dense_weights_gqa_and_window(checkpoints, kind):
    runner = attnlab.load_model(str(checkpoints[kind]), backend="numpy")
    stats = runner.statistics(IDS, top_k=TOP_K, sink_keys=SINK_KEYS, local_keys=LOCAL_KEYS)
    trace = runner.trace(IDS)
    assert_model_statistics(stats, trace, causal=True)
    assert stats.num_key_value_heads == 2 and stats.architecture == kind
    if kind == "mistral":  # the window: no weight beyond 4 keys behind
        assert (stats.statistics.distance[..., stats.statistics.distance_bins[:, 0] >= 4] == 0).all()
    assert_rows(runner, IDS, trace, [(0, 0, 0), (0, 3, 11), (1, 2, 6)])


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
    [
        ((9, 0, 0), r"^layer: expected an index in 0\.\.\d+, got 9$"),
        ((0, 9, 0), r"^head: expected an index in 0\.\.\d+, got 9$"),
        ((0, 0, 99), r"^query: expected an index in 0\.\.\d+, got 99$"),
    ],
)  # fmt: skip
def test_a_row_out_of_range_is_refused_naming_it(cell, message):
    with pytest.raises(ArgumentError, match=message):
        attnlab.load_model("builtin:coref").row(SENTENCE, *cell)


def test_truncation_cuts_a_long_text_and_says_so_and_check_stops_the_forward():
    runner = attnlab.load_model("builtin:coref")
    long = SENTENCE * 10  # past coref's positions
    with pytest.raises(ArgumentError, match=r"truncation=True"):
        runner.statistics(long)
    stats = runner.statistics(long, truncation=True)
    assert len(stats.tokens) == runner.positions and any("cut" in note for note in stats.notes)
    calls = []

    def check():
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.statistics(SENTENCE, check=check)
    assert len(calls) == 2  # before layer 0, then before layer 1: stopped there


@pytest.mark.slow
def test_smollm2_on_the_long_text_matches_its_dense_weights_in_its_last_layer():
    """A real model (SmolLM2-135M, GGUF, 9 heads over 3 key/value heads) on 512 tokens of the
    long real text: its last layer's statistics against that layer's dense weights."""
    from types import SimpleNamespace

    from attnlab.runner._long_text import long_text_ids
    from checkpoints import smollm2_gguf

    runner = attnlab.load_model(str(smollm2_gguf()))
    ids = long_text_ids(runner, 512)
    stats = runner.statistics(ids, top_k=TOP_K, sink_keys=SINK_KEYS, local_keys=LOCAL_KEYS)
    last = runner.layers - 1
    trace = runner.trace(ids, [last])
    one = SimpleNamespace(
        num_layers=1, num_heads=trace.num_heads, layers={0: trace.layers[last]}, tokens=trace.tokens, ids=trace.ids
    )
    fields = {name: getattr(stats, name) for name in ("model", "ids", "tokens")}
    assert_model_statistics(ModelStatistics(**fields, statistics=stats.statistics[last : last + 1]), one, causal=True)
