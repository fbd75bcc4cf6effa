"""A model's trace: every step of attention in the traced layers of one forward, one
:class:`attnlab.Trace` per layer, with the tokens as the model's tokenizer reads them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .._validation import ArgumentError, Array, fail
from ._display import notebook_html
from ._trace import Trace

__all__ = ["ModelTrace"]


@dataclass
class ModelTrace:
    """Every step of attention in the traced layers of one forward over one sequence.

    ``layers[i]`` is layer i's :class:`attnlab.Trace`: its inputs (L, D) (the hidden state
    after the norm where the norm comes first), per head Q (H, L, E) after RoPE where the
    model rotates, K and V (H, L, E) (a key/value head repeated for each of its query
    heads), scores, scaled scores, weights (H, L, L), outputs (H, L, E) and the layer's
    attention output after its out projection (L, D).

    Args:
        model: the checkpoint's name.
        ids: the L token ids.
        tokens: the L tokens as text (:meth:`Tokenizer.readable`).
        layers: the traced layers' :class:`attnlab.Trace`, by index.
        num_layers: the model's layers (traced or not).
        num_heads: heads per layer.
        special: per token, whether it is a special token ([CLS]).
        parts: per token, the characters split over several tokens that it holds bytes of.
        opens: the view its page opens on, {"layer", "head", "query"} (a model's config may
            name its answering head, as builtin:coref's does), or None: the first layer,
            head 0, query 0.
    """

    model: str
    ids: list[int]
    tokens: list[str]
    layers: dict[int, Trace] = field(repr=False)
    num_layers: int = 0
    num_heads: int = 0
    special: list[bool] = field(default_factory=list)  # [CLS], <|endoftext|>: not text
    parts: list[str] = field(default_factory=list)  # the characters split over several tokens each holds
    opens: dict[str, int] | None = None

    def __post_init__(self) -> None:
        self.special = self.special or [False] * len(self.tokens)
        self.parts = self.parts or [""] * len(self.tokens)

    @property
    def weights(self) -> Array:
        """The traced layers' weights, (layers, H, L, L), in layer order."""
        return np.stack([self.layers[i].weights for i in sorted(self.layers)])

    def _repr_html_(self) -> str | None:
        """Jupyter's display: the page, as for :class:`attnlab.Trace`."""
        return notebook_html(self)

    def __getitem__(self, layer: int) -> Trace:
        """Layer ``layer``'s trace; a negative index counts from the model's last layer."""
        index = layer + self.num_layers if isinstance(layer, int) and layer < 0 else layer
        if index not in self.layers:
            raise KeyError(f"layer: expected a traced layer among {sorted(self.layers)}, got {layer!r}")
        return self.layers[index]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the model, ids, tokens and counts, and each traced layer's
        :meth:`attnlab.Trace.to_dict` under its index."""
        fixed = {
            "model": self.model,
            "ids": self.ids,
            "tokens": self.tokens,
            "special": self.special,
            "parts": self.parts,
        }
        counts = {"num_layers": self.num_layers, "num_heads": self.num_heads, "opens": self.opens}
        return {**fixed, **counts, "layers": {str(i): trace.to_dict() for i, trace in self.layers.items()}}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_dict(cls, data: Any, source: str = "trace") -> ModelTrace:
        """Inverse of :meth:`to_dict`, checked: each layer as :meth:`attnlab.Trace.from_dict`
        checks it, and every layer over the same tokens.

        Args:
            data: what :meth:`to_dict` gave (JSON-decoded).
            source: the name the errors give it (a file's name).

        Raises:
            ArgumentError: naming ``source`` and what is missing or does not fit.
        """
        return _from_dict(cls, data, source)

    def labels(self) -> list[str]:
        """The tokens as the text trace and the page label them: a byte-level piece that
        shows nothing by itself (an earlier byte of 篮) reads ``‹piece of 篮›``."""
        return [
            f"{token}‹piece of {part}›" if part and not token.strip() else token
            for token, part in zip(self.tokens, self.parts, strict=True)
        ]

    def render(self, *, lang: str = "zh", precision: int = 4) -> str:
        """Each traced layer's text (:meth:`attnlab.Trace.render`) under a title naming it,
        its rows labelled by :meth:`labels` (byte-level pieces marked).

        Args:
            lang: the labels' language, ``"zh"`` or ``"en"``.
            precision: decimals of every number, 0..17.

        Raises:
            ArgumentError: ``lang`` or ``precision`` out of range.
        """
        name = {"zh": "{model} 第 {i} 层（共 {n} 层）", "en": "{model}, layer {i} of {n}"}.get(lang)
        if name is None:
            raise fail("lang", "one of zh, en", repr(lang))
        labels = self.labels()
        return "\n\n".join(
            replace(trace, tokens=labels).render(
                lang=lang, precision=precision, title=name.format(model=self.model, i=i, n=self.num_layers)
            )
            for i, trace in self.layers.items()
        )

    def __repr__(self) -> str:
        return (
            f"ModelTrace(model={self.model!r}, tokens={len(self.tokens)}, layers={sorted(self.layers)} "
            f"of {self.num_layers}, heads={self.num_heads})"
        )


def _from_dict(cls: type[ModelTrace], data: Any, source: str) -> ModelTrace:
    """See :meth:`ModelTrace.from_dict`."""
    if not isinstance(data, dict) or not isinstance(data.get("layers"), dict) or not data["layers"]:
        raise ArgumentError(f"{source}: expected a model's trace, with its layers (as ModelTrace.to_dict gives)")
    tokens, ids = data.get("tokens"), data.get("ids")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise ArgumentError(f"{source}: tokens: expected a list of strings")
    if not isinstance(ids, list) or len(ids) != len(tokens) or not all(type(i) is int for i in ids):
        raise ArgumentError(f"{source}: ids: expected {len(tokens)} integers, one per token")
    num_layers, num_heads = data.get("num_layers"), data.get("num_heads")
    if not (type(num_layers) is int and type(num_heads) is int and num_layers > 0 and num_heads > 0):
        got = f"{num_layers!r} and {num_heads!r}"
        raise ArgumentError(f"{source}: num_layers and num_heads: expected positive integers, got {got}")
    layers = {}
    for key, layer in data["layers"].items():
        if not key.isdigit() or not int(key) < num_layers:
            raise ArgumentError(f"{source}: layers: expected indices in 0..{num_layers - 1}, got {key!r}")
        trace = Trace.from_dict(layer, f"{source}, layer {key}")
        if trace.num_heads != num_heads:
            raise ArgumentError(f"{source}, layer {key}: expected the trace's {num_heads} heads, got {trace.num_heads}")
        if trace.tokens != tokens:
            raise ArgumentError(f"{source}, layer {key}: tokens: {_first_difference(tokens, trace.tokens)}")
        layers[int(key)] = trace
    special, parts = data.get("special", [False] * len(tokens)), data.get("parts", [""] * len(tokens))
    if not (isinstance(special, list) and len(special) == len(tokens) and all(type(x) is bool for x in special)):
        raise ArgumentError(f"{source}: special: expected {len(tokens)} booleans, one per token")
    if not (isinstance(parts, list) and len(parts) == len(tokens) and all(isinstance(x, str) for x in parts)):
        raise ArgumentError(f"{source}: parts: expected {len(tokens)} strings, one per token")
    layers = dict(sorted(layers.items()))
    opens = data.get("opens")
    if opens is not None and not (
        isinstance(opens, dict)
        and set(opens) <= {"layer", "head", "query"}
        and all(type(x) is int and x >= 0 for x in opens.values())
    ):
        raise ArgumentError(f"{source}: opens: expected null or whole numbers ≥ 0 under layer, head, query")
    return cls(str(data.get("model")), ids, tokens, layers, num_layers, num_heads, special, parts, opens)


def _first_difference(tokens: list[str], got: list[str] | None) -> str:
    """Where a layer's tokens part from the trace's: "expected …, got …" naming the first token that differs."""
    if got is None or len(got) != len(tokens):
        return f"expected the trace's {len(tokens)} tokens, got {'none' if got is None else len(got)}"
    i = next(i for i, (want, have) in enumerate(zip(tokens, got, strict=True)) if want != have)
    return f"expected the trace's tokens, got token {i} {got[i]!r} where the trace has {tokens[i]!r}"
