"""The eviction replay drawn with matplotlib (``attnlab evict``; the arrays come from
``attnlab.analysis.evict``): what each policy kept, per layer and key/value head along the
text, and each policy's error against its budget."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import Array, MissingDependencyError, fail
from ._plot import check_path

__all__ = ["plot_error", "plot_kept"]


def _figure() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError("plotting needs matplotlib: pip install 'attnlab[viz]'") from None
    return Figure


def plot_kept(kept: Array, policies: Sequence[str], prompt: int, target: str | Path, title: str = "") -> Any:
    """One panel per policy: rows the layers' key/value heads (layer 0 on top), columns the
    S positions, dark where the last generated token's query sees the key, light where its
    cache dropped it; a line where the prompt ends.

    Args:
        kept: (P, layers, Hk, S) bool, one per policy.
        policies: the P policies' names.
        prompt: n, the prompt's tokens (the positions after it were generated).
        target: a .png, .svg or .pdf file.
        title: the figure's title.

    Returns:
        The Figure, written to ``target``.

    Raises:
        ArgumentError: a bad path, ``kept`` not (P, layers, Hk, S) for the P policies.
        MissingDependencyError: matplotlib is not installed.
    """
    kept = np.asarray(kept, dtype=bool)
    if kept.ndim != 4 or kept.shape[0] != len(policies):
        raise fail("kept", f"(P, layers, Hk, S) for the {len(policies)} policies", np.shape(kept))
    path, Figure = check_path(target), _figure()
    P, layers, Hk, S = kept.shape
    figure = Figure(figsize=(16, 1.2 + P * min(max(layers * Hk * 0.03, 1.6), 4.5)), layout="constrained")
    axes = figure.subplots(P, 1, squeeze=False).ravel()
    for ax, policy, cells in zip(axes, policies, kept, strict=True):
        rows = cells.reshape(layers * Hk, S)  # (layers, Hk, S) -> (layers·Hk, S), layer by layer
        ax.imshow(rows, cmap="Greys", vmin=-0.25, vmax=1.0, aspect="auto", interpolation="nearest")
        ax.axvline(prompt - 0.5, color="tab:red", linewidth=0.8)
        ax.set_title(f"{policy}: {rows.mean():.0%} of the keys kept", fontsize=10, loc="left")
        labelled = range(0, layers, max(1, layers // 6))
        ax.set_yticks([layer * Hk for layer in labelled], [f"L{layer}" for layer in labelled])
        ax.set_ylabel(f"layer × {Hk} kv heads")
    axes[-1].set_xlabel("position (dark: kept, light: dropped; red: the prompt ends)")
    if title:
        figure.suptitle(title, fontsize=11)
    figure.savefig(path, dpi=140)  # 2,240 pixels across: a kept key of 2,048 still shows
    return figure


def plot_error(
    budgets: Sequence[float], mean_kl: Array, top1: Array, policies: Sequence[str], target: str | Path, title: str = ""
) -> Any:
    """Mean KL(full ‖ evicted) (log scale) and top-1 agreement against the budget, one line
    per policy.

    Args:
        budgets: the B budgets, fractions of the cache.
        mean_kl, top1: (P, B) each policy's mean KL (nats) and top-1 agreement (0..1).
        policies: the P policies' names.
        target: a .png, .svg or .pdf file.
        title: the figure's title.

    Returns:
        The Figure, written to ``target``.

    Raises:
        ArgumentError: a bad path, arrays not (P, B).
        MissingDependencyError: matplotlib is not installed.
    """
    shape = (len(policies), len(budgets))
    for name, x in (("mean_kl", mean_kl), ("top1", top1)):
        if np.shape(x) != shape:
            raise fail(name, f"{shape}: policies × budgets", np.shape(x))
    path, Figure = check_path(target), _figure()
    figure = Figure(figsize=(10, 3.8), layout="constrained")
    left, right = figure.subplots(1, 2)
    percent = [100 * b for b in budgets]
    for p, policy in enumerate(policies):
        left.plot(percent, np.maximum(np.asarray(mean_kl)[p], 1e-12), marker="o", label=policy)
        right.plot(percent, 100 * np.asarray(top1)[p], marker="o", label=policy)
    left.set_yscale("log")
    left.set_ylabel("mean KL(full ‖ evicted), nats")
    right.set_ylabel("top-1 agreement, %")
    right.set_ylim(0, 102)
    for ax in (left, right):
        ax.set_xlabel("budget, % of the prompt's keys (SnapKV keeps the generated keys besides)")
        ax.set_xticks(percent)
        ax.grid(alpha=0.3)
    left.legend()
    if title:
        figure.suptitle(title, fontsize=11)
    figure.savefig(path, dpi=110)
    return figure
