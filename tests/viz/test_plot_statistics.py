"""Pictures of a model's statistics (viz._plot_statistics): what each view draws, read back from
the figure, against the statistics computed here (each head's shares by bin, the largest
received attention of each column's keys, the entropy and sink share lines)."""

from __future__ import annotations

import matplotlib.colors
import numpy as np
import pytest

from attnlab.viz._plot_statistics import ROLE_COLOURS, plot_statistics
from statistics_cases import model_statistics

KINDS = [["sink", "local", "long-range"], ["random", "sink", "local"]]


@pytest.fixture(scope="module")
def stats():
    return model_statistics(800, KINDS)


def test_the_profiles_are_each_heads_shares_by_distance_coloured_by_its_role(stats, tmp_path):
    figure = plot_statistics(stats, tmp_path / "profiles.png")
    assert (tmp_path / "profiles.png").stat().st_size > 10_000
    bars = [p for p in figure.axes[0].patches if p.get_width() < 0.5]  # the cells' backgrounds are 0.96 wide
    s = stats.statistics
    behind = s.distance_bins[:, 0] >= 0
    bins = int(behind.sum())
    assert len(bars) == 2 * 3 * bins
    for n, (layer, head) in enumerate((layer, head) for layer in range(2) for head in range(3)):
        shares = s.distance[layer, head, behind] / s.distance[layer, head].sum()
        heights = [bar.get_height() for bar in bars[n * bins : (n + 1) * bins]]
        np.testing.assert_allclose(heights, np.sqrt(shares) * 0.8, rtol=1e-12)
        role = {"random": "mixed"}.get(KINDS[layer][head], KINDS[layer][head])
        assert matplotlib.colors.to_hex(bars[n * bins].get_facecolor()) == ROLE_COLOURS[role]


def test_the_received_strips_show_each_columns_largest_so_that_a_sink_stays_seen(stats, tmp_path):
    figure = plot_statistics(stats, tmp_path / "received.png", view="received", layers=[1], heads=[0, 1])
    image = figure.axes[0].images[0].get_array()
    received = stats.statistics.received[1, :2]  # (2, 800)
    expected = np.log1p([[row[i * 800 // 300 : (i + 1) * 800 // 300].max() for i in range(300)] for row in received])
    np.testing.assert_allclose(image, expected, rtol=1e-6)
    assert image[1, 0] > 6  # layer 1, head 1, the sink head: key 0 receives about every query's weight
    assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == ["1.0", "1.1"]


def test_the_positions_are_the_entropy_and_sink_share_lines(stats, tmp_path):
    figure = plot_statistics(stats, tmp_path / "positions.pdf", view="positions", heads="0,2")
    entropy, sink = figure.axes[0].lines, figure.axes[1].lines
    assert [line.get_label() for line in entropy] == ["0.0 sink", "0.2 long-range"]
    np.testing.assert_array_equal(entropy[1].get_ydata(), stats.statistics.entropy[0, 2])
    np.testing.assert_array_equal(sink[0].get_ydata(), stats.statistics.sink_share[0, 0])


def test_attnlab_plot_draws_a_models_statistics_by_stage(stats, tmp_path):
    import attnlab as al

    figure = al.plot(stats, tmp_path / "profiles.png")  # the default stage of statistics: their profiles
    assert figure.axes[0].get_xlabel() == "head" and (tmp_path / "profiles.png").exists()
    figure = al.plot(stats, tmp_path / "received.png", stage="received", heads=[2])
    assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == ["0.2", "1.2"]


def test_a_bad_view_layer_or_head_is_refused_by_name(stats, tmp_path):
    with pytest.raises(ValueError, match="view: expected one of profiles, received, positions"):
        plot_statistics(stats, tmp_path / "x.png", view="weights")
    with pytest.raises(ValueError, match=r"layers: expected layer indices in 0\.\.1"):
        plot_statistics(stats, tmp_path / "x.png", view="received", layers=[2])
    with pytest.raises(ValueError, match="heads"):
        plot_statistics(stats, tmp_path / "x.png", view="received", heads="5")
    with pytest.raises(TypeError, match=r"stats: expected an attnlab\.trace\.ModelStatistics"):
        plot_statistics(stats.statistics, tmp_path / "x.png")  # type: ignore[arg-type]
