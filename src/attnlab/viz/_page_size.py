"""The one size policy of a page: its limits (PAGE_LIMITS), the shape its size depends on
(PageShape), the bytes it would take (page_bytes), how it carries its numbers to fit
(encoding), and the refusal of one too large (check_page_size), all from the shape alone,
before any work.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .._validation import Array, fail
from ..trace import ModelTrace
from ..trace._trace import Trace
from ._encoding import FIXED_BITS, fixed_bits

__all__ = ["GIVEN_SCORES_UP_TO", "PAGE_LIMITS", "PageShape", "check_page_size", "encoding", "page_bytes", "with_heads"]

# The one place a page's size is limited (MB: 10⁶ bytes; measured in docs/benchmarks.md, "Long inputs in the page"):
PAGE_LIMITS = {
    "page": 64 * 10**6,  # the bytes of a page's data (q, k, v, masks, bias) at most: what Chromium opens in 3 s
    "exact": 16 * 10**6,  # a model's page carries exact numbers up to this, rounded past it (a layer's: always)
    "head_cells": 4096**2,  # L·S of one head, whose scores and weights the page computes when it shows the head
}
GIVEN_SCORES_UP_TO = 2**18  # scores in all: up to this many the page carries them, past it computes q·k
_ROUNDED = ("float24", *(f"fixed{bits}" for bits in FIXED_BITS))  # past "exact": a model's page, most precise first


class PageShape(NamedTuple):
    """What a page's size depends on: L tokens, H heads and the layers it shows, the
    widths (E, Ev) of q, k and v, whether it is a model's page (rounded to fit) or a
    single layer's (exact), the bytes of one number of the trace, and the heads of a
    bias (L, L) it carries (0: none). A page of entries of other lengths (an
    encoder-decoder model's, cross-attention's L × S) gives its counts exactly: ``scores``
    Σ L·S·H, ``cells`` Σ L·S, ``numbers`` Σ H·(L·E + S·(E + Ev)) (q, k and v),
    ``bias_scores`` Σ L·S·(the bias's heads), ``rows`` Σ L (the masks' rows) and
    ``head_cells`` the largest L·S (one head's); 0: from ``length`` as above."""

    length: int
    heads: int
    layers: int
    widths: tuple[int, int]
    model: bool
    itemsize: int = 8
    bias_heads: int = 0
    scores: int = 0
    cells: int = 0
    numbers: int = 0
    bias_scores: int = 0
    rows: int = 0
    head_cells: int = 0

    @classmethod
    def of(cls, trace: Trace | ModelTrace) -> PageShape:
        """The shape of the page of ``trace``, its counts exact."""
        traces = list(trace.layers.values()) if isinstance(trace, ModelTrace) else [trace]
        q, v = with_heads(traces[0].Q), with_heads(traces[0].V)  # (H, L, E), (H, L, Ev)
        itemsize = 8 if q.dtype == np.float64 else 4
        bias_heads = [0 if t.bias is None else with_heads(t.bias).shape[0] for t in traces]
        widths, model = (q.shape[-1], v.shape[-1]), isinstance(trace, ModelTrace)
        cells = [len(t.inputs) * t.num_keys for t in traces]
        numbers = sum(with_heads(t.Q).size + with_heads(t.K).size + with_heads(t.V).size for t in traces)
        return cls(
            max(len(t.inputs) for t in traces), max(t.num_heads for t in traces), len(traces), widths, model,
            itemsize, sum(bias_heads), sum(c * t.num_heads for c, t in zip(cells, traces, strict=True)), sum(cells),
            numbers, sum(c * b for c, b in zip(cells, bias_heads, strict=True)), sum(len(t.inputs) for t in traces),
            max(cells),
        )  # fmt: skip


def with_heads(x: Array) -> Array:
    """A trace's array with its head axis, (H, L, ·), one head or many."""
    return x if x.ndim == 3 else x[None]


def _base64(size: float) -> int:
    """The characters of ``size`` bytes in base64."""
    return int(size * 4 // 3)


def page_bytes(shape: PageShape, dtype: str) -> int:
    """About the bytes of the data of a page of ``shape`` whose q, k and v are carried as
    ``dtype`` (:func:`~attnlab.viz._encoding.binary`), all in base64: q, k and v,
    L·H·layers·(2E + Ev) numbers (fixedN: N bits each and a float32 step a vector); the
    raw scores while the page carries them, and a bias (float mask, ALiBi), in the
    numbers' float (float24 beside fixed numbers); the masks, as runs, about 12 bytes a
    row (a causal or windowed row's; :func:`render_page` checks the page's true size)."""
    E, Ev = shape.widths
    numbers = shape.numbers or shape.length * shape.heads * shape.layers * (2 * E + Ev)
    exact = dtype in ("float64", "float32")
    floats = shape.itemsize if exact else 3  # the bytes of a float: exact, or float24
    if dtype.startswith("fixed"):
        vectors = numbers * 3 // max(1, 2 * E + Ev)  # q's, k's and v's rows (exact where the widths are even)
        carried = numbers * fixed_bits(dtype) / 8 + 4 * vectors
    else:
        carried = numbers * floats
    scores = shape.scores or shape.length**2 * shape.heads * shape.layers
    given = scores * floats if scores <= GIVEN_SCORES_UP_TO else 0
    bias = (shape.bias_scores or shape.length**2 * shape.bias_heads) * floats
    return _base64(carried + given + bias) + 12 * (shape.rows or shape.length * shape.layers)


def encoding(shape: PageShape) -> str | None:
    """How a page of ``shape`` carries q, k and v: exact (float64 or float32, as the trace)
    while its data is at most PAGE_LIMITS["exact"] bytes, or always for a single layer's
    page; past that a model's page rounds them, to the most precise of float24 and fixedN
    (N from 16 down to 10) whose page is at most PAGE_LIMITS["page"]. None: none fits."""
    exact = "float64" if shape.itemsize == 8 else "float32"
    if page_bytes(shape, exact) <= min(PAGE_LIMITS["page"], PAGE_LIMITS["exact"] if shape.model else math.inf):
        return exact
    if not shape.model:
        return None
    return next((dtype for dtype in _ROUNDED if page_bytes(shape, dtype) <= PAGE_LIMITS["page"]), None)


def check_page_size(
    page: Trace | ModelTrace | PageShape, name: str = "trace", fewer_layers: str = "fewer layers"
) -> None:
    """Refuse a page that a browser would not open in a few seconds, from its shape alone
    (so before any work, given a :class:`PageShape`), by PAGE_LIMITS, the one place its
    limits are: its data (:func:`page_bytes`) at most PAGE_LIMITS["page"] bytes however
    it carries its numbers (:func:`encoding`: a model's rounded to fit, down to 10 bits;
    a single layer's exact), and each head at most PAGE_LIMITS["head_cells"] (L·S) cells,
    whose scores and weights the page computes when it shows the head.

    Raises:
        ArgumentError: ``name``: a page too large, its size and the limit, and what to
            use fewer of (a model's layers in the words ``fewer_layers``, such as a
            command-line option).
    """
    shape = page if isinstance(page, PageShape) else PageShape.of(page)
    length, heads, layers = shape.length, shape.heads, shape.layers
    if shape.model:
        held = f"{length} tokens × {layers} layer{'s' * (layers > 1)} × {heads} heads"
        fewer = f"{fewer_layers}, or fewer tokens" if layers > 1 else "fewer tokens"
    else:
        held, fewer = f"{length} tokens × {heads} heads", "fewer tokens or heads"
    cells, most = shape.head_cells or length**2, PAGE_LIMITS["head_cells"]
    if cells > most:
        side = f" ({math.isqrt(most)}²)" if math.isqrt(most) ** 2 == most else ""
        too_many = f"a head of {cells:,} cells (L·S) for the page to compute, at most {most:,}{side}"
        raise fail(name, "a page that a browser opens in a few seconds", f"{held}: {too_many}; use fewer tokens")
    if encoding(shape) is not None:
        return
    least = "fixed10" if shape.model else ("float64" if shape.itemsize == 8 else "float32")
    size, limit = page_bytes(shape, least), PAGE_LIMITS["page"]
    how = "q, k and v at 10 bits, the least" if shape.model else "exact"
    fit = limit * layers // size if shape.model and layers > 1 else 0
    too_many = f"a page of about {size / 1e6:.1f} MB ({how}), at most {limit / 1e6:g} MB" + (
        f" (about {fit} of its layers fit)" if fit else ""
    )
    raise fail(name, "a page that a browser opens in a few seconds", f"{held}: {too_many}; use {fewer}")
