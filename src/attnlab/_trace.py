"""Every intermediate of one self-attention forward pass, as data, text or JSON.

The text has the seed program's sections in its order: the input's length and width,
the shapes of Q, K and V, the raw scores, the scaled scores, the softmax weights and
each token's output. Masked scores are −inf in the arrays, ``-inf`` in the text and
``null`` in JSON.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from .reference import AttentionSteps

_LABELS = {
    "zh": {
        "title": "自注意力演示",
        "length": "输入序列长度",
        "width": "输入维度",
        "shape": "{name} 的形状",
        "scores": "原始注意力分数",
        "scaled": "缩放后的注意力分数",
        "scale": "缩放系数",
        "weights": "注意力权重（Softmax 后）",
        "output": "自注意力输出",
        "row": "第 {i} 行{tok}",
        "token_output": "词 {i}{tok} 的输出",
    },
    "en": {
        "title": "Self-attention demo",
        "length": "Input length",
        "width": "Input dimension",
        "shape": "shape of {name}",
        "scores": "Raw attention scores",
        "scaled": "Scaled attention scores",
        "scale": "scale",
        "weights": "Attention weights (after softmax)",
        "output": "Self-attention output",
        "row": "row {i}{tok}",
        "token_output": "output of token {i}{tok}",
    },
}
LANGUAGES = tuple(_LABELS)
_RULE = "=" * 50


@dataclass
class Trace:
    """One forward pass: inputs X (L, d_model); Q, K, V (L, d_k); scores = Q·Kᵀ (L, L);
    ``scale`` (the scores' multiplier); scaled_scores = scale · scores with masked
    entries −inf; weights = softmax(scaled_scores) (L, L); output = weights·V (L, d_k);
    ``tokens`` label the rows (None: positions)."""

    inputs: np.ndarray
    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    scores: np.ndarray
    scale: float
    scaled_scores: np.ndarray
    weights: np.ndarray
    output: np.ndarray
    tokens: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: nested lists of Python floats (full precision), −inf as None."""
        result: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                value = [[None if math.isinf(x) else x for x in row] for row in value.tolist()]
            result[f.name] = value
        return result

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=1)

    @classmethod
    def from_reference(cls, inputs: Any, steps: AttentionSteps, tokens: list[str] | None = None) -> Trace:
        """The trace of ``attnlab.reference.SelfAttention``, bit for bit."""
        arrays = {name: np.array(getattr(steps, name)) for name in ("Q", "K", "V", "scores", "scaled_scores", "weights", "output")}
        return cls(inputs=np.array(inputs, dtype=float), scale=1.0 / steps.scale_factor, tokens=tokens, **arrays)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        """Inverse of :meth:`to_dict` (None in scaled_scores becomes −inf)."""
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            value = data.get(f.name)
            if f.name in ("scale", "tokens"):
                kwargs[f.name] = value
            else:
                kwargs[f.name] = np.array([[-np.inf if x is None else x for x in row] for row in value], dtype=float)
        return cls(**kwargs)

    def render(self, *, lang: str = "zh", precision: int = 4, title: str | None = None) -> str:
        """The seed demo's text, in Chinese (default) or English labels."""
        t = _LABELS[lang]

        def label(key: str, i: int) -> str:
            return t[key].format(i=i, tok=f" ({self.tokens[i]})" if self.tokens else "")

        def rows(key: str, matrix: np.ndarray) -> list[str]:
            cells = [[f"{x:.{precision}f}" for x in row] for row in matrix]
            width = max(len(c) for row in cells for c in row)
            return [f"{label(key, i)}: [{', '.join(c.rjust(width) for c in row)}]" for i, row in enumerate(cells)]

        def section(heading: str, matrix: np.ndarray) -> list[str]:
            return [f"\n  {heading}:"] + [f"    {line}" for line in rows("row", matrix)]

        L, d_model = self.inputs.shape
        lines = [_RULE, title or t["title"], _RULE, f"{t['length']}: {L}", f"{t['width']}: {d_model}", ""]
        lines += [f"  {t['shape'].format(name=n)}: {len(m)} × {m.shape[1]}" for n, m in zip("QKV", (self.Q, self.K, self.V))]
        lines += section(t["scores"], self.scores)
        if not math.isclose(self.scale, 1 / math.sqrt(self.Q.shape[1]), rel_tol=1e-12):
            lines.append(f"\n  {t['scale']}: {self.scale:.{precision}f}")
        lines += section(t["scaled"], self.scaled_scores)
        lines += section(t["weights"], self.weights)
        lines += ["", _RULE, f"{t['output']}:", _RULE]
        lines += rows("token_output", self.output)
        return "\n".join(lines)
