"""The attention variants a trace was built with, recorded so that its text, page and plot
can say them (the engine's semantics, and each variant's words, are in
``attnlab.engine.variants``).

Self-attention is over one sequence, L = S, so the diagonal's offset is 0 with either
causal alignment; cross-attention (L queries over S ≠ L keys) moves it to S − L when
bottom-right aligned. Every rule below reads with d = j − i, key j's distance from query
i's diagonal.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from .._validation import ArgumentError, Array, is_real
from ..engine._problem import Problem
from ..engine.variants import REGISTRY
from ..engine.variants.window import check_window

__all__ = ["Variants"]

_ALIGNMENTS = ("top_left", "bottom_right")
_MASK_WORDS = {  # the attention mask is the call's, not a variant: its words are here
    "en": {"bool": "a bool mask", "float": "a float mask added to the scores"},
    "zh": {"bool": "布尔掩码", "float": "加到分数上的浮点掩码"},
}


@dataclass(frozen=True)
class Variants:
    """The rules of one traced attention call, as :func:`attnlab.attention` takes them.

    Args:
        is_causal: query i attends to keys j <= i only.
        causal_alignment: "top_left" or "bottom_right" (the same in self-attention).
        window: (left, right), None on a side unbounded; None: no window.
        softcap: c of c·tanh(z/c), or None.
        alibi_slopes: one ALiBi slope per head, or None.
        sinks: one sink logit per head, or None.
        attn_mask: "bool" or "float", the kind of attention mask given, or None.
        mask_mod: the mask function's name, or None.
        extra: (name, what the variant recorded) of each variant registered from outside
            the package that the call used.
    """

    is_causal: bool = False
    causal_alignment: str = "top_left"
    window: tuple[int | None, int | None] | None = None
    softcap: float | None = None
    alibi_slopes: tuple[float, ...] | None = None
    sinks: tuple[float, ...] | None = None
    attn_mask: str | None = None
    mask_mod: str | None = None
    extra: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of_problem(cls, pb: Problem) -> Variants:
        """The record of the call that ``pb`` is (its variants checked by the engine)."""
        record = cls.of_call(
            is_causal=pb.is_causal, causal_alignment=pb.rules.causal_alignment, window=check_window(pb.rules.window),
            softcap=pb.softcap, alibi=pb.alibi, sinks=pb.sinks, attn_mask=pb.mask, mask_mod=pb.mask_mod,
        )  # fmt: skip
        return replace(record, extra=tuple((variant.name, variant.record(value)) for variant, value in pb.extra))

    @classmethod
    def of_call(
        cls,
        *,
        is_causal: bool,
        causal_alignment: str,
        window: Any,
        softcap: float | None,
        alibi: Array | None,
        sinks: Array | None,
        attn_mask: Array | None,
        mask_mod: Callable[..., Any] | None,
    ) -> Variants:
        """The record of a call whose arguments the engine has checked (``alibi`` and
        ``sinks`` as the Problem holds them: one per head, (H,) or ())."""
        return cls(
            is_causal=is_causal,
            causal_alignment=causal_alignment,
            window=None if window is None else (_side(window[0]), _side(window[1])),
            softcap=softcap,
            alibi_slopes=None if alibi is None else tuple(float(x) for x in alibi.reshape(-1)),
            sinks=None if sinks is None else tuple(float(x) for x in sinks.reshape(-1)),
            attn_mask=None if attn_mask is None else "bool" if attn_mask.dtype == bool else "float",
            mask_mod=None if mask_mod is None else getattr(mask_mod, "__name__", type(mask_mod).__name__),
        )

    @property
    def plain(self) -> bool:
        """No rule at all: softmax over every key of the scaled scores."""
        return self == Variants()

    def head(self, h: int) -> Variants:
        """The record of head ``h`` alone (its slope and sink)."""

        def one(values: tuple[float, ...] | None) -> tuple[float, ...] | None:
            return values if values is None or len(values) == 1 else values[h : h + 1]

        return replace(self, alibi_slopes=one(self.alibi_slopes), sinks=one(self.sinks))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (window and per-head values as lists)."""
        data = asdict(self)
        for name in ("window", "alibi_slopes", "sinks"):
            data[name] = None if data[name] is None else list(data[name])
        data["extra"] = [[name, value] for name, value in self.extra]
        if not self.extra:  # traces saved before the field read the same
            del data["extra"]
        return data

    @classmethod
    def from_dict(cls, data: Any, source: str) -> Variants:
        """Inverse of :meth:`to_dict`, checked.

        Args:
            data: what :meth:`to_dict` gave (JSON-decoded).
            source: the name the errors give it (a file's name).

        Raises:
            ArgumentError: naming ``source`` and the field that does not fit.
        """
        return _from_dict(cls, data, source)

    def describe(self, lang: str = "en") -> str:
        """The rules in words, one after another ("" when :attr:`plain`).

        Args:
            lang: "en" or "zh".
        """
        recorded = {
            "is_causal": self.is_causal, "window": self.window, "causal_alignment": self.causal_alignment,
            "softcap": self.softcap, "alibi_slopes": self.alibi_slopes, "sinks": self.sinks,
            "mask_mod": self.mask_mod, **dict(self.extra),
        }  # fmt: skip
        parts = []
        for name, value in recorded.items():
            if name == "mask_mod" and self.attn_mask is not None:  # the call's mask, before the mask function
                parts.append(_MASK_WORDS[lang][self.attn_mask])
            variant = REGISTRY.get(name)
            words = f"{name} {value}" if variant is None else variant.describe(value, lang)
            parts += [] if words is None else [words]
        return ("；" if lang == "zh" else "; ").join(parts)


