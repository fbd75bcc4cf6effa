"""``softcap=c``: the scores become c·tanh(Z/c) before any bias (Gemma 2's). Its score
rule (``softcap_``) and its gradient (the derivative 1 − tanh², which multiplies dZ before
dQ and dK) are here; the fused kernels compile the same rule (``fused._kernels``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._validation import Array, fail, real_number
from ._base import Context, Variant, register

__all__ = ["SOFTCAP", "check_softcap", "softcap_"]

_WORDS = {
    "en": "softcap {c}: scores become {c}·tanh(z/{c}), within ±{c}",
    "zh": "softcap {c}：分数变为 {c}·tanh(z/{c})，落在 ±{c} 之内",
}


def softcap_(cap: float, scores: Array, derivative: bool) -> Array | None:
    """Z ← c·tanh(Z/c) in place; returns 1 − tanh²(Z/c) when ``derivative`` is asked for."""
    scores /= cap
    np.tanh(scores, out=scores)
    cap_derivative = 1.0 - scores * scores if derivative else None
    scores *= cap
    return cap_derivative


def check_softcap(value: Any) -> float | None:
    """c of Z ← c·tanh(Z/c): a positive finite number, or None."""
    if value is None:
        return None
    cap = real_number("softcap", value)
    if not np.isfinite(cap) or cap <= 0:
        raise fail("softcap", "a positive finite number or None", value)
    return cap


class _Softcap(Variant):
    name = "softcap"
    compiled = True

    def check(self, value: Any, context: Context) -> float | None:
        return check_softcap(value)

    def record(self, checked: Any) -> float | None:
        return None if checked is None else float(checked)

    def describe(self, recorded: Any, lang: str) -> str | None:
        return None if recorded is None else _WORDS[lang].format(c=f"{recorded:g}")


SOFTCAP = register(_Softcap())
