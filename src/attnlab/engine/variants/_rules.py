"""``Rules``: the variants of one attention call as one frozen object, built once from the
public functions' keywords and passed on whole; ``check`` turns it into what a Problem holds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from ..._validation import fail
from ._base import REGISTRY, Alignment, Band, Context, MaskMod, Variant, offset

__all__ = ["NO_RULES", "Checked", "Rules", "check"]


@dataclass(frozen=True, eq=False)
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
        extra: the values of variants registered from outside the package
            (``engine.variants.register``), by name.
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
        """A copy with ``changes`` (a name of ``extra`` goes into ``extra``)."""
        own = {f.name for f in fields(self)}
        extra = {**self.extra, **{k: v for k, v in changes.items() if k not in own}}
        return replace(self, **{k: v for k, v in changes.items() if k in own}, extra=extra)

    @classmethod
    def of(cls, **values: Any) -> Rules:
        """From keywords, the built-ins' and the registered ones'."""
        return cls().replace(**values)

    def given(self) -> dict[str, Any]:
        """The values that differ from the defaults (JSON-ready ones stay as given)."""
        return {k: v for k, v in self.values().items() if not _is_default(k, v)}

    def unless(self, rules: Rules | None) -> Rules:
        """``rules`` when given, else these (a function's keywords): the variants come one
        way or the other, never both.

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
    """A call's rules checked: the diagonal's offset, the band, and each variant's checked
    value by name (the built-ins' as the Problem's fields hold them, the extra ones' in
    ``extra``, with their Variant)."""

    offset: int
    band: Band
    values: dict[str, Any]
    extra: tuple[tuple[Variant, Any], ...]


def check(rules: Rules, batch_shape: tuple[int, ...], dtype: np.dtype, lengths: tuple[int, int]) -> Checked:
    """Every variant's check, in the registry's order, and the band they allow together."""
    if not isinstance(rules, Rules):
        raise fail("rules", "an attnlab.engine.variants.Rules", type(rules).__name__, TypeError)
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
    builtin = {f.name for f in fields(Rules)} - {"extra"}
    extra = tuple((v, checked[name]) for name, v in REGISTRY.items() if name not in builtin and v.given(checked[name]))
    return Checked(context.offset, Band(lowest, highest), checked, extra)
