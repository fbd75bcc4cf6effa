"""``scaling``: why divide by √d_k. Var(q·k) for random unit-variance vectors, how much
softmax over 16 random keys saturates with and without the 1/√d_k, and one-layer attention
trained on associative recall at d_k = 256 with three scales."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import Array
from . import _recall
from ._common import Experiment, curves_figure, figure, lowest_throughout, progress_bar, ranking, table

__all__ = ["EXPERIMENT", "Scaling", "measure"]

WIDTHS = (4, 16, 64, 256, 1024)
KEYS = 16  # keys per softmax in the saturation measurements
SHARPNESS = ["d_k", "max weight", "entropy", "‖Jacobian‖", "max weight ÷√d_k", "entropy ÷√d_k", "‖Jacobian‖ ÷√d_k"]
SCALES = (("1/√d_k", 1 / 16), ("1", 1.0), ("1/d_k", 1 / 256))  # for the recall model's d_k = 256


@dataclass(frozen=True)
class Scaling:
    samples: int  # random pairs per d_k
    steps: int  # training steps per scale
    variance: list[list[Any]]  # per d_k: [d_k, Var(q·k)/d_k, Var(q·k/√d_k)]
    sharpness: list[list[Any]]  # per d_k: [d_k, max weight, entropy, ‖Jacobian‖ unscaled, the same ÷√d_k]
    curves: dict[str, list[float]]  # per scale: the training loss of every step
    accuracy: dict[str, float]  # per scale: held-out recall accuracy

    def metrics(self) -> dict[str, Any]:
        return {"var_ratio": {str(r[0]): r[1] for r in self.variance},
                "scaled_variance": {str(r[0]): r[2] for r in self.variance},
                "max_weight_unscaled": {str(r[0]): r[1] for r in self.sharpness},
                "max_weight_scaled": {str(r[0]): r[4] for r in self.sharpness}, "accuracy": self.accuracy}  # fmt: skip


def softmax_sharpness(scores: Array) -> list[float]:
    """For scores (N, K): the mean over rows of the largest softmax weight, the entropy of
    the weights and the Frobenius norm of softmax's Jacobian diag(p) − p·pᵀ."""
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    entropy = float(-(p * np.log(np.maximum(p, 1e-300))).sum(axis=-1).mean())
    K = scores.shape[-1]
    jacobian = float(np.sqrt(((p[:, :, None] * np.eye(K) - p[:, :, None] * p[:, None, :]) ** 2).sum((1, 2))).mean())
    return [float(p.max(axis=-1).mean()), entropy, jacobian]


def measure(quick: bool, seed: int, *, widths: tuple[int, ...] = WIDTHS, samples: int | None = None,
            queries: int = 2000, steps: int | None = None) -> Scaling:  # fmt: skip
    """For each d_k in ``widths``: Var(q·k)/d_k over ``samples`` pairs (20,000 quick, 100,000
    full) and the sharpness of softmax over 16 keys for ``queries`` queries, unscaled and
    ÷√d_k; then the recall model trained ``steps`` steps (150 quick, 1200 full) per scale."""
    rng = np.random.default_rng(seed)
    samples = samples if samples is not None else (20_000 if quick else 100_000)
    variance, sharpness = [], []
    for d in widths:
        q, k = rng.standard_normal((2, samples, d))
        dots = (q * k).sum(axis=-1)
        variance.append([d, float(dots.var() / d), float((dots / math.sqrt(d)).var())])
        query_rows, key_rows = rng.standard_normal((queries, d)), rng.standard_normal((queries, KEYS, d))
        raw = np.einsum("nd,nkd->nk", query_rows, key_rows)  # (queries, KEYS)
        sharpness.append([d, *softmax_sharpness(raw), *softmax_sharpness(raw / math.sqrt(d))])
    steps = steps if steps is not None else (150 if quick else 1200)
    curves, accuracy = {}, {}
    for label, scale in SCALES:
        model = _recall.AttentionModel(64, 16, 256, rng=np.random.default_rng(seed), scale=scale)
        fitted = _recall.fit(model, _recall.batch_maker(32, 8), steps, seed=seed,
                             progress=progress_bar(f"scale {label}", steps))  # fmt: skip
        curves[label], accuracy[label] = fitted["losses"], fitted["accuracy"]
    return Scaling(samples, steps, variance, sharpness, curves, accuracy)


