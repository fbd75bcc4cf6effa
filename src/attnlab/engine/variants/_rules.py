"""``Rules``: the variants of one attention call as one frozen object, built once (by
keyword) where the public functions take their keywords and passed on whole; ``check``
turns it into its checked form, :class:`Checked`, which a Problem holds and the engines read."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from ..._validation import fail
from ._base import REGISTRY, Alignment, Band, Context, MaskMod, Variant, offset

__all__ = ["NO_RULES", "Checked", "Rules", "check"]


@dataclass(frozen=True, eq=False, kw_only=True)
class Rules:
    """The rules of an attention call besides its mask and dropout, as
    :func:`attnlab.attention` takes them as keywords (see there).

    Args:
        is_causal: query i attends to keys d = j − (i + offset) <= 0 only.
        causal_alignment: "top_left" (offset 0) or "bottom_right" (offset S − L).
        window: (left, right): −left <= d <= right; None on a side unbounded.
        softcap: c > 0: the scores become c·tanh(Z/c) before any bias.
        alibi_slopes: (H,) or (B, H): −slope·|d| added to the scores.
        sinks: (H,): one logit per head joined to every row's softmax.
        mask_mod: FlexAttention's mask function.
        extra: the values of the variants without a keyword of their own, by name: those
            registered from outside the package (``engine.variants.register``) and the
            built-ins that no torch function names (``length_scale``); ``Rules.of`` puts
            them there.
    """

    is_causal: bool = False
    causal_alignment: Alignment = "top_left"
    window: tuple[int | None, int | None] | None = None
    softcap: float | None = None
    alibi_slopes: Any = None
    sinks: Any = None
    mask_mod: MaskMod | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def values(self) -> dict[str, Any]:
        """Every variant's value by its name, the built-ins' and the extra ones'."""
        given = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**given, **self.extra}

    def replace(self, **changes: Any) -> Rules:
        """A copy with ``changes``.

        Args:
            changes: each variant's new value by its name (a name that is no field of Rules
                goes into ``extra``).
        """
        own = {f.name for f in fields(self)}
        extra = {**self.extra, **{k: v for k, v in changes.items() if k not in own}}
        return replace(self, **{k: v for k, v in changes.items() if k in own}, extra=extra)

    @classmethod
    def of(cls, **values: Any) -> Rules:
        """The rules of ``values``: ``Rules.of(is_causal=True, length_scale=s)``.

        Args:
            values: each variant's value by its name: the keywords' fields, and the variants
                without a keyword (``length_scale``, those registered from outside), which go
                into ``extra``.
        """
        return cls().replace(**values)

    def given(self) -> dict[str, Any]:
        """The values that differ from the defaults (JSON-ready ones stay as given)."""
        return {k: v for k, v in self.values().items() if not _is_default(k, v)}

    def unless(self, rules: Rules | None) -> Rules:
        """``rules`` when given, else these (a function's keywords): the variants come one
        way or the other, never both.

        Args:
            rules: the rules a function was given as one object, or None.

        Raises:
            ValueError: ``rules`` given beside keywords that differ from the defaults.
        """
        if rules is None:
            return self
        if self.given():
            raise fail("rules", "the variants either as rules or as keywords", f"both ({', '.join(self.given())})")
        return rules


NO_RULES = Rules()  # no variant at all


def _is_default(name: str, value: Any) -> bool:
    variant = REGISTRY.get(name)
    default = None if variant is None else variant.default
    return value is None if default is None else (type(value) is type(default) and value == default)


@dataclass(frozen=True)
class Checked:
    """A call's rules checked against its problem, as the Problem holds them: the rules as
    given, the diagonal's offset, the band of j − i that they allow together, and each
    registered variant's checked value by name (``checked["softcap"]``), in the registry's
    order."""

    given: Rules
    offset: int
    band: Band
    values: Mapping[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @functools.cached_property
    def variants(self) -> tuple[tuple[Variant, Any], ...]:
        """(variant, checked value) of each variant that changes anything, in the registry's order."""
        return tuple((REGISTRY[name], value) for name, value in self.values.items() if REGISTRY[name].given(value))

    @functools.cached_property
    def compiled(self) -> bool:
        """Whether the fused engine compiles every variant given (the built-ins but ``mask_mod``)."""
        return all(variant.compiled for variant, _ in self.variants)

    @property
    def bottom_right(self) -> bool:
        """``causal_alignment="bottom_right"``: a sequence's diagonal is at its own length."""
        return bool(self.values["causal_alignment"] == "bottom_right")

    def of_sequence(self, index: tuple[int, ...], batch: int, shift: int) -> Checked:
        """The rules of one sequence's problem (``engine._ragged``): each value as its
        variant narrows it, the diagonal and the band moved by ``shift``."""
        values = {name: REGISTRY[name].of_sequence(v, index, batch) for name, v in self.values.items()}
        band = Band(self.band.lowest + shift, self.band.highest + shift)
        return Checked(self.given, self.offset + shift, band, values)


def check(rules: Rules | Checked, batch_shape: tuple[int, ...], dtype: np.dtype, lengths: tuple[int, int]) -> Checked:
    """Every variant's check, in the registry's order, and the band they allow together
    (checked rules are checked again from the rules they were given as)."""
    if isinstance(rules, Checked):
        rules = rules.given
    if not isinstance(rules, Rules):
        raise fail("rules", "an attnlab.Rules", type(rules).__name__, TypeError)
    values = rules.values()
    unknown = sorted(set(values) - set(REGISTRY))
    if unknown:
        raise fail("rules", f"variants registered in engine.variants ({', '.join(REGISTRY)})", ", ".join(unknown))
    context = Context(batch_shape, dtype, lengths, offset(values["causal_alignment"], lengths))
    checked = {name: variant.check(values.get(name, variant.default), context) for name, variant in REGISTRY.items()}
    L, S = lengths
    lowest, highest = -L, S  # beyond every j − i of the problem
    for name, variant in REGISTRY.items():
        low, high = variant.band(checked[name], context)
        lowest = lowest if low is None else max(lowest, low)
        highest = highest if high is None else min(highest, high)
    return Checked(rules, context.offset, Band(lowest, highest), checked)
