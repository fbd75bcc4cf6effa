"""Every intermediate of one attention forward pass, as data, text or JSON: self-attention
over one sequence, or cross-attention of L queries over S keys of another sequence.

The text has the seed program's sections in its order: the input's length and width,
the shapes of Q, K and V, the raw scores, the scaled scores, the softmax weights and
each token's output. The scaled scores are what the engine's softmax read, every variant
applied (softcap, the biases, the masks: ``engine._masks.modify_scores_``); masked scores
are −inf in the arrays, ``-inf`` in the text and ``null`` in JSON.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._json import json_text
from .._validation import ArgumentError, Array, fail, is_integer, real_number
from ..engine._attention import attention
from ..engine._masks import mask_mod_allows, modify_scores_
from ..engine._problem import Problem, default_scale, make_problem
from ..engine.variants import Alignment, MaskMod, Rules
from ..reference import AttentionSteps
from ._display import display_text, notebook_html
from ._variants import Variants

__all__ = ["ARRAYS", "LANGUAGES", "Trace", "build_trace", "json_ready"]

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
        "head": "注意力头",
        "head_output": "注意力头 {h} 的输出（out_proj 之前）",
        "layer_output": "层输出（拼接各头后经 out_proj）",
        "keys": "键",
        "keys_length": "键序列长度",
        "rules": "注意力规则",
        "masked": "-inf：被屏蔽的键（权重为 0）",
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
        "head": "head",
        "head_output": "Output of head {h} (before out_proj)",
        "layer_output": "Layer output (the heads side by side, through out_proj)",
        "keys": "keys",
        "keys_length": "Keys' length",
        "rules": "attention rules",
        "masked": "-inf: a masked key (its weight is 0)",
    },
}
LANGUAGES = tuple(_LABELS)
_RULE = "=" * 50


ARRAYS = ("inputs", "Q", "K", "V", "scores", "scaled_scores", "weights", "output")


# JSON has no NaN or infinity: −∞ (a masked score) is written null, +∞ "Infinity" and
# NaN "NaN", so that every trace is valid JSON and reads back as it was.
_NON_FINITE = {"Infinity": math.inf, "NaN": math.nan}


def json_ready(value: Any) -> Any:
    """Nested lists of Python floats, the non-finite ones encoded as above."""
    if isinstance(value, list):
        return [json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None if value < 0 else "NaN" if math.isnan(value) else "Infinity"
    return value


def _number(value: Any) -> Any:
    """One number of :func:`json_ready`'s encoding, decoded."""
    if value is None:
        return -math.inf
    if isinstance(value, str):
        return _NON_FINITE[value]  # KeyError: not a number
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"not a number: {value!r}")
    return float(value)  # OverflowError: an integer beyond float range


_decode = np.frompyfunc(_number, 1, 1)


def _from_json(value: Any) -> Array:
    """Inverse of :func:`json_ready`, as a float array (NumPy refuses nesting past 64
    levels and ragged rows, so a hostile document never recurses deeply)."""
    raw = np.array(value, dtype=object)
    return np.asarray(_decode(raw), dtype=float) if raw.size else raw.astype(float)


