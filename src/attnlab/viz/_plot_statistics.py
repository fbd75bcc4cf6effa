"""Pictures of a model's statistics at length (``attnlab.trace.ModelStatistics``) with
matplotlib, the statistics page's views as files (PNG, SVG, PDF):

- "profiles": the grid of every head's distance profile (layers × heads), each its share of
  the head's weight by log-spaced distance behind the query (d = 0, 1, 2–3, 4–7, …), its
  background tinted by its role (:mod:`._head_roles`: sink, local, long-range, mixed);
- "received": the attention each token receives, Σ_i P_ij, along the text: one strip a
  head, log colour (1 + received), a row per chosen head of the chosen layers;
- "positions": entropy (nats) and sink share across positions, one line a chosen head.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import MissingDependencyError, fail, is_integer
from ..trace import ModelStatistics
from ._head_roles import ROLE_RULE, ROLES, head_roles
from ._plot_args import check_path, select_heads

__all__ = ["ROLE_COLOURS", "STATISTICS_VIEWS", "chosen_layers", "plot_statistics"]

STATISTICS_VIEWS = ("profiles", "received", "positions")
ROLE_COLOURS = {"sink": "#c0392b", "local": "#2e6fbd", "long-range": "#2e9a4b", "mixed": "#8a8a8a"}  # the page's
_COLUMNS = 300  # the most columns a strip of received attention draws
_ROLE_TINTS = {"sink": "#fbe3e0", "local": "#e1ecfa", "long-range": "#e2f4e6", "mixed": "#f2f2f2"}


def plot_statistics(
    stats: ModelStatistics,
    path: str | Path,
    *,
    view: str = "profiles",
    layers: int | Sequence[int] | None = None,
    heads: str | Sequence[int] = "all",
) -> Any:
    """Draw ``view`` of ``stats`` to ``path`` (.png, .svg or .pdf).

    Args:
        stats: a model's statistics (:class:`attnlab.trace.ModelStatistics`).
        path: the file to write.
        view: "profiles" (default: every head, ``layers`` and ``heads`` ignored), "received"
            or "positions".
        layers: the layers drawn (an index or several; default every layer for "received",
            the first for "positions").
        heads: "all" (default), indices such as "0,2,5", or a list of ints.

    Returns:
        The matplotlib Figure.

    Raises:
        ArgumentError: a bad path, view, layer or head.
        ArgumentTypeError: ``stats`` not a ModelStatistics.
        MissingDependencyError: matplotlib is not installed (``pip install 'attnlab[viz]'``).
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError("plotting needs matplotlib: pip install 'attnlab[viz]'") from None
    if not isinstance(stats, ModelStatistics):
        raise fail("stats", "an attnlab.trace.ModelStatistics", type(stats).__name__, TypeError)
    if view not in STATISTICS_VIEWS:
        raise fail("view", f"one of {', '.join(STATISTICS_VIEWS)}", repr(view))
    target = check_path(path)
    chosen_heads = select_heads(heads, stats.num_heads)
    drawn_layers = chosen_layers(layers, stats.num_layers, [0] if view == "positions" else None)
    draw = {"profiles": _profiles, "received": _received, "positions": _positions}[view]
    figure = draw(Figure, stats, drawn_layers, chosen_heads)
    figure.savefig(target)
    return figure


def chosen_layers(given: int | Sequence[int] | None, count: int, default: list[int] | None) -> list[int]:
    """The layers chosen: ``given`` (one index or several, each in 0..count−1), else ``default``, else all."""
    if given is None:
        return default if default is not None else list(range(count))
    chosen = [given] if is_integer(given) else list(given)  # type: ignore[arg-type]
    for layer in chosen:
        if not is_integer(layer) or not 0 <= int(layer) < count:
            raise fail("layers", f"layer indices in 0..{count - 1}", repr(given))
    return [int(layer) for layer in chosen]


def _title(stats: ModelStatistics, what: str) -> str:
    return f"{stats.model}: {what}, {len(stats.tokens):,} tokens (statistics from the tiles)"


