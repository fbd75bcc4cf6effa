"""``normalization``: why softmax, and why e. The article's two tables by softmax and by
x/Σx, bases 2 and 10 as temperatures of base e, and one-layer attention trained on
associative recall with four ways to turn scores into weights."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import Array
from . import _recall
from ._common import Experiment, curves_figure, progress_bar, ranking, table

__all__ = ["EXPERIMENT", "Normalization", "measure", "softmax_base"]

ARTICLE_SCORES = ([1.0, 2.0, 3.0], [-1.0, 2.0, -0.5])  # the article's two rows


@dataclass(frozen=True)
class Normalization:
    steps: int  # training steps per normalisation
    softmax: list[Array]  # per article row: softmax(x)
    linear: list[Array]  # per article row: x / Σx
    base_gap: dict[str, float]  # largest |base-b softmax − base-e softmax at T = 1/ln b| over 100 rows
    curves: dict[str, list[float]]  # per normalisation: the training loss of every step
    accuracy: dict[str, float]  # per normalisation: held-out recall accuracy

    def metrics(self) -> dict[str, Any]:
        return {"base_gap": self.base_gap, "accuracy": self.accuracy}


def softmax_base(z: Array, base: float, temperature: float = 1.0) -> Array:
    """base^(z/T) / Σ base^(z/T) along the last axis (shifted by the row maximum)."""
    powers = base ** ((z - z.max(axis=-1, keepdims=True)) / temperature)
    return powers / powers.sum(axis=-1, keepdims=True)


def measure(quick: bool, seed: int, *, steps: int | None = None) -> Normalization:
    """The article's rows by softmax and x/Σx, the base gaps over 100 random rows of 8
    scores (σ = 3), and the recall model trained ``steps`` steps (200 quick, 1500 full)
    with each of _recall.NORMALIZATIONS."""
    softmax, linear = [], []
    for row in ARTICLE_SCORES:
        a = np.array(row)
        softmax.append(np.exp(a - a.max()) / np.exp(a - a.max()).sum())
        linear.append(a / a.sum())
    z = np.random.default_rng(seed).standard_normal((100, 8)) * 3
    base_gap = {
        "2 vs e at T=1/ln 2": float(np.abs(softmax_base(z, 2.0) - softmax_base(z, math.e, 1 / math.log(2))).max()),
        "10 vs e at T=1/ln 10": float(np.abs(softmax_base(z, 10.0) - softmax_base(z, math.e, 1 / math.log(10))).max()),
    }
    steps = steps if steps is not None else (200 if quick else 1500)
    curves, accuracy = {}, {}
    for kind in _recall.NORMALIZATIONS:
        model = _recall.AttentionModel(64, 16, 64, rng=np.random.default_rng(seed), normalization=kind)
        fitted = _recall.fit(model, _recall.batch_maker(32, 8), steps, seed=seed, progress=progress_bar(kind, steps))
        curves[kind], accuracy[kind] = fitted["losses"], fitted["accuracy"]
    return Normalization(steps, softmax, linear, base_gap, curves, accuracy)


def figures(measured: Normalization, out: Path) -> list[str]:
    """training.png: the four normalisations' loss curves."""
    curves_figure(out / "training.png", measured.curves, "recall: four ways to make weights")
    return ["training.png"]


def report(measured: Normalization) -> str:
    """report.md: the article's tables, the base gaps, the trained accuracies, what they show."""

    def weights(row: Array) -> str:
        return "[" + ", ".join(f"{v:.4f}" for v in row) + "]"

    rows = [[str(x), weights(s), weights(n)] for x, s, n in zip(ARTICLE_SCORES, measured.softmax, measured.linear,
                                                                  strict=True)]  # fmt: skip
    accuracy = measured.accuracy
    spread = max(accuracy.values()) - min(accuracy.values())
    trained = (
        f"Trained, the four end within {spread:.1%} of each other on this one-step recall task, so here the "
        "case for softmax rests on the first two points, not on trainability."
        if spread < 0.05
        else f"Trained, they differ: {ranking(accuracy, lambda a: f'{a:.1%}')}."
    )
    return f"""# normalization: why softmax, and why e?

The article's two tables, by softmax and by linear normalisation x/Σx:

{table(["scores", "softmax", "x / Σx"], rows)}

Linear normalisation gives negative weights and weights above 1 for [−1, 2, −0.5] (the sum is 0.5),
and nothing at all for a row summing to 0. A base b is only a temperature: b^x = e^(x·ln b), so
base-b softmax is base-e softmax at temperature 1/ln b (largest difference over 100 random rows:
{", ".join(f"{k}: {v:.1e}" for k, v in measured.base_gap.items())}).

Trained on associative recall for {measured.steps} steps, one attention layer, the same seed: accuracy
{", ".join(f"{k}: {v:.3f}" for k, v in accuracy.items())} (linear is |z|/Σ|z|, ReLU is max(z, 0)/Σ,
sigmoid is σ(z) with no sum to 1).

![training](training.png)

**What it shows.** Softmax is defined for every row, positive, sums to 1 and keeps the order of the
scores; linear normalisation breaks on signs and on zero sums. The base is not a choice that matters:
it is a temperature, which the learned weights can absorb. {trained}

**结论。** softmax 对任何一行都有定义、为正、和为 1、保持分数的顺序；线性归一化遇到负数或和为 0 就失效。
底数 2、e、10 只是温度的不同：b^x = e^(x·ln b)。
"""


EXPERIMENT = Experiment(
    "normalization",
    "why softmax and why e: the article's tables, bases as temperatures, four normalisations",
    measure,
    figures,
    report,
)
