"""Every intermediate of one attention forward pass, as data, text or JSON: self-attention
over one sequence, or cross-attention of L queries over S keys of another sequence.

The text has the seed program's sections in its order: the input's length and width,
the shapes of Q, K and V, the raw scores, the scaled scores, the softmax weights and
each token's output. The scaled scores are what the engine's softmax read, every variant
applied (softcap, the biases, the masks: ``engine._masks.modify_scores_``); masked scores
are −inf in the arrays, ``-inf`` in the text and ``null`` in JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from .._json import json_text
from .._validation import Array, fail, is_integer
from ..reference import AttentionSteps
from ._codec import ARRAYS, decoded_fields, json_field
from ._display import notebook_html
from ._render import render_text
from ._variants import Variants

__all__ = ["Trace"]


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
        """The single-head trace of head ``h``, without the layer's output (the trace itself when it has one head).

        Args:
            h: the head, in 0..H − 1.

        Raises:
            ArgumentError: ``h`` is not a head of the trace.
        """
        if not is_integer(h) or not 0 <= h < self.num_heads:
            raise fail("h", f"a head index in 0..{self.num_heads - 1}", repr(h))
        if self.weights.ndim == 2:
            return self
        arrays = {name: getattr(self, name)[h] for name in ARRAYS if name != "inputs"}
        bias = None if self.bias is None else self.bias[h]
        variants = None if self.variants is None else self.variants.head(h)
        return Trace(
            inputs=self.inputs, scale=self.scale, tokens=self.tokens, random_seed=self.random_seed, bias=bias,
            variants=variants, key_tokens=self.key_tokens, **arrays,
        )  # fmt: skip

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
        if self.key_tokens:
            return self.key_tokens
        return self.labels if self.num_keys == len(self.inputs) else [str(j) for j in range(self.num_keys)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: nested lists of Python floats (exact); −inf as None, +inf "Infinity", NaN "NaN"."""
        return {f.name: json_field(getattr(self, f.name)) for f in fields(self)}

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
        return cls(**decoded_fields(data, source))

    def render(self, *, lang: str = "zh", precision: int = 4, title: str | None = None) -> str:
        """The seed demo's text, in Chinese (default) or English; a multi-head trace head by head.

        Args:
            lang: the labels' language, "zh" or "en".
            precision: decimals of every number, 0..17.
            title: the heading (default the language's "self-attention trace").

        Raises:
            ArgumentError: ``lang`` or ``precision`` out of range.
        """
        return render_text(self, lang, precision, title)

    def _repr_html_(self) -> str | None:
        """Jupyter's display: the page in a sandboxed iframe, or None (the text repr) when too large."""
        return notebook_html(self)

    def __repr__(self) -> str:
        (L, d_model), keys = self.inputs.shape, f", S={self.num_keys}" if self.num_keys != len(self.inputs) else ""
        return f"Trace(L={L}{keys}, d_model={d_model}, heads={self.num_heads}, scale={self.scale:.4g})"
