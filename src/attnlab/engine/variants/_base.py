"""What every variant is: the ``Variant`` interface, the ``Band`` of allowed j − i, the
diagonal's offset, and the one registry (letters as in ``engine._problem``).

Every positional rule is written in terms of d = j − (i + offset), key j's distance from
query i's diagonal, where offset is 0 with ``causal_alignment="top_left"`` (torch's
``is_causal``) and S − L with ``"bottom_right"`` (flash-attn's, torch's
``causal_lower_right``: the last query sees the last key).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..._validation import Array, fail

__all__ = [
    "ALIGNMENTS",
    "REGISTRY",
    "Alignment",
    "Band",
    "Context",
    "MaskMod",
    "ScoreMod",
    "Variant",
    "offset",
    "register",
]

Alignment = Literal["top_left", "bottom_right"]
ALIGNMENTS: tuple[Alignment, ...] = ("top_left", "bottom_right")
# FlexAttention's mask function: (batch, head, q_idx, kv_idx) integer arrays that broadcast
# together -> a bool array of their broadcast shape, True where the query may attend the key
MaskMod = Callable[[Array, Array, Array, Array], Array]
# FlexAttention's score function: (score, batch, head, q_idx, kv_idx) -> the new score, the
# score a float array (…, l, s) and the indices integer arrays that broadcast with it
ScoreMod = Callable[[Array, Array, Array, Array, Array], Array]


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

    def allowed(self, rows: slice, cols: slice) -> Array:
        """The bool matrix (l, s) of the block (``rows``, ``cols``): True where j − i lies in
        the band (the one place it is built)."""
        distance = np.arange(cols.start, cols.stop)[None, :] - np.arange(rows.start, rows.stop)[:, None]
        return (distance >= self.lowest) & (distance <= self.highest)

    @classmethod
    def of(cls, is_causal: bool, sides: tuple[int | None, int | None] | None, diagonal: int,
           lengths: tuple[int, int]) -> Band:  # fmt: skip
        """The band of a causal rule and a checked window's ``sides`` (left, right) around
        j − i = ``diagonal``."""
        L, S = lengths
        lowest, highest = -L, S  # beyond every j − i of the problem
        if sides is not None:
            left, right = sides
            if left is not None:
                lowest = max(lowest, diagonal - left)
            if right is not None:
                highest = min(highest, diagonal + right)
        if is_causal:
            highest = min(highest, diagonal)
        return cls(lowest, highest)

    @classmethod
    def full(cls, lengths: tuple[int, int]) -> Band:
        """No limit: every key of an (L, S) problem."""
        return cls.of(False, None, 0, lengths)


def offset(alignment: Any, lengths: tuple[int, int]) -> int:
    """The diagonal's offset for the ``causal_alignment`` ``alignment``: 0 top-left, S − L bottom-right."""
    if not isinstance(alignment, str) or alignment not in ALIGNMENTS:
        raise fail("causal_alignment", f"one of {ALIGNMENTS}", repr(alignment))
    L, S = lengths
    return S - L if alignment == "bottom_right" else 0


@dataclass(frozen=True)
class Context:
    """What a variant's check may read of its call: B…, the compute dtype, (L, S) and the
    diagonal's offset."""

    batch_shape: tuple[int, ...]
    dtype: np.dtype
    lengths: tuple[int, int]
    offset: int


