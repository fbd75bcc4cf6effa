"""attnlab.analysis.rollout and .flow. Oracles: a 2-layer, 3-token example whose residual
matrices, rollout and max-flows are worked out by hand below, and a floating-point linear
programme (SciPy's HiGHS) for the max-flow's precision on random weights; on a model's
trace, the rollout written out here over transformers' own attention weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.checkpoints import tiny_model

from attnlab import ArgumentError, ArgumentTypeError, models
from attnlab.analysis import FLOW_SCALE, flow, residual_attention, rollout
from attnlab.trace import ModelTrace, Trace
from oracles import requires

pytest.importorskip("scipy")


def _trace(weights: np.ndarray) -> Trace:
    """A trace holding these weights (H, L, S); the other arrays are placeholders."""
    H, L, S = weights.shape
    zeros = np.zeros((H, L, 1))
    return Trace(
        np.zeros((L, 1)), zeros, np.zeros((H, S, 1)), np.zeros((H, S, 1)), np.zeros((H, L, S)), 1.0,
        np.log(np.where(weights > 0, weights, 1e-300)), weights, zeros,
    )  # fmt: skip


def _model_trace(layers: list[np.ndarray], **fields: object) -> ModelTrace:
    L = layers[0].shape[-2]
    traces = {i: _trace(w) for i, w in enumerate(layers)}
    return ModelTrace("hand", list(range(L)), ["a", "b", "c"][:L], traces, len(layers), layers[0].shape[0], **fields)


# Layer 0: two heads whose mean is A0; layer 1: both heads A1.
A0 = np.array([[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]])
HEAD0 = np.array([[1.0, 0, 0], [1.0, 0, 0], [0.4, 0.6, 0]])
HEAD1 = np.eye(3)
A1 = np.array([[1.0, 0, 0], [0.8, 0.2, 0], [0.6, 0.2, 0.2]])
HAND = _model_trace([np.stack([HEAD0, HEAD1]), np.stack([A1, A1])])

# Â = 0.5·I + 0.5·A, by hand
R0 = np.array([[1.0, 0, 0], [0.25, 0.75, 0], [0.1, 0.15, 0.75]])
R1 = np.array([[1.0, 0, 0], [0.4, 0.6, 0], [0.3, 0.1, 0.6]])


def test_the_residual_matrices_are_half_identity_half_the_head_average() -> None:
    np.testing.assert_allclose(residual_attention(HAND), np.stack([R0, R1]), atol=1e-15)


def test_rollout_multiplies_the_residual_matrices_from_the_first_layer_up() -> None:
    # R1 · R0, row by row: row 1 = 0.4·[1, 0, 0] + 0.6·[0.25, 0.75, 0];
    # row 2 = 0.3·[1, 0, 0] + 0.1·[0.25, 0.75, 0] + 0.6·[0.1, 0.15, 0.75]
    top = np.array([[1.0, 0, 0], [0.55, 0.45, 0], [0.385, 0.165, 0.45]])
    got = rollout(HAND)
    assert got.shape == (2, 3, 3)
    np.testing.assert_allclose(got, np.stack([R0, top]), atol=1e-15)
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, atol=1e-15)


def test_chosen_heads_are_averaged_alone() -> None:
    # head 1 of layer 0 is the identity, so Â_0 = I and the rollout after layer 1 is Â_1
    np.testing.assert_allclose(rollout(HAND, heads=[1]), np.stack([np.eye(3), R1]), atol=1e-15)
    # head 0 alone: Â_0 = 0.5·I + 0.5·HEAD0
    np.testing.assert_allclose(rollout(HAND, heads=[0])[0], [[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]], atol=1e-15)


def test_rows_that_do_not_sum_to_one_are_renormalised() -> None:
    # a sink took 0.5 of row 1's weight: 0.5·I + 0.5·A has row 1 = [0.1, 0.65, 0] (sum 0.75)
    sunk = np.array([[[1.0, 0, 0], [0.2, 0.3, 0], [0.2, 0.3, 0.5]]])
    got = residual_attention(_model_trace([sunk]))[0]
    np.testing.assert_allclose(got[1], [0.1 / 0.75, 0.65 / 0.75, 0], atol=1e-15)


def test_flow_is_the_max_flow_worked_out_by_hand() -> None:
    # Level 0: inputs x0..x2; level 1: a0..a2; level 2: b0..b2; capacity x_j -> a_i = R0[i, j],
    # a_j -> b_i = R1[i, j]. After layer 0 the flow is the one edge: R0 itself. After layer 1:
    # b1 from x0: x0→a0→b1 (0.4) + x0→a1→b1 (min 0.25, 0.6) = 0.65, cut {a0→b1, x0→a1};
    # b1 from x1: x1→a1→b1 = min(0.75, 0.6) = 0.6;
    # b2 from x0: x0→a0→b2 (0.3) + x0→a1→b2 (min 0.25, 0.1) + x0→a2→b2 (min 0.1, 0.6) = 0.5;
    # b2 from x1: x1→a1→b2 (0.1) + x1→a2→b2 (0.15) = 0.25, cut {a1→b2, x1→a2};
    # b2 from x2: x2→a2→b2 = min(0.75, 0.6) = 0.6.
    top = np.array([[1.0, 0, 0], [0.65, 0.6, 0], [0.5, 0.25, 0.6]])
    got = flow(HAND)
    assert got.shape == (2, 3, 3)
    np.testing.assert_allclose(got, np.stack([R0, top]), atol=2 / FLOW_SCALE)


def _lp_max_flow(residual: np.ndarray, source: int, sink: tuple[int, int]) -> float:
    """The max flow by linear programming in floating point: maximise the flow out of the
    source subject to each edge's capacity and conservation at every inner node."""
    from scipy.optimize import linprog

    layers, L, _ = residual.shape
    edges = [(lv, j, i) for lv in range(layers) for i in range(L) for j in range(L) if residual[lv, i, j] > 0]
    top_level, top = sink
    nodes = [(lv, p) for lv in range(top_level + 2) for p in range(L)]
    index = {node: n for n, node in enumerate(nodes)}
    balance = np.zeros((len(nodes), len(edges)))
    for e, (lv, j, i) in enumerate(edges):
        balance[index[(lv, j)], e] -= 1
        if (lv + 1, i) in index:
            balance[index[(lv + 1, i)], e] += 1
    inner = [n for node, n in index.items() if node not in ((0, source), (top_level + 1, top))]
    out_of_source = np.array([1.0 if (lv, j) == (0, source) else 0.0 for lv, j, _ in edges])
    bounds = [(0, residual[lv, i, j]) for lv, j, i in edges]
    result = linprog(-out_of_source, A_eq=balance[inner], b_eq=np.zeros(len(inner)), bounds=bounds, method="highs")
    assert result.status == 0
    return -result.fun


