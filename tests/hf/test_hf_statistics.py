"""Runner.statistics and Runner.row on the transformers backend, against the model's own dense
weights in a trace of the same ids (tests/oracles.py: assert_model_statistics): Llama (GQA),
Mistral (a sliding window in the mask), Gemma 2 (softcap, sliding and full layers) and
gpt-oss (a sink per head), tiny and random (hf_zoo)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hf_zoo import ARCHS  # noqa: E402

import attnlab  # noqa: E402
from oracles import LOCAL_KEYS, SINK_KEYS, TOP_K, assert_model_statistics, assert_rows  # noqa: E402

IDS = [5, 17, 33, 2, 90, 12, 7, 25, 64, 11, 3, 48]  # 12 tokens: past every window


@pytest.mark.parametrize("name", ["llama", "mistral", "gemma2", "gpt_oss"])
def test_the_statistics_are_those_of_the_models_dense_weights(name):
    runner = attnlab.load_model(ARCHS[name].build())
    stats = runner.statistics(IDS, top_k=TOP_K, sink_keys=SINK_KEYS, local_keys=LOCAL_KEYS)
    trace = runner.trace(IDS)
    assert_model_statistics(stats, trace, causal=True)
    assert stats.architecture == name and stats.num_key_value_heads == 2
    if name == "gpt_oss":  # the sinks take a share of every row
        assert (stats.statistics.sinks_weight > 0).all()
    assert_rows(runner, IDS, trace, [(0, 0, 0), (0, 3, 11), (1, 2, 6)])


def test_a_sliding_mask_is_read_as_the_causal_band_with_its_window():
    from attnlab.engine.variants import Rules
    from attnlab.hf._statistics import _banded

    L, w = 6, 3
    behind = np.subtract.outer(np.arange(L), np.arange(L))  # i − j
    window = ((behind >= 0) & (behind < w))[None, None]  # (1, 1, L, L)
    mask, rules = _banded(window, Rules())
    assert mask is None and (rules.is_causal, rules.causal_alignment, rules.window) == (True, "bottom_right", (2, 0))
    mask, rules = _banded((behind >= 0)[None, None], Rules())
    assert mask is None and rules.is_causal and rules.window is None
    padded = (behind >= 0) & (np.arange(L) >= 2)  # causal with two padding keys: the mask stays
    mask, rules = _banded(padded, Rules())
    assert mask is padded and rules.is_causal
    ahead = np.ones((L, L), bool)  # not causal: unchanged
    mask, rules = _banded(ahead, Rules())
    assert mask is ahead and not rules.is_causal and rules.window is None


def test_the_transformers_backend_refuses_truncation_and_chat():
    runner = attnlab.load_model(ARCHS["llama"].build())
    with pytest.raises(attnlab.ArgumentError, match=r"^chat: on attnlab's NumPy models"):
        runner.statistics(IDS, chat=True)
