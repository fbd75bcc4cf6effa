"""``causal_alignment``: where the diagonal of ``is_causal``, ``window`` and ALiBi lies:
offset 0 "top_left" (torch's ``is_causal``), S − L "bottom_right" (flash-attn's, torch's
``causal_lower_right``: the last query sees the last key). No band, score or gradient of
its own: it moves the others'."""

from __future__ import annotations

from typing import Any

from ._base import Context, Variant, offset, register

__all__ = ["ALIGNMENT"]

_ALIGNMENT_WORDS = {
    "en": "bottom-right aligned (query i's diagonal is key i + S − L: the same as top-left when S = L)",
    "zh": "右下对齐（查询 i 的对角线在键 i + S − L：S = L 时与左上相同）",
}


class _Alignment(Variant):
    name = "causal_alignment"
    default = "top_left"
    compiled = True

    def check(self, value: Any, context: Context) -> str:
        offset(value, context.lengths)  # raises what is wrong with it
        return str(value)

    def given(self, checked: Any) -> bool:
        return checked != "top_left"

    def record(self, checked: Any) -> str:
        return str(checked)

    def describe(self, recorded: Any, lang: str) -> str | None:
        return _ALIGNMENT_WORDS[lang] if recorded == "bottom_right" else None


ALIGNMENT = register(_Alignment())