def figures(measured: Scaling, out: Path) -> list[str]:
    """variance.png (Var(q·k)/d_k, the largest weight) and training.png (the three scales)."""
    drawn, (left, right) = figure(2)
    widths = [r[0] for r in measured.variance]
    left.plot(widths, [r[1] for r in measured.variance], "o-", label="Var(q·k) / d_k")
    left.axhline(1, color="#999", linestyle="--", label="the article: 1")
    # the estimate's standard error: √((2 + 6/d_k)/samples) (q_i·k_i has kurtosis 9)
    band = [2 * math.sqrt((2 + 6 / d) / measured.samples) for d in widths]
    left.fill_between(widths, [1 - b for b in band], [1 + b for b in band], color="#ddd", label="±2 standard errors")
    left.set_ylim(0, 1.5)
    left.set_xscale("log")
    left.set_xlabel("d_k")
    left.legend()
    right.plot(widths, [r[1] for r in measured.sharpness], "o-", label="largest weight, unscaled")
    right.plot(widths, [r[4] for r in measured.sharpness], "o-", label="largest weight, ÷√d_k")
    right.axhline(1 / KEYS, color="#999", linestyle="--", label="uniform: 1/16")
    right.set_ylim(0, 1.05)
    right.set_xscale("log")
    right.set_xlabel("d_k (16 keys)")
    right.legend()
    drawn.savefig(out / "variance.png", dpi=120)
    curves_figure(out / "training.png", measured.curves, "recall at d_k = 256, three scales")
    return ["variance.png", "training.png"]


def _variance_verdict(measured: Scaling) -> tuple[str, str]:
    """Whether every Var(q·k)/d_k lies within 3 standard errors, √((2 + 6/d_k)/samples), of 1:
    in English and in Chinese."""
    worst = max(abs(r[1] - 1) / math.sqrt((2 + 6 / r[0]) / measured.samples) for r in measured.variance)
    if worst <= 3:
        return ("Var(q·k)/d_k is 1 for every d_k within its sampling error (at most "
                f"{worst:.1f} standard errors away), as the article predicts, so the scaled scores have unit "
                "variance whatever d_k is.",
                f"对每个 d_k，Var(q·k)/d_k 都在抽样误差内等于 1（最多偏离 {worst:.1f} 个标准误），与文章的推导一致；"
                "除以 √d_k 后分数的方差与 d_k 无关。")  # fmt: skip
    return (f"Var(q·k)/d_k strays {worst:.1f} standard errors from the article's 1 at some d_k.",
            f"在某些 d_k 上，Var(q·k)/d_k 偏离文章预言的 1 达 {worst:.1f} 个标准误。")  # fmt: skip


def report(measured: Scaling) -> str:
    """report.md: the variance and saturation tables, the trained accuracies, what they show."""
    trained = f"Trained for the same budget, {ranking(measured.accuracy, lambda a: f'{a:.1%}')}"
    lowest = lowest_throughout(measured.curves)
    trained += (f"; the loss of {lowest} (mean of 10 steps) is the lowest at every step." if lowest is not None
                else "; no scale's loss is the lowest at every step: the curves cross or touch.")  # fmt: skip
    variance, variance_zh = _variance_verdict(measured)
    return f"""# scaling: why divide by √d_k?

The article: the dot product of two vectors of d_k independent unit-variance numbers has
variance d_k, so softmax saturates and its gradients vanish unless the scores are divided by √d_k.
Measured with {measured.samples:,} random pairs per d_k, and softmax over 16 random keys:

{table(["d_k", "Var(q·k)/d_k", "Var(q·k/√d_k)"], measured.variance)}

{table(SHARPNESS, measured.sharpness)}

![variance](variance.png)

The same one-layer attention model (d_k = 256) trained on associative recall for {measured.steps} steps with
three scales: final accuracy {", ".join(f"{k}: {v:.3f}" for k, v in measured.accuracy.items())}.

![training](training.png)

**What it shows.** {variance} Unscaled, the largest weight tends to 1 and the entropy
and the softmax Jacobian to 0 as d_k grows: the weights saturate and the gradient through them
vanishes. {trained}

**结论。** {variance_zh}
不缩放时，d_k 越大，最大权重越接近 1，熵和 softmax 的雅可比越接近 0：权重饱和，梯度消失。
"""


EXPERIMENT = Experiment(
    "scaling", "why divide by √d_k: Var(q·k), saturation, and training with three scales", measure, figures, report
)
