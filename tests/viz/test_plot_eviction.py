"""attnlab evict's figures: what each policy kept, drawn cell for cell, and the error against
the budget, line for line; bad arrays refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab._exceptions import ArgumentError
from attnlab.viz._plot_eviction import plot_error, plot_kept

pytest.importorskip("matplotlib")


def test_each_policy_s_panel_is_its_kept_keys_layer_by_layer(tmp_path):
    kept = np.random.default_rng(0).random((2, 3, 2, 40)) < 0.3  # (P, layers, Hk, S)
    figure = plot_kept(kept, ["h2o", "snapkv"], 32, tmp_path / "kept.png", "a title")
    for p, ax in enumerate(figure.axes):
        np.testing.assert_array_equal(ax.images[0].get_array(), kept[p].reshape(6, 40))
        assert ax.get_title(loc="left").startswith(["h2o", "snapkv"][p])
        assert ax.lines[0].get_xdata()[0] == 31.5  # the prompt's end
    assert (tmp_path / "kept.png").read_bytes()[:4] == b"\x89PNG"


def test_the_error_plot_has_one_line_per_policy(tmp_path):
    kl, top1 = np.array([[0.3, 0.1, 0.0], [0.2, 0.05, 0.01]]), np.array([[0.5, 0.8, 1.0], [0.6, 0.9, 1.0]])
    figure = plot_error([0.1, 0.25, 0.5], kl, top1, ["streaming_llm", "h2o"], tmp_path / "error.png")
    left, right = figure.axes
    np.testing.assert_allclose(left.lines[1].get_ydata(), [0.2, 0.05, 0.01])
    np.testing.assert_allclose(left.lines[0].get_ydata()[-1], 1e-12)  # 0 drawn at the log scale's floor
    np.testing.assert_allclose(right.lines[0].get_ydata(), [50, 80, 100])
    np.testing.assert_allclose(right.lines[0].get_xdata(), [10, 25, 50])


def test_bad_arrays_are_refused_by_name(tmp_path):
    with pytest.raises(ArgumentError, match=r"kept: expected \(P, layers, Hk, S\) for the 2 policies"):
        plot_kept(np.ones((1, 2, 2, 5), dtype=bool), ["h2o", "snapkv"], 3, tmp_path / "k.png")
    with pytest.raises(ArgumentError, match=r"top1: expected \(1, 2\): policies × budgets"):
        plot_error([0.1, 0.5], np.ones((1, 2)), np.ones((2, 1)), ["h2o"], tmp_path / "e.png")
