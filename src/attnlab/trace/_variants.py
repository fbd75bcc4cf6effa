"""The attention variants a trace was built with: each registered variant's own record
(``engine.variants.Variant.record``), so that the trace's text, page and plot can say them
and a saved trace restores them through each variant's own check.

Self-attention is over one sequence, L = S, so the diagonal's offset is 0 with either
causal alignment; cross-attention (L queries over S ≠ L keys) moves it to S − L when
bottom-right aligned. Every rule below reads with d = j − i, key j's distance from query
i's diagonal.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._exceptions import AttnlabError
from .._validation import ArgumentError
from ..engine._problem import Problem
from ..engine.variants import BUILTINS, REGISTRY, Context

__all__ = ["Variants"]

_MASKS = ("bool", "float")
_MASK_WORDS = {  # the attention mask is the call's, not a variant: its words are here
    "en": {"bool": "a bool mask", "float": "a float mask added to the scores"},
    "zh": {"bool": "布尔掩码", "float": "加到分数上的浮点掩码"},
}


def _frozen(value: Any) -> Any:
    """A JSON-ready record with its lists as tuples (hashable, comparable with a tuple given)."""
    return tuple(_frozen(x) for x in value) if isinstance(value, (list, tuple)) else value


def _json(value: Any) -> Any:
    """A frozen record as JSON-ready again: its tuples as lists."""
    return [_json(x) for x in value] if isinstance(value, tuple) else value


class Variants:
    """The rules of one traced attention call: each variant's record by its keyword, as
    :meth:`engine.variants.Variant.record` gives it (lists as tuples), and the kind of the
    attention mask. A record reads as an attribute of its keyword
    (``variants.window == (2, 0)``; the variant's unset record where it was not given).

    Args:
        attn_mask: "bool" or "float", the kind of attention mask given, or None.
        recorded: each variant's record by its keyword (a registered variant's name),
            e.g. ``Variants(window=(2, 0), softcap=0.3)``.

    Raises:
        ArgumentError: a keyword that names no registered variant.
    """

    def __init__(self, *, attn_mask: str | None = None, **recorded: Any) -> None:
        unknown = sorted(set(recorded) - set(REGISTRY))
        if unknown:
            raise ArgumentError(f"variants: expected the names of registered variants, got {', '.join(unknown)}")
        self.attn_mask = attn_mask
        self._recorded = {
            name: _frozen(recorded[name])
            for name in REGISTRY
            if name in recorded and _frozen(recorded[name]) != _unset(name)
        }

    @classmethod
    def of_problem(cls, pb: Problem) -> Variants:
        """The record of the call that ``pb`` is (its variants checked by the engine)."""
        kind = None if pb.mask is None else "bool" if pb.mask.dtype == bool else "float"
        return cls(attn_mask=kind, **{variant.name: variant.record(value) for variant, value in pb.rules.variants})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in REGISTRY:
            raise AttributeError(name)
        return self._recorded.get(name, _unset(name))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Variants):
            return NotImplemented
        return self.attn_mask == other.attn_mask and self._recorded == other._recorded

    def __hash__(self) -> int:
        return hash((self.attn_mask, tuple(self._recorded.items())))

    def __repr__(self) -> str:
        given = [f"{name}={value!r}" for name, value in self._recorded.items()]
        given += [] if self.attn_mask is None else [f"attn_mask={self.attn_mask!r}"]
        return f"Variants({', '.join(given)})"

    @property
    def plain(self) -> bool:
        """No rule at all: softmax over every key of the scaled scores."""
        return not self._recorded and self.attn_mask is None

    def head(self, h: int) -> Variants:
        """The record of head ``h`` alone (its entry of each per-head value)."""
        records = {name: REGISTRY[name].head(value, h) for name, value in self._recorded.items()}
        return Variants(attn_mask=self.attn_mask, **records)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every built-in variant's record (its unset one where not given),
        those of the variants from outside the package that were given, and attn_mask."""
        data = {name: _json(getattr(self, name)) for name in BUILTINS}
        data.update({name: _json(value) for name, value in self._recorded.items() if name not in BUILTINS})
        return {**data, "attn_mask": self.attn_mask}

    @classmethod
    def from_dict(cls, data: Any, source: str, heads: int = 1) -> Variants:
        """Inverse of :meth:`to_dict`, each record restored by its variant's own check
        (``Variant.restore``) against a traced call of ``heads`` heads. Reads, too, the
        ``extra`` list of [name, record] pairs of traces saved before the records were by name.

        Args:
            data: what :meth:`to_dict` gave (JSON-decoded).
            source: the name the errors give it (a file's name).
            heads: H of the trace (1 for one head's).

        Raises:
            ArgumentError: naming ``source`` and the variant whose record does not fit.
        """
        where = f"{source}: variants"
        allowed = (*REGISTRY, "attn_mask", "extra")
        if not isinstance(data, dict) or not set(data) <= set(allowed):
            raise ArgumentError(f"{where}: expected null or an object of {', '.join(allowed)}")
        records = {name: value for name, value in data.items() if name not in ("attn_mask", "extra")}
        extra = data.get("extra", [])
        if not isinstance(extra, list) or not all(isinstance(x, list) and len(x) == 2 for x in extra):
            raise ArgumentError(f"{where}: extra: got {extra!r}, which a traced call cannot have")
        for name, value in extra:
            if name not in REGISTRY:
                raise ArgumentError(f"{where}: extra: {name!r} is not a registered variant")
            records[name] = value
        if data.get("attn_mask") not in (None, *_MASKS):
            raise ArgumentError(f"{where}: attn_mask: got {data['attn_mask']!r}, which a traced call cannot have")
        context = Context((heads,), np.dtype(np.float64), (1, 1), 0)
        restored = {}
        for name, value in records.items():
            try:
                restored[name] = REGISTRY[name].restore(value, context)
            except AttnlabError as error:
                raise ArgumentError(f"{where}: {error}") from None
        return cls(attn_mask=data.get("attn_mask"), **restored)

    def describe(self, lang: str = "en") -> str:
        """The rules in words, one after another ("" when :attr:`plain`).

        Args:
            lang: "en" or "zh".
        """
        parts = []
        for name, variant in REGISTRY.items():
            if name == "mask_mod" and self.attn_mask is not None:  # the call's mask, before the mask function
                parts.append(_MASK_WORDS[lang][self.attn_mask])
            words = variant.describe(self._recorded[name], lang) if name in self._recorded else None
            parts += [] if words is None else [words]
        return ("；" if lang == "zh" else "; ").join(parts)


def _unset(name: str) -> Any:
    """A variant's record where it was not given (False, "top_left" or None)."""
    variant = REGISTRY[name]
    return _frozen(variant.record(variant.default))
