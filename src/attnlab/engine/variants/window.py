"""``window=(left, right)``: query i attends to keys −left <= d <= right only, d = j − (i +
offset), None on a side unbounded (Mistral's and Gemma's sliding windows: a window of w keys
is (w − 1, 0)). Its band: those two sides. Its score rule is the band's; no gradient."""

from __future__ import annotations

from typing import Any

from ..._validation import fail, is_integer
from ._base import Context, Variant, register

__all__ = ["WINDOW", "check_window"]

_WORDS = {
    "en": {"window": "sliding window {window}: query i sees keys {first} … {last}", "end": "L − 1"},
    "zh": {"window": "滑动窗口 {window}：查询 i 只看键 {first} … {last}", "end": "L − 1"},
}


def check_window(sides: Any) -> tuple[int | None, int | None] | None:
    """A ``window``'s (left, right), each a non-negative int or None; None: no window."""
    if sides is None:
        return None
    expected = "(left, right), each a non-negative int or None (unbounded)"
    if not isinstance(sides, (tuple, list)) or len(sides) != 2:
        raise fail("window", expected, repr(sides), TypeError)
    for side in sides:
        if side is not None and not is_integer(side):
            raise fail("window", expected, repr(tuple(sides)), TypeError)
        if side is not None and side < 0:
            raise fail("window", expected, repr(tuple(sides)))
    left, right = (None if side is None else int(side) for side in sides)
    return left, right


class _Window(Variant):
    name = "window"
    compiled = True

    def check(self, value: Any, context: Context) -> tuple[int | None, int | None] | None:
        return check_window(value)

    def band(self, checked: Any, context: Context) -> tuple[int | None, int | None]:
        if checked is None:
            return None, None
        left, right = checked
        return (
            None if left is None else context.offset - left,
            None if right is None else context.offset + right,
        )

    def record(self, checked: Any) -> list[int | None] | None:
        return None if checked is None else [checked[0], checked[1]]

    def describe(self, recorded: Any, lang: str) -> str | None:
        if recorded is None:
            return None
        left, right = recorded
        first = "0" if left is None else f"i − {left}" if left else "i"
        last = _WORDS[lang]["end"] if right is None else f"i + {right}" if right else "i"
        shown = "(" + ", ".join("None" if side is None else str(side) for side in recorded) + ")"
        return _WORDS[lang]["window"].format(window=shown, first=first, last=last)


WINDOW = register(_Window())
