"""The attention variants, checked: windows, causal alignment, softcapping, ALiBi, sinks
and mask functions (letters as in ``_problem``).

Every positional rule is written in terms of d = j − (i + offset), key j's distance from
query i's diagonal, where offset is 0 with ``causal_alignment="top_left"`` (torch's
``is_causal``) and S − L with ``"bottom_right"`` (flash-attn's, torch's
``causal_lower_right``: the last query sees the last key):

    is_causal          d <= 0
    window=(l, r)      −l <= d <= r       (None on a side: unbounded)
    alibi_slopes m     Z += −m·|d|

The two masks meet in one band of allowed j − i, ``Band``, which the blocked engines use
to skip the blocks that lie outside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._validation import Array, array_of, fail, is_integer, real_number

__all__ = ["ALIGNMENTS", "Alignment", "Band", "MaskMod", "alibi_slopes", "band", "offset", "sinks", "softcap"]

Alignment = Literal["top_left", "bottom_right"]
ALIGNMENTS: tuple[Alignment, ...] = ("top_left", "bottom_right")
# FlexAttention's mask function: (batch, head, q_idx, kv_idx) integer arrays that broadcast
# together -> a bool array of their broadcast shape, True where the query may attend the key
MaskMod = Callable[[Array, Array, Array, Array], Array]


@dataclass(frozen=True)
class Band:
    """The j − i that a query may attend: ``lowest`` <= j − i <= ``highest`` (both ints:
    an unbounded side is one that no query and key of the problem reach)."""

    lowest: int
    highest: int

    def keys(self, rows: slice, length: int) -> tuple[int, int]:
        """(first, stop): the keys any of the query rows ``rows`` may attend, of ``length``."""
        return max(0, rows.start + self.lowest), max(0, min(length, rows.stop - 1 + self.highest + 1))

    def queries(self, cols: slice, length: int) -> tuple[int, int]:
        """(first, stop): the queries, of ``length``, that may attend any key of ``cols``."""
        return max(0, cols.start - self.highest), max(0, min(length, cols.stop - 1 - self.lowest + 1))

    def inside(self, rows: slice, cols: slice) -> bool:
        """Whether every query of ``rows`` may attend every key of ``cols``."""
        return cols.start - (rows.stop - 1) >= self.lowest and cols.stop - 1 - rows.start <= self.highest

    def limits(self, lengths: tuple[int, int]) -> bool:
        """Whether it masks any key of an (L, S) problem."""
        L, S = lengths
        return self.lowest > -(L - 1) or self.highest < S - 1


def offset(causal_alignment: Any, lengths: tuple[int, int]) -> int:
    """The diagonal's offset: 0 top-left, S − L bottom-right."""
    if not isinstance(causal_alignment, str) or causal_alignment not in ALIGNMENTS:
        raise fail("causal_alignment", f"one of {ALIGNMENTS}", repr(causal_alignment))
    L, S = lengths
    return S - L if causal_alignment == "bottom_right" else 0


def band(is_causal: bool, window: Any, diagonal: int, lengths: tuple[int, int]) -> Band:
    """The band that ``is_causal`` and ``window`` allow around the diagonal j − i = ``diagonal``."""
    L, S = lengths
    lowest, highest = -L, S  # beyond every j − i of the problem
    if window is not None:
        left, right = _window(window)
        if left is not None:
            lowest = max(lowest, diagonal - left)
        if right is not None:
            highest = min(highest, diagonal + right)
    if is_causal:
        highest = min(highest, diagonal)
    return Band(lowest, highest)


def _window(window: Any) -> tuple[int | None, int | None]:
    expected = "(left, right), each a non-negative int or None (unbounded)"
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise fail("window", expected, repr(window), TypeError)
    for side in window:
        if side is not None and not is_integer(side):
            raise fail("window", expected, repr(tuple(window)), TypeError)
        if side is not None and side < 0:
            raise fail("window", expected, repr(tuple(window)))
    left, right = (None if side is None else int(side) for side in window)
    return left, right


def softcap(cap: Any) -> float | None:
    """c of Z ← c·tanh(Z/c): a positive finite number, or None."""
    if cap is None:
        return None
    value = real_number("softcap", cap)
    if not np.isfinite(value) or value <= 0:
        raise fail("softcap", "a positive finite number or None", cap)
    return value


def _per_head(
    name: str, x: Any, shapes: str, ndims: tuple[int, ...], batch_shape: tuple[int, ...], dtype: np.dtype
) -> Array:
    """A per-slice parameter of finite real numbers whose last dimension is the H query
    heads, broadcast to B… (a read-only view); 2-D inputs count as one head."""
    values = array_of(name, x)
    if values.dtype.kind not in "fiu":
        raise fail(name, "an array of real numbers", f"dtype {values.dtype}", TypeError)
    target = batch_shape or (1,)
    if values.ndim not in ndims or values.ndim > len(target) or values.shape[-1] != target[-1]:
        raise fail(
            name, f"shape {shapes} with H={target[-1]}, for the batch shape {batch_shape}", f"shape {values.shape}"
        )
    try:
        stretched = np.broadcast_to(values.astype(dtype), target).reshape(batch_shape)
    except ValueError:
        raise fail(
            name, f"shape {shapes} that broadcasts to the batch shape {batch_shape}", f"shape {values.shape}"
        ) from None
    if not np.isfinite(stretched).all():
        raise fail(name, "finite values", "a NaN or an infinity")
    return stretched


def alibi_slopes(x: Any, batch_shape: tuple[int, ...], dtype: np.dtype) -> Array | None:
    """ALiBi's slopes, (H,) or (B, H), broadcast to B…; None when not given."""
    return None if x is None else _per_head("alibi_slopes", x, "(H,) or (B, H)", (1, 2), batch_shape, dtype)


def sinks(x: Any, batch_shape: tuple[int, ...], dtype: np.dtype) -> Array | None:
    """One sink logit per query head, (H,), broadcast to B…; None when not given."""
    return None if x is None else _per_head("sinks", x, "(H,)", (1,), batch_shape, dtype)


def mask_mod(x: Any) -> MaskMod | None:
    """A callable, or None."""
    if x is not None and not callable(x):
        raise fail("mask_mod", "a callable (batch, head, q_idx, kv_idx) -> bool array, or None", repr(x), TypeError)
    return x
