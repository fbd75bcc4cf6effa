"""A trace as text: the seed program's sections in its order, in Chinese or English, the
columns aligned in a terminal (a Chinese character takes two)."""

from __future__ import annotations

import math
import unicodedata
from typing import Protocol

from .._validation import Array, fail, is_integer
from ..engine._problem import default_scale
from ._display import display_text
from ._labels import LABELS
from ._variants import Variants

__all__ = ["render_text"]

_RULE = "=" * 50


class _Head(Protocol):
    """What the text reads of one head of a trace (a :class:`~._trace.Trace` of one head):
    its fields, then its properties."""

    Q: Array
    K: Array
    V: Array
    scores: Array
    scaled_scores: Array
    weights: Array
    output: Array
    variants: Variants | None

    @property
    def masked(self) -> Array: ...


class _Traced(Protocol):
    """What the text reads of a trace (a :class:`~._trace.Trace`, which this module does not
    import): its fields, then its properties and methods."""

    inputs: Array
    tokens: list[str] | None
    key_tokens: list[str] | None
    scale: float
    layer_output: Array | None

    @property
    def key_labels(self) -> list[str]: ...
    @property
    def num_keys(self) -> int: ...
    @property
    def num_heads(self) -> int: ...
    def head(self, h: int) -> _Head: ...


def render_text(trace: _Traced, lang: str, precision: int, title: str | None) -> str:
    """See :meth:`Trace.render`."""
    if lang not in LABELS:
        raise fail("lang", f"one of {', '.join(LABELS)}", repr(lang))
    if not is_integer(precision) or not 0 <= precision <= 17:
        raise fail("precision", "an integer in 0..17", repr(precision))
    t = LABELS[lang]

    names = None if trace.tokens is None else [display_text(token) for token in trace.tokens]  # no ESC, no surrogate
    # the columns' headers: the keys' own labels in cross-attention, else the tokens
    keyed = trace.key_tokens is not None or (names is not None and trace.num_keys != len(names))
    key_names = [display_text(token) for token in trace.key_labels] if keyed else names

    def label(key: str, i: int) -> str:
        return t[key].format(i=i, tok="" if names is None else f" ({names[i]})")

    def rows(key: str, matrix: Array, header: bool = False) -> list[str]:
        cells = [[f"{x:.{precision}f}" for x in row] for row in matrix]
        width = max(len(c) for row in cells for c in row)
        # a column is as wide as its widest number, or its key's token when there is a header
        widths = [max(width, _display_width(n)) for n in key_names] if header and key_names else [width] * len(cells[0])
        labels = [label(key, i) for i in range(len(cells))]
        # labels differ in width (a two-digit row, a Chinese token takes two columns): pad them
        label_width = max(_display_width(text) for text in labels)
        lines = [
            f"{_pad(text, label_width, left=False)}: [{', '.join(map(str.rjust, row, widths))}]"
            for text, row in zip(labels, cells, strict=True)
        ]
        if header and key_names is not None:  # the keys above their columns
            keys = ", ".join(_pad(n, w) for n, w in zip(key_names, widths, strict=True))
            lines.insert(0, f"{_pad(t['keys'], label_width)}   {keys}")
        return lines

    def section(heading: str, matrix: Array) -> list[str]:
        return [f"\n  {heading}:"] + [f"    {line}" for line in rows("row", matrix, header=True)]

    L, d_model = trace.inputs.shape
    lines = [_RULE, display_text(title or t["title"]), _RULE, f"{t['length']}: {L}", f"{t['width']}: {d_model}"]
    lines += [f"{t['keys_length']}: {trace.num_keys}"] if keyed or trace.num_keys != L else []
    for h in range(trace.num_heads):
        one = trace.head(h)
        lines += [f"\n-- {t['head']} {h} --"] if trace.num_heads > 1 else []
        lines += [""] + [
            f"  {t['shape'].format(name=n)}: {len(m)} × {m.shape[1]}"
            for n, m in zip("QKV", (one.Q, one.K, one.V), strict=True)
        ]
        if one.variants is not None and not one.variants.plain:
            lines.append(f"  {t['rules']}: {one.variants.describe(lang)}")
            lines += [f"  {t['masked']}"] if one.masked.any() else []
        lines += section(t["scores"], one.scores)
        if not math.isclose(trace.scale, default_scale(one.Q.shape[1]), rel_tol=1e-12):
            lines.append(f"\n  {t['scale']}: {trace.scale:.{precision}f}")
        lines += section(t["scaled"], one.scaled_scores)
        lines += section(t["weights"], one.weights)
        heading = t["output"] if trace.num_heads == 1 else t["head_output"].format(h=h)
        lines += ["", _RULE, f"{heading}:", _RULE]
        lines += rows("token_output", one.output)
    if trace.layer_output is not None:
        lines += ["", _RULE, f"{t['layer_output']}:", _RULE]
        lines += rows("token_output", trace.layer_output)
    return "\n".join(lines)


def _display_width(text: str) -> int:
    """Columns ``text`` takes in a terminal: East Asian wide and full-width characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _pad(text: str, width: int, left: bool = True) -> str:
    """``text`` padded with spaces to ``width`` terminal columns, on the left (right-aligned) or right."""
    space = " " * max(0, width - _display_width(text))
    return space + text if left else text + space