def _side(side: Any) -> int | None:
    return None if side is None else int(side)


def _numbers(values: Any) -> bool:
    """A non-empty list of finite numbers (not bools)."""
    return isinstance(values, list) and bool(values) and all(is_real(x) and math.isfinite(x) for x in values)


def _from_dict(cls: type[Variants], data: Any, source: str) -> Variants:
    """See :meth:`Variants.from_dict`."""
    where = f"{source}: variants"
    if not isinstance(data, dict) or not set(data) <= set(cls.__dataclass_fields__):
        raise ArgumentError(f"{where}: expected null or an object of {', '.join(cls.__dataclass_fields__)}")
    given = {**Variants().to_dict(), "extra": [], **data}
    window = given["window"]
    sides_ok = isinstance(window, list) and len(window) == 2
    if window is not None and not (sides_ok and all(s is None or (type(s) is int and s >= 0) for s in window)):
        raise ArgumentError(f"{where}: window: expected null or [left, right], each null or a whole number ≥ 0")
    softcap = given["softcap"]
    if softcap is not None and not (_numbers([softcap]) and softcap > 0):
        raise ArgumentError(f"{where}: softcap: expected null or a positive finite number, got {softcap!r}")
    for name in ("alibi_slopes", "sinks"):
        if given[name] is not None and not _numbers(given[name]):
            raise ArgumentError(f"{where}: {name}: expected null or a list of finite numbers, one per head")
    checks = {
        "is_causal": isinstance(given["is_causal"], bool),
        "causal_alignment": given["causal_alignment"] in _ALIGNMENTS,
        "attn_mask": given["attn_mask"] in (None, "bool", "float"),
        "mask_mod": given["mask_mod"] is None or isinstance(given["mask_mod"], str),
        "extra": isinstance(given["extra"], list)
        and all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], str) for x in given["extra"]),
    }
    for name, ok in checks.items():
        if not ok:
            raise ArgumentError(f"{where}: {name}: got {given[name]!r}, which a traced call cannot have")
    return cls(
        is_causal=given["is_causal"],
        causal_alignment=given["causal_alignment"],
        window=None if window is None else (window[0], window[1]),
        softcap=None if softcap is None else float(softcap),
        alibi_slopes=None if given["alibi_slopes"] is None else tuple(map(float, given["alibi_slopes"])),
        sinks=None if given["sinks"] is None else tuple(map(float, given["sinks"])),
        attn_mask=given["attn_mask"],
        mask_mod=given["mask_mod"],
        extra=tuple((name, value) for name, value in given["extra"]),
    )
