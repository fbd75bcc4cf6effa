"""The ``length`` experiment: its statistics of the random layer against dense softmax weights
computed here, uniform weights' log n, 1/n and min(4, n)/n, the Gaussian scores' log n − 1/2,
and a report whose words come from its numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

import attnlab
from attnlab.experiments import _length
from attnlab.runner._long_text import long_text_ids
from checkpoints import smollm2_gguf


def dense_statistics(query: np.ndarray, key: np.ndarray, scale: float, s: float | None) -> dict[str, np.ndarray]:
    """Each causal row's entropy, largest weight and weight on the first 4 keys, from the
    (H, L, L) softmax weights written out here: row i's scores q_i·k_j·scale, times s·log(i + 1)."""
    length = query.shape[1]
    scores = np.einsum("hie,hje->hij", query, key) * scale  # (H, L, L)
    if s is not None:
        scores = scores * (s * np.log(np.arange(1, length + 1)))[:, None]
    scores = np.where(np.tril(np.ones((length, length), bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    logs = np.log(np.where(weights > 0, weights, 1.0))
    return {"entropy": -(weights * logs).sum(-1), "max_weight": weights.max(-1), "sink_share": weights[..., :4].sum(-1)}


def test_position_bins_are_powers_of_two_with_the_last_reaching_the_length():
    assert _length.position_bins(1) == [[1, 1]]
    assert _length.position_bins(96) == [[1, 1], [2, 3], [4, 7], [8, 15], [16, 31], [32, 63], [64, 96]]
    assert _length.position_bins(64)[-2:] == [[16, 31], [32, 64]]  # n = 64 alone joins the bin before
    assert _length.position_bins(8192)[-1] == [4096, 8192] and len(_length.position_bins(8192)) == 13


@pytest.mark.parametrize(("label", "scale", "s"), _length.LAYERS)
def test_the_random_layers_statistics_are_its_dense_softmax_weights(label, scale, s):
    query, key = _length.random_layer(96, 2, seed=3)
    assert query.shape == key.shape == (2, 96, _length.D_K)
    measured = _length.row_statistics(query, key, scale, s)
    expected = dense_statistics(query, key, 1 / math.sqrt(_length.D_K) if scale is None else scale, s)
    for name in _length.STATISTICS:
        np.testing.assert_allclose(measured[name], expected[name], rtol=0, atol=1e-12, err_msg=f"{label} {name}")
    # binned: the mean over both heads and the rows of each bin of n = i + 1, bins written out here
    bins = [(1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 63), (64, 96)]
    means = [expected["entropy"][:, first - 1 : last].mean() for first, last in bins]
    assert _length.binned(measured["entropy"], _length.position_bins(96)) == pytest.approx(means, abs=1e-12)


def test_equal_scores_give_uniform_weights_log_n_one_over_n_and_the_first_four_keys_share():
    length = 40
    query, key = np.zeros((1, length, 8)), np.random.default_rng(0).standard_normal((1, length, 8))
    measured = _length.row_statistics(query, key)
    n = np.arange(1, length + 1)
    np.testing.assert_allclose(measured["entropy"][0], np.log(n), atol=1e-12)
    np.testing.assert_allclose(measured["max_weight"][0], 1 / n, atol=1e-12)
    np.testing.assert_allclose(measured["sink_share"][0], np.minimum(4, n) / n, atol=1e-12)
    uniform = _length.uniform_curves(_length.position_bins(length))
    assert uniform["entropy"][-1] == pytest.approx(np.log(np.arange(32, 41)).mean())
    assert uniform["sink_share"][:3] == pytest.approx([1, 1, (1 + 4 / 5 + 4 / 6 + 4 / 7) / 4])  # n = 1, 2–3, 4–7


def test_the_plain_layers_long_rows_have_the_entropy_of_unit_variance_gaussian_scores():
    """Row i's scores q_i·k_j/√d_k are about N(0, 1), independent over j (X's rows are): for many
    keys Σ_j e^z ≈ n·e^(1/2) and the weights' mean score E_p[z] ≈ σ² = 1, so the entropy
    log Σ e^z − E_p[z] ≈ log n − 1/2 (a log-normal's moments)."""
    query, key = _length.random_layer(512, 4, seed=1)
    entropy = _length.row_statistics(query, key)["entropy"]
    n = np.arange(256, 513)
    assert entropy[:, 255:].mean() == pytest.approx(np.log(n).mean() - 0.5, abs=0.1)


def test_the_report_and_figure_come_from_the_measured_numbers(tmp_path):
    pytest.importorskip("matplotlib")
    measured = _length.measure(True, 0, length=256, heads=2, with_model=False)
    assert [first for first, _ in measured.bins] == [1, 2, 4, 8, 16, 32, 64, 128]
    plain, scaled, raw = (measured.layers[label] for label, _, _ in _length.LAYERS)
    # the article's claim at every length: ÷√d_k gives unit-variance scores (q, k: unit-variance entries,
    # so Var(q·k) = d_k = 64 before it); the sample's Wq, Wk make it 1 ± about 15 %
    assert measured.score_variance["q·k/√d_k"] == pytest.approx([1, 1], abs=0.2)  # at n = 16–31 and 128–256
    assert measured.score_variance["q·k"] == pytest.approx([_length.D_K] * 2, rel=0.2)
    # × s·log n: the variance times (s·log n)², log n about 3.1 and 5.2 in those bins
    low, high = measured.score_variance["q·k/√d_k × s·log n"]
    assert low == pytest.approx((3.1 / math.log(64)) ** 2, rel=0.3) and high == pytest.approx(
        (5.2 / math.log(64)) ** 2, rel=0.3
    )
    # at n = 64 the length-scaled scores are the plain ones: s·log 64 = 1
    assert _length.LAYERS[1][2] * math.log(64) == pytest.approx(1)
    assert raw["max_weight"][-1] > scaled["max_weight"][-1] > plain["max_weight"][-1]
    report = _length.report(measured)
    log_n = [np.log(np.arange(first, last + 1)).mean() for first, last in measured.bins]
    uniform_rise = log_n[-1] - log_n[4]  # from n = 16–31
    plain_rise = plain["entropy"][-1] - plain["entropy"][4]
    assert f"rises by {uniform_rise:.2f} nats" in report
    assert f"the entropy rises by {plain_rise:.2f} ({plain_rise / uniform_rise:.0%} of log n's rise)" in report
    assert f"from {plain['max_weight'][4]:.3g} to {plain['max_weight'][-1]:.3g}" in report
    diluted = plain_rise >= 0.8 * uniform_rise and plain["max_weight"][4] >= 4 * plain["max_weight"][-1]
    assert ("yet the weights dilute" in report) == diluted
    assert report.startswith("# length: ") and "**What it shows.**" in report and "**结论。**" in report
    assert "SmolLM2" not in report.split("**What it shows.**")[1]  # the model was not measured
    figures = _length.EXPERIMENT.figures(measured, tmp_path)
    assert figures == ["length.png"] and (tmp_path / "length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](length.png)" in report
    metrics = measured.metrics()
    assert set(metrics) == {"length", "heads", "bins", "score_variance", "last_bin", "curves"}  # no model
    assert (
        metrics["curves"]["q·k"]["entropy"] == raw["entropy"]
        and metrics["last_bin"]["q·k"]["entropy"] == raw["entropy"][-1]
    )


@pytest.mark.slow
def test_smollm2s_curves_are_its_traced_weights_binned():
    """SmolLM2's statistics over the first 64 tokens of Python's documentation, binned, against
    each layer's and head's dense (H, L, L) weights of the model's own trace, computed here."""
    runner = attnlab.load_model(smollm2_gguf())
    measured = _length.model_curves(runner, 64)
    ids = long_text_ids(runner, 64)
    trace = runner.trace(ids)
    weights = np.stack([trace[layer].weights for layer in range(trace.num_layers)]).astype(np.float64)  # (30, 9, L, L)
    logs = np.log(np.where(weights > 0, weights, 1.0))
    dense = {
        "entropy": -(weights * logs).sum(-1),
        "max_weight": weights.max(-1),
        "sink_share": weights[..., :4].sum(-1),
    }
    bins = [(1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 64)]
    scales = {"entropy": math.log(64), "max_weight": 1.0, "sink_share": 1.0}  # float32: 1e-5 of each one's scale
    for name, values in dense.items():
        expected = [values[..., first - 1 : last].mean() for first, last in bins]
        assert measured["curves"][name] == pytest.approx(expected, abs=1e-5 * scales[name]), name
    last_bin = dense["sink_share"][..., 31:64].mean(-1).reshape(-1)  # per head, layer by layer
    np.testing.assert_allclose(measured["sink_heads"], last_bin, atol=1e-5)
    assert measured["length"] == 64 and len(measured["sink_heads"]) == 30 * 9 and "pydoc_data" in measured["source"]
