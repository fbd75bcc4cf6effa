"""A model's attention at any length: the statistics of every layer's and head's weights
(:class:`attnlab.engine.AttentionStatistics`, exact, from the tiles) in place of the
weights, with the tokens as the model's tokenizer reads them. At L tokens it holds
O(layers · heads · L · top_k) numbers, never a (L, L) matrix: SmolLM2-135M's 30 × 9 heads
at 8,192 tokens and top_k 8 are about 200 MB of float32.

Its JSON keeps every array as its bytes (:mod:`._packed`), so that a file reads back
bit for bit."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from .._json import json_text
from .._validation import ArgumentError, AttnlabError, fail
from ..engine import AttentionStatistics
from ..engine._statistics import BATCHED
from ._display import shown_name
from ._packed import packed, unpacked

__all__ = ["ModelStatistics"]

# AttentionStatistics' arrays (BATCHED) over (layers, heads, …): per query (…, L), per
# query and rank (…, L, top_k), per key (…, S), per distance bin (…, 2K + 1)
_PER_QUERY = ("lse", "entropy", "max_weight", "sink_share", "local_share", "sinks_weight")
_PER_RANK = ("top_keys", "top_weights")


@dataclass(frozen=True)
class ModelStatistics:
    """The statistics of every layer's and head's attention weights in one forward of a model
    (the formulas: :mod:`attnlab.engine._statistics`), kept instead of the weights.

    Args:
        model: the checkpoint's name; a path is kept as its folder's or file's name, as
            :class:`ModelTrace` keeps it.
        ids: the L token ids.
        tokens: the L tokens as text (:meth:`Tokenizer.readable`).
        statistics: an :class:`AttentionStatistics` whose batch shape is (num_layers,
            num_heads): lse (layers, heads, L), top_keys (layers, heads, L, top_k), received
            (layers, heads, L) (the keys are the tokens), distance (layers, heads, 2K + 1).
        special: per token, whether it is a special token ([CLS]); default none.
        template: per token, whether a chat template put it there; default none.
        notes: what the page and the text should say of how the tokens or weights came.
        architecture: the model's config's ``model_type`` ("llama"), or "".
        num_key_value_heads: the key and value heads the queries share (GQA), or 0 where unknown.
        parts: per token, the characters split over several tokens that it holds bytes of
            (as :class:`ModelTrace`'s); default none.

    Raises:
        ArgumentError: naming the first field that does not fit the others (shapes, lengths, counts).
    """

    model: str
    ids: list[int]
    tokens: list[str]
    statistics: AttentionStatistics
    special: list[bool] = field(default_factory=list)
    template: list[bool] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    architecture: str = ""
    num_key_value_heads: int = 0
    parts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        """The model by its name (never a path), the marks' defaults, then every check."""
        L = len(self.tokens) if isinstance(self.tokens, list) else 0
        object.__setattr__(self, "model", shown_name(self.model) if isinstance(self.model, str) else self.model)
        for name, default in (("special", False), ("template", False), ("parts", "")):
            if not getattr(self, name):
                object.__setattr__(self, name, [default] * L)
        self._check()

    @property
    def num_layers(self) -> int:
        return int(self.statistics.lse.shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.statistics.lse.shape[1])

    @property
    def top_k(self) -> int:
        return int(self.statistics.top_keys.shape[-1])

    @classmethod
    def from_layers(
        cls, layers: Sequence[AttentionStatistics], *, model: str, ids: list[int], tokens: list[str], **marks: Any
    ) -> ModelStatistics:
        """The statistics of each layer, (heads, …) each, stacked into (layers, heads, …).

        Args:
            layers: one :class:`AttentionStatistics` per layer, in order, all of one shape
                and with the same sink_keys, local_keys and bins.
            model: the checkpoint's name, as the class's.
            ids: the L token ids, as the class's.
            tokens: the L tokens as text, as the class's.
            marks: the other fields by name (special, template, notes, architecture,
                num_key_value_heads, parts).

        Raises:
            ArgumentError: no layer, or layers of different shapes or settings.
        """
        if not layers:
            raise fail("layers", "at least one layer's statistics", "none")
        first = layers[0]
        for i, layer in enumerate(layers):
            if (layer.sink_keys, layer.local_keys) != (first.sink_keys, first.local_keys) or not np.array_equal(
                layer.distance_bins, first.distance_bins
            ):
                raise fail("layers", "the same sink_keys, local_keys and bins in every layer", f"others in layer {i}")
            shapes = [getattr(layer, name).shape for name in BATCHED]
            if shapes != [getattr(first, name).shape for name in BATCHED]:
                raise fail("layers", "statistics of one shape in every layer", f"another in layer {i}")
        stacked = {name: np.stack([getattr(layer, name) for layer in layers]) for name in BATCHED}  # (layers, …)
        statistics = AttentionStatistics(
            **stacked, distance_bins=first.distance_bins, sink_keys=first.sink_keys, local_keys=first.local_keys
        )
        return cls(model=model, ids=ids, tokens=tokens, statistics=statistics, **marks)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields, each array of the statistics as its bytes (:func:`._packed.packed`)."""
        s = self.statistics
        arrays = {name: packed(getattr(s, name)) for name in (*BATCHED, "distance_bins")}
        return {
            "model": self.model, "architecture": self.architecture, "num_key_value_heads": self.num_key_value_heads,
            "num_layers": self.num_layers, "num_heads": self.num_heads, "ids": self.ids, "tokens": self.tokens,
            "special": self.special, "template": self.template, "parts": self.parts, "notes": self.notes,
            "statistics": {"sink_keys": s.sink_keys, "local_keys": s.local_keys, **arrays},
        }  # fmt: skip

    def to_json(self) -> str:
        return json_text(self.to_dict())

    @classmethod
    def from_dict(cls, data: Any, source: str = "statistics") -> ModelStatistics:
        """Inverse of :meth:`to_dict`, bit for bit.

        Args:
            data: what :meth:`to_dict` gave (JSON-decoded).
            source: the name the errors give it (a file's name).

        Raises:
            ArgumentError: naming ``source`` and the first field missing, not of its kind, or
                not fitting the others.
        """
        if not isinstance(data, dict) or not isinstance(data.get("statistics"), dict):
            raise ArgumentError(f"{source}: expected a model's statistics (as ModelStatistics.to_dict gives)")
        saved = data["statistics"]
        ndim = {**dict.fromkeys(_PER_QUERY, 3), **dict.fromkeys(_PER_RANK, 4), "received": 3, "distance": 3}
        arrays = {name: unpacked(saved.get(name), name, source, n) for name, n in ndim.items()}
        bins = unpacked(saved.get("distance_bins"), "distance_bins", source, 2)
        sink_keys, local_keys = (saved.get(name) for name in ("sink_keys", "local_keys"))
        for name, count in (("sink_keys", sink_keys), ("local_keys", local_keys)):
            if not (type(count) is int and count > 0):
                raise ArgumentError(f"{source}: {name}: expected a whole number ≥ 1, got {count!r}")
        assert isinstance(sink_keys, int) and isinstance(local_keys, int)  # checked above
        statistics = AttentionStatistics(**arrays, distance_bins=bins, sink_keys=sink_keys, local_keys=local_keys)
        given = {f.name: data[f.name] for f in fields(cls) if f.name in data and f.name != "statistics"}
        try:
            return cls(**{"model": "", "ids": [], "tokens": [], **given, "statistics": statistics})
        except AttnlabError as error:
            raise ArgumentError(f"{source}: {error}") from None

    @classmethod
    def from_json(cls, text: str, source: str = "statistics") -> ModelStatistics:
        """:meth:`from_dict` of a JSON text.

        Args:
            text: what :meth:`to_json` gave.
            source: the name the errors give it (a file's name).

        Raises:
            ArgumentError: naming ``source``: text that is not JSON, or :meth:`from_dict`'s.
        """
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            raise ArgumentError(f"{source}: expected JSON (a model's statistics)") from None
        return cls.from_dict(data, source)

    def __repr__(self) -> str:
        return (
            f"ModelStatistics(model={self.model!r}, tokens={len(self.tokens)}, layers={self.num_layers}, "
            f"heads={self.num_heads}, top_k={self.top_k})"
        )

    def _check(self) -> None:
        """Refuse fields that do not fit together, naming the first (ArgumentError)."""
        self._check_marks()
        L, s = len(self.tokens), self.statistics
        if not isinstance(s, AttentionStatistics):
            raise fail("statistics", "an AttentionStatistics", type(s).__name__, TypeError)
        batch = s.lse.shape[:2] if s.lse.ndim == 3 else None
        if batch is None or 0 in batch or s.lse.shape[2] != L:
            raise fail("statistics", f"lse of shape (layers, heads, {L}), one row per token", f"{s.lse.shape}")
        K = s.distance_bins.shape[0]
        expected = {
            **{name: (*batch, L) for name in _PER_QUERY}, "received": (*batch, L), "distance": (*batch, K),
            **{name: (*batch, L, s.top_keys.shape[-1] if s.top_keys.ndim == 4 else -1) for name in _PER_RANK},
        }  # fmt: skip
        for name, shape in expected.items():
            got = getattr(s, name).shape
            if got != shape or (name in _PER_RANK and shape[-1] < 1):
                raise fail(f"statistics.{name}", f"shape (layers, heads, …) = {shape}", f"{got}")
        if s.distance_bins.shape != (K, 2) or K % 2 != 1:
            raise fail("statistics.distance_bins", "(2K + 1, 2) first and last distances", f"{s.distance_bins.shape}")
        for name in ("sink_keys", "local_keys"):
            if not (type(getattr(s, name)) is int and getattr(s, name) > 0):
                raise fail(f"statistics.{name}", "a whole number ≥ 1", repr(getattr(s, name)))
        kv = self.num_key_value_heads
        heads = batch[1]
        if not (type(kv) is int and 0 <= kv <= heads and (kv == 0 or heads % kv == 0)):
            raise fail("num_key_value_heads", f"0 (unknown) or a divisor of the {heads} heads", repr(kv))

    def _check_marks(self) -> None:
        """The texts and the lists of one entry per token."""
        if not isinstance(self.model, str):
            raise fail("model", "a text", type(self.model).__name__)
        if not isinstance(self.architecture, str):
            raise fail("architecture", "a text", type(self.architecture).__name__)
        tokens = self.tokens
        if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
            raise fail("tokens", "a non-empty list of strings", type(tokens).__name__ if not tokens else "others")
        L = len(tokens)
        if not (isinstance(self.ids, list) and len(self.ids) in (0, L) and all(type(i) is int for i in self.ids)):
            raise fail("ids", f"{L} integers, one per token (or [], none)", _length(self.ids))
        for name, kind, words in (
            ("special", bool, "booleans"),
            ("template", bool, "booleans"),
            ("parts", str, "texts"),
        ):
            values = getattr(self, name)
            if not (isinstance(values, list) and len(values) == L and all(type(x) is kind for x in values)):
                raise fail(name, f"{L} {words}, one per token", _length(values))
        if not isinstance(self.notes, list) or not all(isinstance(n, str) for n in self.notes):
            raise fail("notes", "a list of texts", _length(self.notes))


def _length(values: Any) -> str:
    """What came, in an error: a list's length, else its type."""
    return f"{len(values)} of them" if isinstance(values, list) else type(values).__name__
