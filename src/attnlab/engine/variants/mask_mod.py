"""``mask_mod``: FlexAttention's mask function, (batch, head, q_idx, kv_idx) -> bool array,
True where the query may attend the key, evaluated in NumPy on broadcast index arrays, per
block in the blocked engines (a block it rules out is skipped). Its score rule (−∞ where it
says False) is ``engine._masks``'; no gradient. ``and_masks`` and ``or_masks`` compose mask
functions as torch's ``torch.nn.attention.flex_attention`` does."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._validation import Array, fail
from ._base import Context, MaskMod, Variant, register

__all__ = ["MASK_MOD", "and_masks", "or_masks"]

_WORDS = {"en": "mask function {name}", "zh": "掩码函数 {name}"}


def _compose(name: str, masks: tuple[MaskMod | None, ...], combine: Any) -> MaskMod | None:
    given = [m for m in masks if m is not None]
    for m in given:
        if not callable(m):
            raise fail(name, "mask functions (batch, head, q_idx, kv_idx) -> bool array, or None", repr(m), TypeError)
    if len(given) <= 1:
        return given[0] if given else None

    def composed(batch: Array, head: Array, q_idx: Array, kv_idx: Array) -> Array:
        result = given[0](batch, head, q_idx, kv_idx)
        for m in given[1:]:
            result = combine(result, m(batch, head, q_idx, kv_idx))
        return result

    composed.__name__ = f" {'and' if combine is np.logical_and else 'or'} ".join(
        getattr(m, "__name__", type(m).__name__) for m in given
    )
    return composed


def and_masks(*masks: MaskMod | None) -> MaskMod | None:
    """A key is allowed where every mask function allows it (None ones left out; None when none is given).

    Args:
        masks: mask functions, as ``attention(mask_mod=)`` takes them, or None.
    """
    return _compose("and_masks", masks, np.logical_and)


def or_masks(*masks: MaskMod | None) -> MaskMod | None:
    """A key is allowed where any mask function allows it (None ones left out; None when none is given).

    Args:
        masks: mask functions, as ``attention(mask_mod=)`` takes them, or None.
    """
    return _compose("or_masks", masks, np.logical_or)


class _MaskMod(Variant):
    name = "mask_mod"

    def check(self, value: Any, context: Context) -> MaskMod | None:
        if value is not None and not callable(value):
            expected = "a callable (batch, head, q_idx, kv_idx) -> bool array, or None"
            raise fail("mask_mod", expected, repr(value), TypeError)
        return value

    def of_sequence(self, checked: Any, index: tuple[int, ...], batch: int) -> MaskMod | None:
        if checked is None:
            return None
        return lambda b, head, q_idx, kv_idx: checked(b + batch, head, q_idx, kv_idx)  # its batch index is 0 there

    def record(self, checked: Any) -> str | None:
        return None if checked is None else getattr(checked, "__name__", type(checked).__name__)

    def restore(self, recorded: Any, context: Context) -> str | None:
        if recorded is not None and not isinstance(recorded, str):
            raise fail("mask_mod", "null or the mask function's name", repr(recorded), TypeError)
        return recorded

    def describe(self, recorded: Any, lang: str) -> str | None:
        return None if recorded is None else _WORDS[lang].format(name=recorded)


MASK_MOD = register(_MaskMod())
