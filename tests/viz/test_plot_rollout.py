"""plot_rollout: rollout and flow drawn from the arrays given (attnlab plot --stage rollout)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from attnlab.viz._plot_rollout import plot_rollout

TOKENS = ["a", "b", "c"]


def cell_texts(ax) -> dict[tuple[int, int], str]:
    return {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in ax.texts}


def test_the_chosen_layers_numbers_are_drawn_in_their_cells(tmp_path):
    rollout = np.full((2, 3, 3), 1 / 3)
    rollout[1, 2, 0] = 0.25  # by hand: layer 1, position 2 (row), input token 0 (column)
    figure = plot_rollout(TOKENS, rollout, tmp_path / "r.png", flow=rollout / 2)
    assert (tmp_path / "r.png").stat().st_size > 0
    rolled, flowed = figure.axes[0], figure.axes[1]
    assert (
        rolled.get_title() == "attention rollout after layer 1" and flowed.get_title() == "attention flow after layer 1"
    )
    assert cell_texts(rolled)[2, 0] == "0.25" and cell_texts(flowed)[2, 0] == "0.12"  # 0.125 to two decimals
    assert cell_texts(rolled)[0, 0] == "0.33"
    first = plot_rollout(TOKENS, rollout, tmp_path / "r0.svg", layer=0)
    assert len(first.axes) == 2 and first.axes[0].get_title() == "attention rollout after layer 0"  # and its colour bar


def test_bad_arrays_and_layers_are_refused(tmp_path):
    good = np.full((2, 3, 3), 1 / 3)
    with pytest.raises(ValueError, match=r"rollout: expected finite \(layers, 3, 3\) numbers"):
        plot_rollout(TOKENS, good[:, :2], tmp_path / "r.png")
    with pytest.raises(ValueError, match="flow: expected 2 layers, as the rollout"):
        plot_rollout(TOKENS, good, tmp_path / "r.png", flow=good[:1])
    with pytest.raises(ValueError, match=r"layer: expected a layer in -2\.\.1"):
        plot_rollout(TOKENS, good, tmp_path / "r.png", layer=2)
    with pytest.raises(ValueError, match="path"):
        plot_rollout(TOKENS, good, tmp_path / "r.txt")