def _profiles(Figure: Any, stats: ModelStatistics, _layers: list[int], _heads: list[int]) -> Any:
    """Every head's distance profile in one Axes: cell (layer, head) at column head, row layer
    (layer 0 on top), its bars the shares of the bins d >= 0 (√ scaled, so that a bin of 1 %
    shows), its background its role's tint."""
    s = stats.statistics
    behind = s.distance_bins[:, 0] >= 0  # the bins d >= 0: a causal model's
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = np.nan_to_num(s.distance / s.distance.sum(axis=-1, keepdims=True))[..., behind]  # (layers, heads, b)
    roles = head_roles(s).role  # (layers, heads)
    layers, heads, bins = shares.shape
    width_in, height_in = max(8.0, 0.9 * heads + 1.2), 0.42 * layers + 2.2  # inches: the grid, then 2.2 of words
    figure = Figure(figsize=(width_in, height_in))
    ax = figure.add_axes((0.9 / width_in, 1.5 / height_in, 1 - 1.1 / width_in, 1 - 2.0 / height_in))
    bar = 1 / (bins + 1)
    for layer in range(layers):
        for head in range(heads):
            role = ROLES[roles[layer, head]]
            y = layers - 1 - layer
            ax.add_patch(_rectangle((head + 0.02, y + 0.04), 0.96, 0.92, _ROLE_TINTS[role]))
            x = head + 0.02 + bar * (0.5 + np.arange(bins))
            ax.bar(x, np.sqrt(shares[layer, head]) * 0.8, bar * 0.9, bottom=y + 0.06, color=ROLE_COLOURS[role])
    ax.set_xlim(0, heads)
    ax.set_ylim(0, layers)
    ax.set_xticks(np.arange(heads) + 0.5, [str(h) for h in range(heads)])
    ax.set_yticks(np.arange(layers) + 0.5, [str(layer) for layer in range(layers)][::-1])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    handles = [_rectangle((0, 0), 1, 1, ROLE_COLOURS[role]) for role in ROLES]
    figure.legend(handles, ROLES, loc="center", bbox_to_anchor=(0.5, 0.8 / height_in), ncols=4, frameon=False)
    how = "bars: the share of each head's weight at d = 0, 1, 2–3, 4–7, … keys behind the query (√ scale). "
    rule = textwrap.fill(how + ROLE_RULE.format(s=s.sink_keys).capitalize() + ".", width=int(15 * width_in))
    figure.text(0.5, 0.08 / height_in, rule, ha="center", va="bottom", fontsize=7, color="#444")
    figure.suptitle(_title(stats, "every head's weight by distance"), y=1 - 0.15 / height_in, va="top")
    return figure


def _rectangle(at: tuple[float, float], width: float, height: float, colour: str) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle(at, width, height, facecolor=colour, edgecolor="none")


def _received(Figure: Any, stats: ModelStatistics, layers: list[int], heads: list[int]) -> Any:
    """A strip a head (the rows layer by layer), its colour log(1 + Σ_i P_ij) along the positions."""
    received = stats.statistics.received[np.ix_(layers, heads)]  # (layers, heads, S)
    rows = received.reshape(len(layers) * len(heads), -1)  # (layers·heads, S): a row a head
    S = rows.shape[1]
    columns = min(S, _COLUMNS)
    edges = (np.arange(columns + 1) * S) // columns  # each column's keys: the largest (a sink stays seen)
    rows = np.maximum.reduceat(rows, edges[:-1], axis=1)  # (rows, columns)
    names = [f"{layer}.{head}" for layer in layers for head in heads]
    figure = Figure(figsize=(12, min(0.22 * len(rows) + 1.8, 40)), layout="constrained")
    ax = figure.subplots()
    image = ax.imshow(
        np.log1p(rows), aspect="auto", interpolation="nearest", cmap="viridis", extent=(0, S, len(rows) - 0.5, -0.5)
    )
    step = max(1, len(names) // 60)
    ax.set_yticks(range(0, len(names), step), names[::step], fontsize=7)
    ax.set_ylabel("layer.head")
    ax.set_xlabel("key position j (token)")
    what = f"log(1 + Σ_i P_ij), the largest of every {S / columns:.3g} keys" if columns < S else "log(1 + Σ_i P_ij)"
    figure.colorbar(image, ax=ax, label=what, location="top", shrink=0.5, aspect=40)
    figure.suptitle(_title(stats, "the attention each token receives"))
    return figure


def _positions(Figure: Any, stats: ModelStatistics, layers: list[int], heads: list[int]) -> Any:
    """Entropy and sink share across the query positions, a line a chosen head of the chosen layers."""
    s = stats.statistics
    figure = Figure(figsize=(12, 6), layout="constrained")
    top, bottom = figure.subplots(2, 1, sharex=True)
    roles = head_roles(s).role  # (layers, heads)
    for layer in layers:
        for head in heads:
            label = f"{layer}.{head} {ROLES[roles[layer, head]]}"
            top.plot(s.entropy[layer, head], lw=0.7, label=label)
            bottom.plot(s.sink_share[layer, head], lw=0.7, label=label)
    top.set_ylabel("entropy (nats)")
    bottom.set_ylabel(f"sink share (first {s.sink_keys} keys)")
    bottom.set_xlabel("query position i (token)")
    bottom.set_ylim(-0.02, 1.02)
    top.legend(fontsize=7, ncols=max(1, len(heads) * len(layers) // 8), loc="upper left")
    figure.suptitle(_title(stats, "entropy and sink share across positions"))
    return figure
