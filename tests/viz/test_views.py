"""The page's views beyond a trace (viz._views): their data and refusals, checked without
a browser (tests/viz/test_views_browser.py opens them in one)."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest

import attnlab as al
from attnlab.viz._views import Views, align_tokens, check_ablation, views_data

A = "小明是个运动达人，小红是个音乐迷，他平时很爱打篮球"
B = "小明是个运动达人，小红是个音乐迷，她平时很爱弹钢琴"


def views_of(page: str) -> dict | None:
    block = re.search(r'<script id="attnlab-views" type="application/json">(.*?)</script>', page, re.S)
    assert block is not None
    return json.loads(block.group(1))


def test_alignment_is_a_longest_common_subsequence_with_equal_gaps_paired():
    # worked by hand: a b c d against a x c d (one substitution) pairs every position
    assert align_tokens(list("abcd"), list("axcd")) == [(0, 0), (1, 1), (2, 2), (3, 3)]
    # an insertion: a b c against a b y c; the gap (0 tokens against 1) is left out
    assert align_tokens(list("abc"), list("abyc")) == [(0, 0), (1, 1), (2, 3)]
    # gaps of unequal length (2 against 1) between b and e are left out; equal ones are paired
    assert align_tokens(list("bxye"), list("bze")) == [(0, 0), (3, 2)]
    assert align_tokens(list("ab"), list("cd")) == [(0, 0), (1, 1)]  # nothing in common, one length
    assert align_tokens([], list("ab")) == []


def test_two_texts_page_carries_both_weights_and_the_aligned_pronouns(coref):
    first, second = coref.trace(A), coref.trace(B)
    data = views_of(al.view((first, second)))
    assert data is not None and data["generation"] is None and data["ablation"] is None
    pair = data["pair"]
    assert pair["texts"][0]["tokens"] == first.tokens and pair["texts"][1]["tokens"] == second.tokens
    pronoun = first.tokens.index("他")
    assert [pronoun, second.tokens.index("她")] in pair["aligned"]  # substituted: paired, same position
    assert len(pair["aligned"]) == len(first.tokens)  # one length, substitutions only: every position
    layer = next(x for x in pair["texts"][1]["layers"] if x["index"] == 1)
    L = len(second.tokens)
    weights = np.frombuffer(base64.b64decode(layer["weights"]), "<f4").reshape(4, L, L)
    np.testing.assert_array_equal(weights, second.layers[1].weights.astype(np.float32))


def test_a_pair_is_refused_unless_two_model_traces_of_one_model_and_the_same_layers(coref):
    first = coref.trace(A)
    with pytest.raises(TypeError, match="trace: expected a trace, or a pair of two ModelTraces"):
        al.view((first,))
    with pytest.raises(TypeError, match="pair of two ModelTraces"):
        al.view((first, al.SelfAttention(3, 2).trace(np.eye(3))))
    with pytest.raises(ValueError, match="two traces of one model and the same layers"):
        al.view((first, coref.trace(B, layers=1)))


def test_generation_data_is_the_recorded_rows_and_must_match_the_traces_tokens(coref):
    from attnlab.trace import GenerationTrace

    trace = coref.trace("小明很高兴")
    P, N = 5, 2  # a hand-made record of the 7 tokens, 2 of them generated: rows (H, N, P + N − 1)
    rows = np.zeros((4, N, P + N - 1))
    rows[:, 0, :5] = [0.5, 0.25, 0.125, 0.0625, 0.0625]
    rows[:, 1, :6] = 0.25
    generation = GenerationTrace("m", trace.ids, trace.tokens, P, {0: rows})
    data = views_of(al.view(trace, generation=generation))["generation"]
    assert data["prompt"] == 5 and data["tokens"] == trace.tokens
    decoded = np.frombuffer(base64.b64decode(data["layers"][0]["weights"]), "<f4").reshape(4, N, P + N - 1)
    assert decoded[2, 0].tolist() == [0.5, 0.25, 0.125, 0.0625, 0.0625, 0.0]
    other = GenerationTrace("m", [0, 1, 2, 3], ["a", "b", "c", "d"], 2, {0: np.zeros((4, 2, 3))})
    with pytest.raises(
        ValueError, match=r"generation: expected the generation whose tokens \(or prompt\) the trace is over"
    ):
        al.view(trace, generation=other)
    with pytest.raises(TypeError, match=r"generation: expected an attnlab\.models\.GenerationTrace"):
        al.view(trace, generation={"ids": []})
    with pytest.raises(ValueError, match=r"weights: expected \(H, 2, 3\) weights per layer"):
        GenerationTrace("m", [0, 1, 2, 3], ["a", "b", "c", "d"], 2, {0: np.zeros((4, 2, 4))})


def test_rollout_and_flow_are_carried_exact_and_checked_for_shape(coref):
    trace = coref.trace("小明很高兴")
    L = len(trace.tokens)
    rollout = np.full((2, L, L), 1 / L)
    rollout[1, 3, 2] = 0.25
    data = views_of(al.view(trace, rollout=rollout, flow=rollout * 2))["flows"]
    assert data["layers"] == 2 and data["tokens"] == trace.tokens
    decoded = np.frombuffer(base64.b64decode(data["rollout"]), "<f8").reshape(2, L, L)
    assert decoded[1, 3, 2] == 0.25 and decoded[0, 0, 0] == 1 / L  # float64: exact
    with pytest.raises(ValueError, match=rf"rollout: expected finite \(layers, {L}, {L}\) numbers"):
        al.view(trace, rollout=np.zeros((2, L, L + 1)))
    with pytest.raises(ValueError, match="flow: expected as many layers as the rollout"):
        al.view(trace, rollout=rollout, flow=rollout[:1])
    with pytest.raises(ValueError, match="rollout: expected finite"):
        al.view(trace, rollout=np.full((2, L, L), np.nan))


def test_an_ablation_is_checked_and_names_its_metric_in_the_pages_words(coref):
    trace = coref.trace("小明很高兴")
    effect = [[0.5, -0.25, None, 0.0], [0.125, float("nan"), 1.0, -1.0]]
    result = check_ablation({"effect": effect, "metric": "logprob", "target": "明", "mode": "zero", "x": 1}, trace)
    assert result == {
        "effect": [[0.5, -0.25, None, 0.0], [0.125, None, 1.0, -1.0]], "metric": "Δ log p(target)", "target": "明",
        "mode": "zero",
    }  # fmt: skip
    page = al.view_ablation(trace, {"effect": effect, "metric": "KL", "target": None, "mode": "mean"})
    assert views_of(page)["ablation"]["metric"] == "KL"
    good = {"effect": effect, "metric": "KL", "target": None, "mode": "zero"}
    for change, message in (
        ({"effect": effect[:1]}, r"effect: 2 layers × 4 heads of floats, got a list of 1 rows"),
        ({"effect": [row[:3] for row in effect]}, "effect: 2 layers × 4 heads"),
        ({"effect": [[float("inf")] * 4] * 2}, "effect: finite floats"),
        ({"effect": [["a"] * 4] * 2}, "effect: finite floats"),
        ({"metric": "accuracy"}, "metric 'Δ log p.target.' or 'KL'"),
        ({"mode": "random"}, "mode one of zero, mean, patch"),
    ):
        with pytest.raises(ValueError, match=f"ablation: expected {message}"):
            al.view_ablation(trace, {**good, **change})
    with pytest.raises(TypeError, match="ablation: expected a dict"):
        al.view_ablation(trace, [1, 2])
    with pytest.raises(TypeError, match="ablation: expected target a string or None"):
        al.view_ablation(trace, {**good, "target": 3})
    with pytest.raises(TypeError, match=r"trace: expected an attnlab\.models\.ModelTrace"):
        al.view_ablation(al.SelfAttention(3, 2).trace(np.eye(3)), good)


def test_a_page_without_views_has_a_null_block_and_views_too_large_are_refused(coref, monkeypatch):
    trace = coref.trace("小明很高兴")
    assert views_of(al.view(trace)) is None
    assert views_data(trace, Views()) is None
    monkeypatch.setattr("attnlab.viz._views.MAX_VIEWS_BYTES", 1000)
    with pytest.raises(ValueError, match=r"views: expected at most 0.001 MB of the views' data"):
        al.view((trace, trace))
