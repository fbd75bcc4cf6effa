"""What the experiments share: the Experiment record (measure, figures, report), the
progress bar, matplotlib figures (imported only when a figure is drawn) and markdown tables."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from .._progress import progress_bar as shared_progress_bar
from .._validation import MissingDependencyError, fail

__all__ = ["Experiment", "Measured", "curves_figure", "figure", "lowest_throughout", "progress_bar", "ranking", "table"]


class Measured(Protocol):
    """An experiment's numbers: ``metrics()`` gives what results.json records of them."""

    def metrics(self) -> dict[str, Any]: ...


MeasuredT = TypeVar("MeasuredT", bound=Measured)


@dataclass(frozen=True)
class Experiment(Generic[MeasuredT]):
    """One experiment in three parts: ``measure(quick, seed)`` its numbers (no matplotlib),
    ``figures(measured, out)`` the PNGs it draws from them into ``out`` (their names), and
    ``report(measured)`` report.md, filled from them; ``save(measured, out)`` writes anything
    else the run leaves (coref's model)."""

    name: str
    summary: str
    measure: Callable[[bool, int], MeasuredT]
    figures: Callable[[MeasuredT, Path], list[str]]
    report: Callable[[MeasuredT], str]
    save: Callable[[MeasuredT, Path], None] | None = None


def progress_bar(name: str, total: int) -> Callable[[int, float], None]:
    """A progress bar on standard error: the step, the loss, the time so far and an estimate
    of the time left (tqdm's); called with each step and its loss. Drawn only where standard
    error is a terminal (a site's build or a log gets no bar)."""
    bar = shared_progress_bar(total, name, "step", enabled=sys.stderr.isatty())

    def show(step: int, loss: float) -> None:
        bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
        bar.update(step + 1 - bar.n)
        if step == total - 1:
            bar.close()

    return show


def figure(panels: int = 1, size: tuple[float, float] = (6.0, 3.5)) -> tuple[Any, Any]:
    """A figure of ``panels`` side by side, and their axes; raises MissingDependencyError
    without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError("the experiments' figures need matplotlib: pip install 'attnlab[viz]'") from None
    drawn = Figure(figsize=(size[0] * panels, size[1]), layout="constrained")
    return drawn, drawn.subplots(1, panels, squeeze=False)[0]


def curves_figure(path: Path, curves: dict[str, list[float]], title: str) -> None:
    """Loss curves, each the mean of 10 steps, on a log scale, saved to ``path``."""
    drawn, (ax,) = figure()
    for label, losses in curves.items():
        smooth = np.convolve(losses, np.ones(10) / 10, mode="valid") if len(losses) > 20 else np.asarray(losses)
        ax.plot(smooth, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (mean of 10 steps)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend()
    drawn.savefig(path, dpi=120)


def table(header: list[str], rows: list[list[Any]]) -> str:
    """A markdown table; floats to 4 significant digits."""

    def cell(x: Any) -> str:
        return f"{x:.4g}" if isinstance(x, float) else str(x)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows])


def ranking(values: dict[str, float], shown: Callable[[float], str], *, higher: bool = True) -> str:
    """The best and the worst of ``values`` in words, from the numbers as ``shown`` prints
    them: labels that print the same are named as a tie ("a and b tie best (99.6%)"), and
    "all end at …" when every label prints the same. Raises ArgumentError for no values."""
    if not values:
        raise fail("values", "at least one labelled number", "none")
    by_shown: dict[str, list[str]] = {}
    for label in sorted(values, key=lambda label: -values[label] if higher else values[label]):
        by_shown.setdefault(shown(values[label]), []).append(label)
    groups = list(by_shown.items())
    if len(groups) == 1:
        return f"all {len(values)} end at {groups[0][0]}"

    def named(group: tuple[str, list[str]], place: str) -> str:
        text, labels = group
        if len(labels) == 1:
            return f"{labels[0]} ends {place} ({text})"
        return f"{', '.join(labels[:-1])} and {labels[-1]} tie {place} ({text})"

    return f"{named(groups[0], 'best')} and {named(groups[-1], 'worst')}"


def lowest_throughout(curves: dict[str, list[float]], steps: int = 10) -> str | None:
    """The label whose curve, each point the mean of ``steps`` steps, is strictly below
    every other curve at every step; None when no curve is (they cross or touch)."""
    smooth = {label: np.convolve(c, np.ones(steps) / steps, mode="valid") if len(c) >= steps else np.asarray(c)
              for label, c in curves.items()}  # fmt: skip
    for label, curve in smooth.items():
        others = [c for other, c in smooth.items() if other != label]
        if curve.size and others and all(c.shape == curve.shape and bool(np.all(curve < c)) for c in others):
            return label
    return None
