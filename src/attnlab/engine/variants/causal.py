"""``is_causal``: query i attends to keys d = j − (i + offset) <= 0
only, offset 0 top-left (torch's ``is_causal``) or S − L bottom-right (flash-attn's).
Its band: d <= 0. Its score rule is the band's (``engine._masks``); no gradient of its own."""

from __future__ import annotations

from typing import Any

from ..._validation import flag
from ._base import Context, Variant, register

__all__ = ["CAUSAL"]

_WORDS = {"en": "causal: query i sees keys j ≤ i", "zh": "因果：查询 i 只看键 j ≤ i"}


class _Causal(Variant):
    name = "is_causal"
    default = False
    compiled = True

    def check(self, value: Any, context: Context) -> bool:
        return flag("is_causal", value)

    def given(self, checked: Any) -> bool:
        return bool(checked)

    def band(self, checked: Any, context: Context) -> tuple[int | None, int | None]:
        return (None, context.offset) if checked else (None, None)

    def record(self, checked: Any) -> bool:
        return bool(checked)

    def describe(self, recorded: Any, lang: str) -> str | None:
        return _WORDS[lang] if recorded else None


CAUSAL = register(_Causal())
