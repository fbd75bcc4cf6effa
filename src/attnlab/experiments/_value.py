"""``value``: why a separate V. One-layer attention trained on associative recall with V from
a learned W_v, V = X (the items) and V = K (the keys)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import _recall
from ._common import Experiment, curves_figure, progress_bar, ranking, table

__all__ = ["EXPERIMENT", "Value", "measure"]

MODES = (("learned", "learned W_v"), ("input", "V = X"), ("key", "V = K"))  # AttentionModel's value=, the label


@dataclass(frozen=True)
class Value:
    steps: int  # training steps per model
    curves: dict[str, list[float]]  # per label: the training loss of every step
    accuracy: dict[str, float]  # per label: held-out recall accuracy
    loss: dict[str, float]  # per label: held-out loss

    def metrics(self) -> dict[str, Any]:
        return {"accuracy": self.accuracy, "loss": self.loss}


def measure(quick: bool, seed: int, *, steps: int | None = None) -> Value:
    """The recall model (d = 16, 12 items) trained ``steps`` steps (200 quick, 1500 full)
    with each of the three values."""
    steps = steps if steps is not None else (200 if quick else 1500)
    curves, accuracy, losses = {}, {}, {}
    for mode, label in MODES:
        model = _recall.AttentionModel(64, 16, 16, rng=np.random.default_rng(seed), value=mode)
        fitted = _recall.fit(model, _recall.batch_maker(32, 12), steps, seed=seed, progress=progress_bar(label, steps))
        curves[label], accuracy[label], losses[label] = fitted["losses"], fitted["accuracy"], fitted["test_loss"]
    return Value(steps, curves, accuracy, losses)


def figures(measured: Value, out: Path) -> list[str]:
    """training.png: the three models' loss curves."""
    curves_figure(out / "training.png", measured.curves, "recall: where the values come from")
    return ["training.png"]


def report(measured: Value) -> str:
    """report.md: held-out accuracy and loss per V, what they show."""
    steps, accuracy, losses = measured.steps, measured.accuracy, measured.loss
    rows = [[label, accuracy[label], losses[label]] for label in measured.curves]
    if min(accuracy.values()) >= 0.99:
        verdict = (
            f"Given {steps} steps, all three solve this task (its values can be decoded from x by one "
            "linear readout): a separate V is not needed to succeed here; the curves show which learns faster."
        )
    else:
        verdict = f"with {steps} steps, {ranking(accuracy, lambda a: f'{a:.1%}')} in accuracy."
    return f"""# value: why a separate V?

The article's author says he does not know why attention needs its own V. Here the same model is
trained on associative recall (items are key + value embeddings, then a query key) for {steps}
steps with V from a learned W_v, V = X (the items themselves) and V = K (the keys):

{table(["V", "held-out accuracy", "held-out loss"], rows)}

![training](training.png)

**What it shows.** What is matched (q·k) and what is moved (v) are different jobs: with V = K the
keys must both match the query and carry the answer, with V = X the answer arrives mixed with the key
it was stored under. Whether separate weights for the moving pay is what the table measures: {verdict}

**结论。** “用来匹配的”（q·k）和“被搬运的”（v）是两件不同的事。V = K 时，键既要匹配又要携带答案；
V = X 时，答案和它的键混在一起；单独学习的 W_v 只需携带读出需要的信息。
"""


EXPERIMENT = Experiment(
    "value", "why a separate V: learned W_v against V = X and V = K on associative recall", measure, figures, report
)