@dataclass
class Trace:
    """One forward pass of attention: L queries over S keys (S = L in self-attention).

    inputs X (L, d_model), the queries' input; Q (L, d_k); K (S, d_k), V (S, d_v); scores = Q·Kᵀ (L, S);
    ``scale``, the scores' multiplier; scaled_scores Z = softcap(scale · scores) + bias, −inf where masked
    (L, S); weights = softmax(Z) (L, S) (with the sinks, if any); output = weights·V (L, d_v); ``tokens``
    label the rows (None: positions), ``key_tokens`` the keys (cross-attention: the other sequence's tokens;
    None: as ``tokens`` when S = L, else positions). A multi-head trace has a leading head axis on every array
    but ``inputs`` (Q (H, L, d_k), weights (H, L, S) …) and ``layer_output`` (L, D), the output after out_proj
    (None for a single head). ``random_seed``: the seed of the random (untrained) weights that made it, said
    by pages and plots, or None. ``bias``: what was added to the softcapped scores (a float mask, ALiBi), of
    the scores' shape, or None. ``variants``: the rules it was built with (:class:`Variants`), or None.
    (Saved traces from before a field load with None.)
    """

    inputs: Array
    Q: Array
    K: Array
    V: Array
    scores: Array
    scale: float
    scaled_scores: Array
    weights: Array
    output: Array
    tokens: list[str] | None = None
    layer_output: Array | None = None
    random_seed: int | None = None
    bias: Array | None = None
    variants: Variants | None = None
    key_tokens: list[str] | None = None

    @property
    def num_heads(self) -> int:
        return 1 if self.weights.ndim == 2 else self.weights.shape[0]

    @property
    def masked(self) -> Array:
        """Where a rule ruled a key out: −∞ among the scaled scores, not among the raw ones (overflow)."""
        return np.isneginf(self.scaled_scores) & ~np.isneginf(self.scores)

    def head(self, h: int) -> Trace:
        """The single-head trace of head ``h``.

        Args:
            h: the head, in 0..H − 1.

        Raises:
            ArgumentError: ``h`` is not a head of the trace.
        """
        return _one_head(self, h)

    @property
    def labels(self) -> list[str]:
        """The tokens, or the positions 0..L−1 as text."""
        return self.tokens if self.tokens is not None else [str(i) for i in range(len(self.inputs))]

    @property
    def num_keys(self) -> int:
        """S, the keys' count (L in self-attention)."""
        return int(self.weights.shape[-1])

    @property
    def key_labels(self) -> list[str]:
        """The keys' :attr:`key_tokens`, else :attr:`labels` when S = L, else the positions 0..S−1."""
        return self.key_tokens or _key_positions(self)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: nested lists of Python floats (exact); −inf as None, +inf "Infinity", NaN "NaN"."""
        return {f.name: _json_field(getattr(self, f.name)) for f in fields(self)}

    def to_json(self) -> str:
        """The trace as JSON: valid JSON always (see :meth:`to_dict` for non-finite values)."""
        return json_text(self.to_dict())

    @classmethod
    def from_reference(cls, inputs: Any, steps: AttentionSteps, tokens: list[str] | None = None) -> Trace:
        """The trace of ``attnlab.reference.SelfAttention``, bit for bit.
        Args:
            inputs: the reference's input X, (L, d_model) as nested lists.
            steps: the reference's ``AttentionSteps`` of that input.
            tokens: L labels of the rows (None: positions).
        """
        arrays: dict[str, Any] = {name: np.array(getattr(steps, name)) for name in ARRAYS if name != "inputs"}
        return cls(inputs=np.array(inputs, dtype=float), scale=1.0 / steps.scale_factor, tokens=tokens, **arrays)

    @classmethod
    def from_dict(cls, data: Any, source: str = "trace") -> Trace:
        """Inverse of :meth:`to_dict`, checked.

        Args:
            data: what :meth:`to_dict` gave (JSON-decoded).
            source: the name the errors give it (a file's name).

        Raises:
            ArgumentError: naming ``source`` and the field missing, or the shapes that do not fit.
        """
        return _trace_from_dict(data, source)

    def render(self, *, lang: str = "zh", precision: int = 4, title: str | None = None) -> str:
        """The seed demo's text, in Chinese (default) or English; a multi-head trace head by head.

        Args:
            lang: the labels' language, "zh" or "en".
            precision: decimals of every number, 0..17.
            title: the heading (default the language's "self-attention trace").

        Raises:
            ArgumentError: ``lang`` or ``precision`` out of range.
        """
        return _render(self, lang, precision, title)

    def _repr_html_(self) -> str | None:
        """Jupyter's display: the page in a sandboxed iframe, or None (the text repr) when too large."""
        return notebook_html(self)

    def __repr__(self) -> str:
        (L, d_model), keys = self.inputs.shape, f", S={self.num_keys}" if self.num_keys != len(self.inputs) else ""
        return f"Trace(L={L}{keys}, d_model={d_model}, heads={self.num_heads}, scale={self.scale:.4g})"


def _key_positions(trace: Trace) -> list[str]:
    """The keys' labels of a trace without key tokens: the rows' when S = L, else the positions 0..S−1."""
    return trace.labels if trace.num_keys == len(trace.inputs) else [str(j) for j in range(trace.num_keys)]


def _one_head(trace: Trace, h: int) -> Trace:
    """Head ``h`` of a trace (itself when it has one head), without the layer's output."""
    if not is_integer(h) or not 0 <= h < trace.num_heads:
        raise fail("h", f"a head index in 0..{trace.num_heads - 1}", repr(h))
    if trace.weights.ndim == 2:
        return trace
    arrays = {name: getattr(trace, name)[h] for name in ARRAYS if name != "inputs"}
    bias = None if trace.bias is None else trace.bias[h]
    variants = None if trace.variants is None else trace.variants.head(h)
    return Trace(
        inputs=trace.inputs, scale=trace.scale, tokens=trace.tokens, random_seed=trace.random_seed, bias=bias,
        variants=variants, key_tokens=trace.key_tokens, **arrays,
    )  # fmt: skip


def _json_field(value: Any) -> Any:
    """A trace's field as :meth:`Trace.to_dict` writes it."""
    if isinstance(value, np.ndarray):  # only a matrix with non-finite values needs the walk
        return value.tolist() if np.isfinite(value).all() else json_ready(value.tolist())
    return value.to_dict() if isinstance(value, Variants) else value


def _decoded(data: dict[str, Any], name: str, source: str) -> Array:
    """Field ``name`` of a saved trace as a float array, or an error naming it."""
    try:
        return _from_json(data[name])
    except (TypeError, ValueError, KeyError, OverflowError, RecursionError):
        raise ArgumentError(f"{source}: {name}: expected a matrix of numbers") from None


def _trace_from_dict(data: Any, source: str) -> Trace:
    """See :meth:`Trace.from_dict`."""
    if not isinstance(data, dict):
        raise ArgumentError(f"{source}: expected a trace (a dict as Trace.to_dict gives)")
    missing = [name for name in (*ARRAYS, "scale") if name not in data]
    if missing:
        raise ArgumentError(f"{source}: not a trace, missing {', '.join(missing)}")
    arrays = {name: _decoded(data, name, source) for name in ARRAYS}
    if arrays["inputs"].ndim != 2 or 0 in arrays["inputs"].shape:
        raise ArgumentError(f"{source}: inputs: expected a (L, d_model) matrix, got shape {arrays['inputs'].shape}")
    L = arrays["inputs"].shape[0]
    weights = arrays["weights"]
    if weights.ndim not in (2, 3) or weights.shape[-2] != L or weights.shape[-1] < 1:
        raise ArgumentError(
            f"{source}: weights: expected shape (L, S) or (H, L, S) with L={L} input rows, got {weights.shape}"
        )
    S = weights.shape[-1]
    for name in ("scores", "scaled_scores"):
        if arrays[name].shape != weights.shape:
            raise ArgumentError(
                f"{source}: {name}: expected shape {weights.shape} as weights, got {arrays[name].shape}"
            )
    queries = weights.shape[:-1]  # (L,) or (H, L): Q and the output have one row per query and head
    keys = (*weights.shape[:-2], S)  # (S,) or (H, S): K and V one per key and head
    for name, like, rows in (("Q", "Q", queries), ("K", "Q", keys), ("V", "V", keys), ("output", "V", queries)):
        shape, expected = arrays[name].shape, (*rows, arrays[like].shape[-1] if arrays[like].ndim else -1)
        if arrays[name].ndim != len(expected) or shape != expected or shape[-1] < 1:
            raise ArgumentError(f"{source}: {name}: expected shape {(*rows, 'width')}, got {shape}")
    layer_output = None
    if data.get("layer_output") is not None:
        layer_output = _decoded(data, "layer_output", source)
        if layer_output.ndim != 2 or layer_output.shape[0] != L or weights.ndim != 3:
            wanted = f"shape ({L}, width) beside (H, L, L) weights"
            raise ArgumentError(f"{source}: layer_output: expected {wanted}, got {layer_output.shape}")
    tokens = data.get("tokens")
    if tokens is not None and (not isinstance(tokens, list) or len(tokens) != L):
        raise ArgumentError(
            f"{source}: tokens: expected {L} labels, one per input row, got "
            f"{len(tokens) if isinstance(tokens, list) else type(tokens).__name__}"
        )
    if tokens is not None and not all(isinstance(t, str) for t in tokens):
        bad = next(t for t in tokens if not isinstance(t, str))
        raise ArgumentError(f"{source}: tokens: expected labels (strings), got {json.dumps(bad)}")
    key_tokens = _saved_key_tokens(data, S, source)
    scale = data["scale"]
    try:
        finite = not isinstance(scale, bool) and isinstance(scale, (int, float)) and math.isfinite(scale)
    except OverflowError:  # an integer beyond float range
        finite = False
    if not finite:
        got = f"an integer of {len(str(scale))} digits" if type(scale) is int else repr(scale)  # a bool: True
        raise ArgumentError(f"{source}: scale: expected a finite number, got {got}")
    # kept as saved, lone surrogates (a Linux argument's undecodable bytes) included: each
    # display (text, plot, page) escapes them and control characters, as display_text says
    labels = None if tokens is None else [str(t) for t in tokens]
    seed = data.get("random_seed")
    if seed is not None and (not is_integer(seed) or seed < 0):
        raise ArgumentError(f"{source}: random_seed: expected a whole number ≥ 0 or null, got {seed!r}")
    bias, variants = _saved_variants(data, weights.shape, source)
    _check_not_numbers(arrays, float(scale), bias, source)
    return Trace(
        scale=float(data["scale"]), tokens=labels, layer_output=layer_output, random_seed=seed, bias=bias,
        variants=variants, key_tokens=key_tokens, **arrays,
    )  # fmt: skip


def _saved_key_tokens(data: dict[str, Any], keys: int, source: str) -> list[str] | None:
    """A saved trace's key tokens: null (absent in traces from before), or ``keys`` strings, one per key."""
    key_tokens = data.get("key_tokens")
    if key_tokens is None:
        return None
    if not isinstance(key_tokens, list) or len(key_tokens) != keys:
        got = f"{len(key_tokens)} labels" if isinstance(key_tokens, list) else type(key_tokens).__name__
        raise ArgumentError(f"{source}: key_tokens: expected {keys} labels, one per key (S = {keys}), got {got}")
    if not all(isinstance(t, str) for t in key_tokens):
        bad = next(t for t in key_tokens if not isinstance(t, str))
        raise ArgumentError(f"{source}: key_tokens: expected labels (strings), got {json.dumps(bad)}")
    return list(key_tokens)


# Below this no score of any dtype overflows (it is float16's largest number), so a saved
# score that is not a number there was not computed: it was written in.
_NO_OVERFLOW = 65504.0


def _check_not_numbers(arrays: dict[str, Array], scale: float, bias: Array | None, source: str) -> None:
    """A saved trace's NaN and infinities, where the engine makes them: a score s = q·k is
    non-finite only past overflow, Σ|q||k| ≥ :data:`_NO_OVERFLOW`; a weight is NaN only in a
    row where some scaled score can overflow (|scale|·Σ|q||k| ≥ it, or a bias is +∞, NaN or
    beyond it). Elsewhere a NaN or null (−∞) was written in by hand, and is refused.

    Raises:
        ArgumentError: a non-finite score, or a NaN weight, where none can arise.
    """
    Q, K = np.abs(arrays["Q"]), np.abs(arrays["K"])
    with np.errstate(all="ignore"):
        bound = Q @ np.swapaxes(K, -1, -2)  # (…, L, L): |q·k| ≤ Σ|q||k|, NaN where q or k is
    scores = arrays["scores"]
    written = ~np.isfinite(scores) & (bound < _NO_OVERFLOW)
    if written.any():
        *_, i, j = np.argwhere(written)[0]
        got = scores[tuple(np.argwhere(written)[0])]
        where = "null (−∞)" if np.isneginf(got) else str(got)
        raise ArgumentError(
            f"{source}: scores: expected q·k, a finite number where it cannot overflow, got {where} at row {i}, "
            f"column {j}"
        )
    with np.errstate(all="ignore"):
        overflows = ~(abs(scale) * bound < _NO_OVERFLOW)  # (…, L, L), NaN bounds included
        if bias is not None:
            overflows |= ~((bias < _NO_OVERFLOW) & ~np.isnan(bias))
    can_be_nan = overflows.any(axis=-1, keepdims=True)  # (…, L, 1): the row's softmax can see +∞ or NaN
    weights = arrays["weights"]
    written = np.isnan(weights) & ~can_be_nan
    if written.any():
        *_, i, j = np.argwhere(written)[0]
        raise ArgumentError(
            f"{source}: weights: expected numbers (no score of row {i} can overflow), got NaN at row {i}, column {j}"
        )
    with np.errstate(invalid="ignore"):  # a softmax's weights: each in [0, 1], a row summing to at most 1 (sinks: less)
        outside = ~can_be_nan & ~((weights >= 0) & (weights <= 1 + 1e-6))
        sums = np.where(can_be_nan[..., 0], 0.0, np.nansum(weights, axis=-1))
    expected = "a softmax's weights (each in [0, 1], a row's sum at most 1)"
    if outside.any():
        cell = tuple(np.argwhere(outside)[0])
        got = json.dumps(_json_field(np.asarray(weights[cell]).reshape(1))[0])
        raise ArgumentError(f"{source}: weights: expected {expected}, got {got} at row {cell[-2]}, column {cell[-1]}")
    over = sums > 1 + 1e-5
    if over.any():
        cell = tuple(np.argwhere(over)[0])
        raise ArgumentError(f"{source}: weights: expected {expected}, got a sum of {sums[cell]:.6g} in row {cell[-1]}")
    for name in ("inputs", "Q", "K", "V", "output"):  # NaN only where a row's weights can be NaN
        nan = np.isnan(arrays[name]) if name != "output" else np.isnan(arrays[name]) & ~can_be_nan
        if nan.any():
            raise ArgumentError(
                f"{source}: {name}: expected numbers, got NaN at {tuple(map(int, np.argwhere(nan)[0]))}"
            )


def _saved_variants(data: dict[str, Any], shape: tuple[int, ...], source: str) -> tuple[Array | None, Variants | None]:
    """A saved trace's bias (checked to be of the scores' ``shape``) and variants, each None when not saved."""
    bias = None
    if data.get("bias") is not None:
        bias = _decoded(data, "bias", source)
        if bias.shape != shape:
            raise ArgumentError(f"{source}: bias: expected shape {shape} as weights, got {bias.shape}")
    variants = None if data.get("variants") is None else Variants.from_dict(data["variants"], source)
    heads = 1 if len(shape) == 2 else shape[0]
    for name in ("alibi_slopes", "sinks"):
        values = None if variants is None else getattr(variants, name)
        if values is not None and len(values) not in (1, heads):
            raise ArgumentError(f"{source}: variants: {name}: expected one per head ({heads}), got {len(values)}")
    return bias, variants


def _render(trace: Trace, lang: str, precision: int, title: str | None) -> str:
    """See :meth:`Trace.render`."""
    if lang not in _LABELS:
        raise fail("lang", f"one of {', '.join(_LABELS)}", repr(lang))
    if not is_integer(precision) or not 0 <= precision <= 17:
        raise fail("precision", "an integer in 0..17", repr(precision))
    t = _LABELS[lang]

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


def build_trace(
    inputs: Array,
    Q: Array,
    K: Array,
    V: Array,
    *,
    scale: float | None,
    tokens: Sequence[str] | None,
    is_causal: bool = False,
    attn_mask: ArrayLike | None = None,
    causal_alignment: Alignment = "top_left",
    window: tuple[int | None, int | None] | None = None,
    softcap: float | None = None,
    alibi_slopes: ArrayLike | None = None,
    sinks: ArrayLike | None = None,
    mask_mod: MaskMod | None = None,
    key_tokens: Sequence[str] | None = None,
    rules: Rules | None = None,
) -> Trace:
    """The trace of attention over projections Q (…, L, d_k) of ``inputs`` (L, d_model)
    and K (…, S, d_k), V (…, S, d_v): of the same rows in self-attention (S = L), of
    another sequence's in cross-attention. The weights and output come from the engine,
    and the scores beside them for display, the scaled ones modified as the engine
    modified them, through the engine's own Problem (``engine._masks.modify_scores_``).

    Args:
        inputs: X, (L, d_model), the queries' input.
        Q: (…, L, d_k), one head or (H, L, d_k).
        K: (…, S, d_k).
        V: (…, S, d_v).
        scale: multiplies Q·Kᵀ; None: 1/√d_k (1 when d_k = 0).
        tokens: L labels of the rows, or None.
        is_causal: query i attends to keys j <= i only (j <= i + S − L bottom-right aligned).
        attn_mask: bool (True: may attend) or float (added), broadcasting to (…, L, S).
        causal_alignment: "top_left" or "bottom_right" (the same when L = S).
        window: (left, right): query i attends to keys i − left … i + right only.
        softcap: c > 0: scale·Q·Kᵀ becomes c·tanh(scale·Q·Kᵀ / c).
        alibi_slopes: one slope per head, (H,) ((1,) for one head): adds −slope·|j − i|.
        sinks: one sink logit per head, (H,) ((1,) for one head).
        mask_mod: FlexAttention's mask function, as :func:`attnlab.attention` takes it.
        key_tokens: S labels of K's and V's rows when they are not the queries' (the
            other sequence's tokens in cross-attention), or None (the same as ``tokens``).
        rules: the variants as one ``engine.variants.Rules`` (with any registered from
            outside the package), in place of their keywords; None: built from them.

    Raises:
        ValueError, TypeError: tokens that are not L labels, key tokens that are not S
            labels, and any argument that :func:`attnlab.attention` refuses.
    """
    scale = default_scale(Q.shape[-1]) if scale is None else real_number("scale", scale)
    L = len(inputs)
    if L == 0:  # a trace shows rows: none is nothing to show, and a page or plot of it would fail
        raise fail("X", "at least one row (token) to trace", "0 rows")
    if isinstance(tokens, str):
        raise fail("tokens", f"{L} labels, one per row of the input", "a string", TypeError)
    if tokens is not None and len(tokens) != L:
        raise fail("tokens", f"{L} labels, one per row of the input", f"{len(tokens)} labels")
    S = np.shape(K)[-2] if np.ndim(K) >= 2 else 0
    if isinstance(key_tokens, str):
        raise fail("key_tokens", f"{S} labels, one per row of K", "a string", TypeError)
    if key_tokens is not None and len(key_tokens) != S:
        raise fail("key_tokens", f"{S} labels, one per row of K and V", f"{len(key_tokens)} labels")
    keywords = Rules(is_causal, causal_alignment, window, softcap, alibi_slopes, sinks, mask_mod)
    if rules is not None and keywords.given():
        raise fail("rules", "the variants either as rules or as keywords", f"both ({', '.join(keywords.given())})")
    rules = keywords if rules is None else rules
    result = attention(Q, K, V, attn_mask=attn_mask, scale=scale, need_weights=True, rules=rules)
    pb = result.problem
    with np.errstate(over="ignore", invalid="ignore"):  # overflowing scores are shown as ±inf or NaN
        scores = Q @ np.swapaxes(K, -1, -2)  # (…, L, L)
        scaled = scores * scale
        _modify(pb, scaled)  # softcap, the biases, and −inf where a rule rules key j out
    bias = None
    if pb.alibi is not None or pb.extra or (pb.mask is not None and pb.mask.dtype != bool):
        float_mask = None if pb.mask is None or pb.mask.dtype == bool else pb.mask
        biases = Rules.of(
            causal_alignment=rules.causal_alignment, alibi_slopes=rules.alibi_slopes,
            **{variant.name: rules.extra[variant.name] for variant, _ in pb.extra},
        )  # fmt: skip
        additive = make_problem(Q, K, V, float_mask, 0.0, scale, False, None, biases)
        bias = np.zeros_like(scaled)
        _modify(additive, bias)  # the float mask and ALiBi alone, (…, L, L)
    variants = Variants.of_problem(pb)
    labels = None if tokens is None else list(tokens)
    weights = result.weights
    assert weights is not None  # need_weights: the naive engine's
    key_labels = None if key_tokens is None else list(key_tokens)
    return Trace(
        inputs, Q, K, V, scores, scale, scaled, weights, result.output, labels, bias=bias, variants=variants,
        key_tokens=key_labels,
    )  # fmt: skip


def _modify(pb: Problem, scores: Array) -> None:
    """Steps 1 and 2 of ``engine._masks`` on the whole (…, L, S) matrix of scale·Q·Kᵀ, in place."""
    L, S = pb.lengths
    slices = np.arange(pb.slices).reshape(pb.batch_shape)  # n, (B…)
    rows, cols = slice(0, L), slice(0, S)
    modify_scores_(pb, scores, pb.mask, slices, rows, cols, mask_mod_allows(pb, slices, rows, cols))
