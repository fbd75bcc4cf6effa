"""What :func:`attnlab.analysis.head_types` gives back: each kind's (layers, heads) scores,
the strongest heads of a kind, each head's dominant kind, as text and as JSON a page can
embed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._validation import Array, fail, is_integer, is_real

__all__ = ["KINDS", "SHORT", "THRESHOLD", "HeadTypes"]

# the kinds of head head_types scores, in the order tables list them (a tie goes to the first)
KINDS = ("previous", "induction", "sink", "self", "cls", "sep", "punctuation")
SHORT = {
    "previous": "prev", "induction": "ind", "sink": "sink", "self": "self", "cls": "cls", "sep": "sep",
    "punctuation": "punct",
}  # fmt: skip
THRESHOLD = 0.5  # dominant(): a head whose every score is below this is of no kind


@dataclass(frozen=True)
class HeadTypes:
    """Every head's score as each kind of head (:func:`attnlab.analysis.head_types`).

    Args:
        scores: kind -> (layers, heads) float64 in [0, 1], the kinds of :data:`KINDS`
            that were scored, in that order.
        model: the model's name.
        tokens: the text's tokens (what every score but induction was read on).
        repeat: n, the repeated tokens of the induction sequence, or None (not scored).
        repeat_ids: the induction sequence a model ran, [BOS] + r + r (or r + r), or None.
        notes: what was left out, and why.
        ids: the text's ids, or None (a trace without ids).
    """

    scores: dict[str, Array]
    model: str
    tokens: list[str]
    repeat: int | None = None
    repeat_ids: list[int] | None = None
    notes: list[str] = field(default_factory=list)
    ids: list[int] | None = None

    @property
    def kinds(self) -> list[str]:
        """The kinds scored, in the order of :data:`KINDS`."""
        return list(self.scores)

    @property
    def shape(self) -> tuple[int, int]:
        """(layers, heads)."""
        first = next(iter(self.scores.values()))
        return int(first.shape[0]), int(first.shape[1])

    def strongest(self, kind: str, k: int = 3) -> list[tuple[int, int, float]]:
        """The ``k`` heads of highest score of ``kind``, highest first (a tie: the lower
        layer, then head, first), as (layer, head, score).

        Raises:
            ArgumentError: a kind not scored, k below 1.
        """
        if kind not in self.scores:
            raise fail("kind", f"one of {', '.join(self.scores)} (the kinds scored)", repr(kind))
        if not is_integer(k) or k < 1:
            raise fail("k", "an integer ≥ 1", repr(k))
        flat = self.scores[kind].ravel()  # (layers, heads) -> (layers·heads,), row-major: index = layer·heads + head
        order = np.argsort(-flat, kind="stable")[: int(k)]
        heads = self.shape[1]
        return [(int(i) // heads, int(i) % heads, float(flat[i])) for i in order]

    def dominant(self, threshold: float = THRESHOLD) -> list[list[str | None]]:
        """Each head's kind, as ``kinds[layer][head]``: of the kinds whose score reaches
        ``threshold``, the highest, the first-token sink last of all (a head with nothing to
        do rests on the first token: an induction head does, on a text without a repeat, so a
        sink score says less than any other); None where no score reaches it. A tie goes to
        the kind listed first in :data:`KINDS`.

        Raises:
            ArgumentError: a threshold outside [0, 1].
        """
        if not is_real(threshold) or not 0 <= threshold <= 1:
            raise fail("threshold", "a number in [0, 1]", repr(threshold))
        kinds = [k for k in self.kinds if k != "sink"] + [k for k in self.kinds if k == "sink"]
        stacked = np.stack([self.scores[k] for k in kinds])  # kinds × (layers, heads) -> (kinds, layers, heads)
        reached = np.where(stacked >= threshold, stacked, -1.0)
        others = reached[:-1] if kinds[-1] == "sink" else reached
        layers, heads = self.shape
        chosen: list[list[str | None]] = [[None] * heads for _ in range(layers)]
        for layer in range(layers):
            for head in range(heads):
                column = others[:, layer, head]
                if column.size and column.max() >= 0:
                    chosen[layer][head] = kinds[int(column.argmax())]
                elif reached[-1, layer, head] >= 0:
                    chosen[layer][head] = kinds[-1]
        return chosen

    @property
    def description(self) -> str:
        """What the numbers are, in one line."""
        layers, heads = self.shape
        induction = f"; induction on {self.repeat} random tokens twice" if self.repeat else ""
        return (
            f"head types of {self.model} ({layers} layers × {heads} heads): the share of attention each head puts "
            f"on each kind of key, over {len(self.tokens)} tokens of text{induction}"
        )

    def to_dict(self, *, top: int = 3, threshold: float = THRESHOLD) -> dict[str, Any]:
        """JSON-ready: the scores as nested lists, the ``top`` strongest heads of each kind
        as [layer, head, score], each head's dominant kind (None: none) at ``threshold``,
        and every other field."""
        return {
            "model": self.model, "kinds": self.kinds, "shape": list(self.shape),
            "scores": {kind: s.tolist() for kind, s in self.scores.items()},
            "strongest": {kind: [list(cell) for cell in self.strongest(kind, top)] for kind in self.kinds},
            "dominant": self.dominant(threshold), "threshold": threshold, "tokens": self.tokens, "ids": self.ids,
            "repeat": self.repeat, "repeat_ids": self.repeat_ids, "notes": self.notes,
            "description": self.description,
        }  # fmt: skip

    def render(self, *, top: int = 3, threshold: float = THRESHOLD) -> str:
        """The table as text: the ``top`` strongest heads of each kind (layer.head score),
        then each head's dominant kind and its score ("-": every score below ``threshold``),
        then the notes.

        Raises:
            ArgumentError: top below 1, a threshold outside [0, 1].
        """
        width = max(len(kind) for kind in self.kinds)
        lines = [self.description, f"strongest heads (layer.head score), top {top}:"]
        for kind in self.kinds:
            cells = "   ".join(f"{layer}.{head} {score:.2f}" for layer, head, score in self.strongest(kind, top))
            lines.append(f"  {kind:<{width}}  {cells}")
        dominant = self.dominant(threshold)
        table = [
            [
                "-" if kind is None else f"{SHORT[kind]} {self.scores[kind][layer, head]:.2f}"
                for head, kind in enumerate(kinds)
            ]
            for layer, kinds in enumerate(dominant)
        ]
        heads = [f"head {h}" for h in range(self.shape[1])]
        cell = max(len(c) for c in heads + [c for row in table for c in row])
        labels = [f"layer {layer}" for layer in range(self.shape[0])]
        first = max(len(label) for label in labels)
        lines.append(f"dominant kind per head (its score; '-': every score below {threshold:g}):")
        lines.append(" " * first + "".join(f"  {h:>{cell}}" for h in heads))
        lines += [
            label.ljust(first) + "".join(f"  {c:>{cell}}" for c in row)
            for label, row in zip(labels, table, strict=True)
        ]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        layers, heads = self.shape
        return f"HeadTypes(model={self.model!r}, {layers} layers × {heads} heads, kinds={self.kinds})"
