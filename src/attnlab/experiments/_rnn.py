"""``rnn``: why attention beats a recurrent network. For each distance d, a tanh RNN and a
one-layer attention model with about as many weights, trained on sequences of d items, then
asked for the first item: d items before the query. Then, on the longest sequences, the
gradient reaching each input and the time of a forward and backward."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import nn
from .._timer import best_times
from . import _recall
from ._common import Experiment, figure, progress_bar, table

__all__ = ["EXPERIMENT", "NAMES", "Recurrence", "measure"]

NAMES = ("attention", "tanh RNN")
DIM, HIDDEN = 64, 84  # 3·64² ≈ 64·84 + 84²: the same number of weights in the two sequence parts


@dataclass(frozen=True)
class Recurrence:
    items: int  # the longest sequence (the gradients and times are of its models)
    steps: int  # training steps per model
    distances: list[int]
    weights: dict[str, int]  # per model: its number of weights
    results: dict[str, dict[str, Any]]  # per model: accuracy {d: …}, gradient_norm, seconds_per_batch, sequential_steps

    def metrics(self) -> dict[str, Any]:
        return {**self.results, "weights": self.weights}


def _model(name: str, keys: int, seed: int) -> _recall.RecallModel:
    rng = np.random.default_rng(seed)
    if name == "attention":
        return _recall.AttentionModel(keys, 16, DIM, rng=rng)
    return _recall.RNNModel(keys, 16, DIM, HIDDEN, rng=rng)


def _fastest_step(model: _recall.RecallModel, probe: _recall.Batch) -> float:
    """The seconds of one forward and backward, the best of three as they come (the first
    warms caches)."""

    def step() -> None:
        logits, backward = model(probe)
        _, loss_back = nn.cross_entropy(logits, probe.answers)
        backward(loss_back())

    return best_times({"step": step}, 3, settle=False)["step"]


def measure(quick: bool, seed: int, *, items: int | None = None, steps: int | None = None) -> Recurrence:
    """Both models trained ``steps`` steps (300 quick, 1500 full) at each distance 4, 8, …
    up to ``items`` (64 quick, 128 full), 2·items distinct keys, and scored on 256 sequences
    asking for the first item; ‖∂loss/∂x_t‖ per item and the time of a step on 64 sequences
    of ``items`` items."""
    items = items if items is not None else (64 if quick else 128)
    steps = steps if steps is not None else (300 if quick else 1500)
    distances = [d for d in (4, 8, 16, 32, 64, 128) if d <= items]
    keys = 2 * items  # distinct keys in every sequence
    weights = {name: sum(p.value.size for p in _model(name, keys, seed).parameters()) for name in NAMES}
    results: dict[str, dict[str, Any]] = {name: {"accuracy": {}} for name in NAMES}
    for name in NAMES:
        for d in distances:
            model = _model(name, keys, seed)
            _recall.fit(model, _recall.batch_maker(32, d, keys), steps, seed=seed,
                        progress=progress_bar(f"{name}, d={d}", steps))  # fmt: skip
            test = _recall.batch_maker(256, d, keys, at=d)(np.random.default_rng(seed + d))
            logits, _ = model(test)
            results[name]["accuracy"][d] = float((logits.argmax(axis=-1) == test.answers).mean())
        probe = _recall.batch_maker(64, items, keys)(np.random.default_rng(seed + 1))  # the last model's length
        seconds = _fastest_step(model, probe)
        assert model.input_grad is not None  # the backward just ran
        gradients = np.linalg.norm(model.input_grad, axis=-1).mean(axis=0)[:items]  # (items,): per item
        results[name].update(gradient_norm=gradients.tolist(), seconds_per_batch=seconds,
                             sequential_steps=items + 1 if "RNN" in name else 1)  # fmt: skip
    return Recurrence(items, steps, distances, weights, results)


def figures(measured: Recurrence, out: Path) -> list[str]:
    """distance.png: accuracy per distance (left), the gradient per input (right)."""
    drawn, (left, right) = figure(2)
    distances, items = measured.distances, measured.items
    for name, r in measured.results.items():
        left.plot(distances, [r["accuracy"][d] for d in distances], "o-", label=name)
        right.plot(np.arange(items, 0, -1), r["gradient_norm"], label=name)
    left.axhline(1 / 16, color="#999", linestyle="--", label="chance: 1/16")
    left.set_ylim(0, 1.05)
    left.set_xscale("log", base=2)
    left.set_xlabel("distance from the query (items)")
    left.set_ylabel("held-out accuracy")
    left.legend()
    right.set_xlabel("distance of item t from the end")
    right.set_ylabel("‖∂loss/∂x_t‖")
    right.set_yscale("log")
    right.set_xscale("log", base=2)
    right.legend()
    drawn.savefig(out / "distance.png", dpi=120)
    return ["distance.png"]


def _reach(measured: Recurrence) -> tuple[str, str]:
    """Attention's accuracy over the distances and the RNN's gradient, first item against
    last, in words from the numbers: English and Chinese."""
    attention = [measured.results["attention"]["accuracy"][d] for d in measured.distances]
    low, high = min(attention), max(attention)
    flat = high - low < 0.05
    spread = (f"its accuracy stays within {high - low:.1%} ({low:.1%}–{high:.1%}) at every distance"
              if flat else f"its accuracy ranges {low:.1%}–{high:.1%} over the distances")  # fmt: skip
    spread_zh = (
        f"准确率在各个距离上相差不到 {high - low:.1%}" if flat else f"准确率随距离在 {low:.1%}–{high:.1%} 之间变化"
    )
    gradient = measured.results["tanh RNN"]["gradient_norm"]
    fall = gradient[-1] / gradient[0] if gradient[0] > 0 else float("inf")
    factor = f"{fall:,.0f}" if fall < 1e6 else f"{fall:.1e}"
    carried = (f"the RNN's gradient ‖∂loss/∂x_t‖ is {factor} times smaller at the first item than at the last (right)"
               if fall > 1 else "the RNN's gradient ‖∂loss/∂x_t‖ does not fall with the distance here")  # fmt: skip
    carried_zh = (f"RNN 的梯度在第一个输入处比最后一个小 {factor} 倍" if fall > 1
                  else "这里 RNN 的梯度没有随距离衰减")  # fmt: skip
    return f"{spread}, and {carried}", f"{spread_zh}；{carried_zh}"


def report(measured: Recurrence) -> str:
    """report.md: weights, sequential steps, time and accuracy per distance, what they show."""
    distances, items, results = measured.distances, measured.items, measured.results
    rnn_accuracy = results["tanh RNN"]["accuracy"]
    rnn_verdict = (
        f"With the same budget the RNN reaches {rnn_accuracy[distances[0]]:.1%} at d = {distances[0]} and "
        f"{rnn_accuracy[distances[-1]]:.1%} at d = {distances[-1]} (chance: 1 in 16); "
        + ("it barely learns the task at any distance here, so the gradient panel compares a trained attention "
           "model with an RNN that did not converge." if rnn_accuracy[distances[0]] < 0.5
           else "it learns short distances and loses the long ones."
           if rnn_accuracy[distances[-1]] < rnn_accuracy[distances[0]] - 0.1
           else "it holds its accuracy at every distance here.")
    )  # fmt: skip
    rows = [[name, measured.weights[name], r["sequential_steps"], f"{r['seconds_per_batch'] * 1e3:.1f} ms",
             *[r["accuracy"][d] for d in distances]] for name, r in results.items()]  # fmt: skip
    header = ["model", "weights", "sequential steps", "fwd+bwd, 64 sequences", *[f"d = {d}" for d in distances]]
    reach, reach_zh = _reach(measured)
    return f"""# rnn: why attention beats a recurrent network

A tanh RNN and a one-layer attention model with about the same number of weights
({", ".join(f"{k}: {v:,}" for k, v in measured.weights.items())}), each trained for {measured.steps} steps on recall
over d items for every distance d, then asked for the first item, d places before the query (time
and gradients: the models of d = {items}):

{table(header, rows)}

![distance](distance.png)

**What it shows.** Attention reaches every item in one step: {reach}; the RNN must carry the
item through d steps of tanh and must run its {items + 1} steps one after another where attention runs
one. {rnn_verdict}

**结论。** 注意力一步就能到达任何位置：{reach_zh}。RNN 要经过 d 步 tanh，而且必须一步接一步地计算。
"""


EXPERIMENT = Experiment(
    "rnn", "why attention beats an RNN: recall at distance 4 … 128, gradients, sequential steps", measure, figures,
    report,
)  # fmt: skip
