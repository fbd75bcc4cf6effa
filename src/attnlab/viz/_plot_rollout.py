"""Attention rollout and flow drawn with matplotlib (``attnlab plot --stage rollout``):
the arrays come computed (``attnlab.analysis.rollout`` and ``.flow``), one heatmap each of
the chosen layer, position i's row the share of each input token j in it after that layer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._validation import MissingDependencyError, fail, is_integer
from ._plot import ANNOTATE_UP_TO, LABELS_UP_TO, _font, _tick_labels, check_path, quiet_fonts

__all__ = ["plot_rollout"]


def _layers(name: str, given: ArrayLike, length: int) -> np.ndarray:
    x = np.asarray(given, dtype=np.float64)
    if x.ndim != 3 or x.shape[1:] != (length, length) or not np.isfinite(x).all():
        raise fail(name, f"finite (layers, {length}, {length}) numbers over the tokens", np.shape(given))
    return x


def plot_rollout(
    tokens: list[str],
    rollout: ArrayLike,
    target: str | Path,
    *,
    flow: ArrayLike | None = None,
    layer: int = -1,
) -> Any:
    """Draw the rollout (and the flow beside it) of one layer into ``target``.

    Args:
        tokens: the L tokens, the matrices' rows (positions after the layer) and columns
            (input tokens).
        rollout: (layers, L, L) rollout: [l, i, j] is input token j's share in position i
            after layer l.
        target: a .png, .svg or .pdf file.
        flow: (layers, L, L) attention flow, drawn beside it; None: the rollout alone.
        layer: the layer drawn (negative from the last).

    Returns:
        The Figure, written to ``target``.

    Raises:
        ArgumentError: a bad path, arrays of another shape than (layers, L, L) over the
            tokens, a layer out of range.
        MissingDependencyError: matplotlib is not installed (``pip install 'attnlab[viz]'``).
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError("plotting needs matplotlib: pip install 'attnlab[viz]'") from None
    L = len(tokens)
    panels = [("attention rollout", _layers("rollout", rollout, L))]
    if flow is not None:
        panels.append(("attention flow", _layers("flow", flow, L)))
        if panels[1][1].shape[0] != panels[0][1].shape[0]:
            raise fail("flow", f"{panels[0][1].shape[0]} layers, as the rollout", panels[1][1].shape[0])
    count = panels[0][1].shape[0]
    if not is_integer(layer) or not -count <= layer < count:
        raise fail("layer", f"a layer in {-count}..{count - 1}", repr(layer))
    shown = int(layer) % count
    path = check_path(target)
    size = min(max(3.5, 0.3 * min(L, LABELS_UP_TO) + 2.0), 10.0)
    figure = Figure(figsize=(size * len(panels) + 1.5, size + 0.5), layout="constrained")
    axes = figure.subplots(1, len(panels), squeeze=False).ravel()
    font = _font(tokens)
    with quiet_fonts(font, tokens):
        for ax, (title, x) in zip(axes, panels, strict=True):  # each coloured 0 → its own largest
            image = _draw(ax, x[shown], tokens, float(x[shown].max()) or 1.0, font)
            ax.set_title(f"{title} after layer {shown}")
            figure.colorbar(image, ax=ax, shrink=0.8)
        figure.savefig(path)
    return figure


def _draw(ax: Any, matrix: np.ndarray, tokens: list[str], high: float, font: dict[str, Any]) -> Any:
    """One (L, L) matrix with the tokens on both axes, its values in the cells when small."""
    image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=high, interpolation="nearest")
    positions, texts = _tick_labels(tokens)
    upright = all(len(t) <= 2 for t in texts) and len(positions) <= 30
    ax.set_xticks(positions, texts, rotation=0 if upright else 90, fontdict=font, parse_math=False)
    ax.set_yticks(positions, texts, fontdict=font, parse_math=False)
    ax.set_xlabel("input token")
    ax.set_ylabel("position after the layer")
    if len(tokens) <= ANNOTATE_UP_TO:
        for (i, j), value in np.ndenumerate(matrix):
            light = value < 0.6 * high
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7, color="white" if light else "black")
    return image