class Variant:
    """One variant: its keyword, its check, its band, its score rule, its record in a
    trace and its words.

    A built-in variant's score rule sits in its module and ``engine._masks`` calls it in the
    one order (softcap, score functions, float mask, ALiBi, biases, the masks); a variant
    registered from outside the package gives a score function as FlexAttention's
    ``score_mod`` (``score_mod``, with its derivative ``score_mod_derivative`` or else one
    by complex step) and/or a bias added after ALiBi (``bias``), and leaves the band and
    the fused engine's compiled tasks alone: a problem with one runs on the tiled engine's
    Python loop (the fused engine's kernels doing its softmax).
    """

    name: str = ""  # the keyword of attention() and the field of Rules
    default: Any = None
    compiled: bool = False  # the fused engine compiles it (built-in variants only)

    def check(self, value: Any, context: Context) -> Any:
        """The value checked and normalised, as the Problem holds it."""
        return value

    def given(self, checked: Any) -> bool:
        """Whether the checked value changes anything (the default does not)."""
        return checked is not None

    def band(self, checked: Any, context: Context) -> tuple[int | None, int | None]:
        """(lowest, highest) of the j − i it allows, None on a side it leaves open."""
        return None, None

    def bias(self, checked: Any, slices: Any, rows: slice, cols: slice, context: Context) -> Array | None:
        """What it adds to the scores of the block (rows, cols) of the slices ``slices``
        (an int n, or an array of them shaped as B…), broadcasting to (…, l, s); None: nothing."""
        return None

    def score_mod(self, checked: Any) -> ScoreMod | None:
        """FlexAttention's ``score_mod(score, batch, head, q_idx, kv_idx)``: the scores after
        the softcap, before any bias or mask, become what it returns (NumPy arrays: ``score``
        a block (…, l, s) in the compute dtype, the indices integer arrays that broadcast
        with it, ``batch`` indexing the flattened dimensions before the heads); None: none."""
        return None

    def score_mod_derivative(self, checked: Any) -> ScoreMod | None:
        """∂score_mod/∂score, called as ``score_mod`` is; None: the engines take it by
        complex step, Im f(z + i·h)/h, exact to rounding for a ``score_mod`` that is
        analytic NumPy code (``engine._masks.score_mod_derivative``)."""
        return None

    def row_scale(self, checked: Any, pb: Any) -> Array | None:
        """A multiplier m_i of each query row's dot products, (B…, L) in the compute dtype,
        for the Problem ``pb``: the engines run on Q's rows times it (``engine._attention``),
        so every engine, compiled or not, takes it as it is; None: none."""
        return None

    def row_scale_gradient(self, checked: Any, pb: Any, grad_scale: Array) -> Array | None:
        """The gradient of its value from dL/dm, ``grad_scale`` (B…, L), that of its row
        multiplier (``Gradients`` holds it under the variant's name)."""
        return None

    def of_sequence(self, checked: Any, index: tuple[int, ...], batch: int) -> Any:
        """The checked value for one sequence's problem (``engine._ragged``), whose batch
        shape is (H,): ``index`` into B… without the heads, ``batch`` its flat index there."""
        return checked

    def record(self, checked: Any) -> Any:
        """What a trace keeps of it: JSON-ready, or None when not given."""
        return None if not self.given(checked) else checked

    def restore(self, recorded: Any, context: Context) -> Any:
        """A record read back from a trace (JSON-decoded), checked by this variant's own
        check against the traced call's ``context`` and recorded again.

        Raises:
            ArgumentError, ArgumentTypeError: what the check refuses, naming the variant.
        """
        return self.record(self.check(recorded, context))

    def head(self, recorded: Any, h: int) -> Any:
        """The record of head ``h`` alone (a per-head value's entry)."""
        return recorded

    def describe(self, recorded: Any, lang: str) -> str | None:
        """The rule in words ("en" or "zh") from what the trace recorded, or None."""
        return None if recorded is None else f"{self.name} {recorded}"


# every variant by its keyword, in the order of the one order of operations
REGISTRY: dict[str, Variant] = {}


def register(variant: Variant) -> Variant:
    """Add ``variant`` to the registry under its name (a new name: the built-ins cannot be replaced)."""
    if not variant.name.isidentifier():
        raise fail("variant", "a Variant whose name is an identifier", repr(variant.name))
    if variant.name in REGISTRY and REGISTRY[variant.name] is not variant:
        raise fail("variant", f"a name not yet registered (not {sorted(REGISTRY)})", repr(variant.name))
    REGISTRY[variant.name] = variant
    return variant