def test_flow_agrees_with_a_floating_point_linear_programme_to_1e_6() -> None:
    rng = np.random.default_rng(7)
    L = 5
    layers = []
    for _ in range(3):
        logits = rng.normal(size=(2, L, L)) * 2
        logits[:, np.triu_indices(L, 1)[0], np.triu_indices(L, 1)[1]] = -np.inf  # causal
        w = np.exp(logits - logits.max(-1, keepdims=True))
        layers.append(w / w.sum(-1, keepdims=True))
    trace = _model_trace(layers)
    trace.tokens = trace.ids = list(range(L))
    residual = residual_attention(trace)
    got = flow(trace)
    for layer, i, j in [(0, 3, 1), (1, 4, 0), (2, 4, 2), (2, 2, 2), (2, 4, 4), (1, 3, 3)]:
        assert abs(got[layer, i, j] - _lp_max_flow(residual[: layer + 1], j, (layer, i))) < 1e-6
    assert np.all(got <= 1 + 1e-6) and np.all(got[:, np.triu_indices(L, 1)[0], np.triu_indices(L, 1)[1]] == 0)


def test_a_trace_with_a_layer_missing_is_refused() -> None:
    partial = _model_trace([np.stack([A1, A1])])
    partial.num_layers = 2
    with pytest.raises(ArgumentError, match=r"trace: expected every layer traced.*missing \[1\]"):
        rollout(partial)


def test_heads_out_of_range_or_not_integers_are_refused() -> None:
    with pytest.raises(ArgumentError, match=r"heads: expected distinct head indices in 0\.\.1"):
        rollout(HAND, heads=[2])
    with pytest.raises(ArgumentError, match="heads"):
        flow(HAND, heads=[])
    with pytest.raises(ArgumentTypeError, match="heads"):
        rollout(HAND, heads=["0"])


def test_cross_attention_is_refused() -> None:
    cross = _model_trace([np.full((2, 3, 4), 0.25)])
    with pytest.raises(ArgumentError, match=r"self-attention weights \(H, L, L\).*\(2, 3, 4\)"):
        rollout(cross)
    mixed = _model_trace([np.stack([A1, A1]), np.stack([A1, A1])])
    mixed.kinds = {0: "encoder", 1: "cross"}  # an encoder-decoder model's trace names its entries' kinds
    with pytest.raises(ArgumentError, match="entries of kind cross, encoder"):
        flow(mixed)


def test_not_a_model_trace_is_refused() -> None:
    with pytest.raises(ArgumentTypeError, match="trace: expected a model's trace"):
        rollout(HAND.layers[0])


@requires("transformers")
def test_the_rollout_of_a_model_s_trace_is_that_of_transformers_weights(tmp_path: Path) -> None:
    import torch

    model = tiny_model("gpt2", initializer_range=0.3)
    model.save_pretrained(tmp_path)
    ids = [5, 17, 42, 8, 99, 3, 250]
    model.set_attn_implementation("eager")
    with torch.no_grad():
        attentions = [a[0].double().numpy() for a in model(torch.tensor([ids]), output_attentions=True).attentions]
    expected, rolled = [], np.eye(len(ids))
    for weights in attentions:  # (H, L, L): Â = ½I + ½·mean over heads, then R_l = Â_l·R_{l−1}
        residual = 0.5 * np.eye(len(ids)) + 0.5 * weights[[1, 3]].mean(axis=0)
        rolled = residual / residual.sum(-1, keepdims=True) @ rolled
        expected.append(rolled)
    trace = models.load(tmp_path).trace(np.array(ids))
    np.testing.assert_allclose(rollout(trace, heads=[1, 3]), np.stack(expected), atol=1e-5)  # float32 models


@pytest.mark.parametrize(("layers", "tokens"), [(6, 64), (30, 28), (2, 110), (1, 156)])
def test_the_flow_length_limit_is_the_most_tokens_within_the_budget_of_max_flows(layers: int, tokens: int) -> None:
    """By hand: ⌊√(6·64² / layers)⌋, so that layers·L² ≤ 6·64² < layers·(L + 1)²."""
    from attnlab.analysis._rollout import flow_length_limit

    assert flow_length_limit(layers) == tokens
    assert layers * tokens**2 <= 6 * 64**2 < layers * (tokens + 1) ** 2
