"""What an ablation gives back: the layers × heads effect of replacing each head's output,
with its labels, as text and as JSON a page can embed."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .._validation import Array, fail

__all__ = ["Ablation"]

_REPLACED = {
    "zero": "each head's output zeroed",
    "mean": "each head's output replaced by its mean over positions",
    "patch": "each head's output replaced by its output on the patch text",
}


@dataclass(frozen=True)
class Ablation:
    """The effect of replacing one head's output at a time (:func:`attnlab.analysis.ablate`).

    Args:
        effect: (layers, heads) float64. With a target: log p_ablated(target) − log
            p(target) at the last position (negative: the head helped predict it); without,
            KL(p ‖ p_ablated) of the next-token distribution there (≥ 0). NaN where the
            head was not ablated.
        metric: "logprob" (a target) or "kl".
        base_logprob: log p(target) at the last position of the unablated run; without a
            target, that of its most likely next token, ``predicted``.
        predicted: the unablated run's most likely next token, as text.
        target: the target token as text, or None (KL).
        target_id: its id, or None.
        mode: "zero", "mean" or "patch" (the head's output on ``patch_tokens``).
        tokens: the text's L tokens.
        patch_tokens: the patch text's L tokens, or None.
        layer_labels: the rows' names ("layer 0", or a transformers module's path).
        model: the model's name.
    """

    effect: Array
    metric: str
    base_logprob: float
    predicted: str
    target: str | None
    target_id: int | None
    mode: str
    tokens: list[str]
    patch_tokens: list[str] | None
    layer_labels: list[str]
    model: str

    @property
    def head_labels(self) -> list[str]:
        """The columns' names: "head 0", "head 1", …"""
        return [f"head {h}" for h in range(self.effect.shape[1])]

    @property
    def description(self) -> str:
        """What the numbers are, in one line."""
        if self.metric == "logprob":
            what = f"change in log p({self.target!r}) at the last position (base {self.base_logprob:.4f})"
        else:
            what = f"KL divergence of the next-token distribution at the last position (it predicts {self.predicted!r})"
        return f"{what}; {_REPLACED[self.mode]}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (a page can embed it): the effect as nested lists, NaN (a head not
        ablated) as None, and every other field."""
        effect = [[None if math.isnan(x) else float(x) for x in row] for row in self.effect.tolist()]
        return {
            "effect": effect, "metric": self.metric, "base_logprob": self.base_logprob, "predicted": self.predicted,
            "target": self.target, "target_id": self.target_id, "mode": self.mode, "tokens": self.tokens,
            "patch_tokens": self.patch_tokens, "layer_labels": self.layer_labels, "head_labels": self.head_labels,
            "model": self.model, "description": self.description,
        }  # fmt: skip

    def render(self, *, precision: int = 4) -> str:
        """The layers × heads table as text, under a line that says what it holds; a head
        not ablated shows "-".

        Args:
            precision: significant digits of every number, 1..17.

        Raises:
            ArgumentError: ``precision`` out of range.
        """
        if type(precision) is not int or not 1 <= precision <= 17:
            raise fail("precision", "an integer in 1..17", repr(precision))
        cells = [["-" if math.isnan(x) else f"{x:.{precision}g}" for x in row] for row in self.effect.tolist()]
        width = max(len(label) for label in self.head_labels + [c for row in cells for c in row])
        first = max(len(label) for label in self.layer_labels)
        lines = [self.description, " " * first + "".join(f"  {h:>{width}}" for h in self.head_labels)]
        lines += [
            label.ljust(first) + "".join(f"  {c:>{width}}" for c in row)
            for label, row in zip(self.layer_labels, cells, strict=True)
        ]
        return "\n".join(lines)

    def __repr__(self) -> str:
        layers, heads = self.effect.shape
        return (
            f"Ablation(model={self.model!r}, {layers} layers × {heads} heads, metric={self.metric}, mode={self.mode})"
        )
