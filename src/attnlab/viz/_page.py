"""One self-contained HTML page that shows a trace: scripts, styles and data inline,
nothing fetched from the network.

A trace is over one sequence of tokens or two (cross-attention: an encoder-decoder
model's decoder tokens on the rows, its encoder's on the columns); a model's page chooses
its entries by name, grouped by kind (encoder, decoder, cross). A vision model's page
carries its image (PNG, drawn by Pillow) and draws each patch as its token, with the
chosen query's attention over the image.

The page holds the raw scores Q·Kᵀ, the mask, and Q, K, V of every head, and the
variants the trace was built with (softcap, the bias of a float mask and ALiBi, the
sinks); it computes the weights itself as softmax(softcap(scale · scores) + bias) over
the unmasked keys, as the engine does, so that its scale slider can recompute them live.
Masked cells are drawn apart (grey, struck through), and the rules are said in a note.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from .._validation import Array, MissingDependencyError, fail, output_path
from ..trace import GenerationTrace, ModelTrace
from ..trace._display import display_text
from ..trace._trace import Trace
from ._encoding import FIXED_BITS, binary, fixed_bits, mask_runs
from ._views import Views, split_pair, views_data

__all__ = [
    "PAGE_LIMITS",
    "PageShape",
    "check_page_size",
    "check_path",
    "encoding",
    "notebook_html",
    "opening",
    "page_bytes",
    "page_data",
    "render_page",
    "show",
    "view",
    "view_ablation",
    "write_page",
]

_PLACEHOLDER = "__ATTNLAB_DATA__"
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
        q, v = _with_heads(traces[0].Q), _with_heads(traces[0].V)  # (H, L, E), (H, L, Ev)
        itemsize = 8 if q.dtype == np.float64 else 4
        bias_heads = [0 if t.bias is None else _with_heads(t.bias).shape[0] for t in traces]
        widths, model = (q.shape[-1], v.shape[-1]), isinstance(trace, ModelTrace)
        cells = [len(t.inputs) * t.num_keys for t in traces]
        numbers = sum(_with_heads(t.Q).size + _with_heads(t.K).size + _with_heads(t.V).size for t in traces)
        return cls(
            max(len(t.inputs) for t in traces), max(t.num_heads for t in traces), len(traces), widths, model,
            itemsize, sum(bias_heads), sum(c * t.num_heads for c, t in zip(cells, traces, strict=True)), sum(cells),
            numbers, sum(c * b for c, b in zip(cells, bias_heads, strict=True)), sum(len(t.inputs) for t in traces),
            max(cells),
        )  # fmt: skip


def _with_heads(x: Array) -> Array:
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


def opening(
    trace: Trace | ModelTrace, layer: int | None = None, head: int | None = None, query: int | None = None
) -> dict[str, int]:
    """The view the page opens on (a link's #layer=…&head=…&query=… still wins): the
    given layer (the model's layer number), head and query, else the trace's own
    (:attr:`ModelTrace.opens`: a model's answering head), else the first layer, head 0,
    query 0.

    Raises:
        ArgumentError: ``layer``: not a traced layer (a single layer's trace has only
            0); ``head``: not in 0..H−1; ``query``: not in 0..L−1.
    """
    opens = dict(trace.opens or {}) if isinstance(trace, ModelTrace) else {}
    indices = list(trace.layers) if isinstance(trace, ModelTrace) else [0]
    if layer is not None:
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or int(layer) not in indices:
            among = ", ".join(map(str, indices))
            raise fail("layer", f"a traced layer ({among})", repr(layer))
        opens["layer"] = int(layer)
    if opens.get("layer") not in indices:  # a saved trace of other layers than its answer's
        opens = {"layer": indices[0]}
    shown = trace.layers[opens["layer"]] if isinstance(trace, ModelTrace) else trace
    length = len(shown.inputs)  # its queries: the tokens, or an encoder's the source tokens
    for name, given, limit in (("head", head, shown.num_heads), ("query", query, length)):
        if given is not None:
            if isinstance(given, bool) or not isinstance(given, (int, np.integer)) or not 0 <= given < limit:
                raise fail(name, f"an index in 0..{limit - 1}", repr(given))
            opens[name] = int(given)
        elif not 0 <= opens.get(name, 0) < limit:
            opens[name] = 0
    return {"layer": indices.index(opens["layer"]), "head": opens.get("head", 0), "query": opens.get("query", 0)}


def page_data(trace: Trace | ModelTrace, opens: dict[str, int] | None = None) -> dict[str, object]:
    """What the page needs: its sequences of tokens (one, or two: an encoder-decoder
    model's decoder tokens then its encoder's, a cross-attention trace's queries then its
    keys), each with its marks, and, per layer (one for a Trace), its name (a module path,
    "layer i"), kind, the sequences on its rows and columns, scale, mask and per-head q
    (H, L, E), k, v (H, S, ·) as base64 arrays, exact or rounded to fit as :func:`encoding`
    chooses (fixed numbers only where they are all finite; float24 for a layer with
    others); the raw scores q·kᵀ (H, L, S) too while the page holds at most
    GIVEN_SCORES_UP_TO of them in all, past which the page computes them from q and k
    (never the weights: the page computes a head's when it shows it); the view it opens
    on (``opens``, as :func:`opening` gives, its layer a position among the page's
    layers); the seed of random weights (a note on the page), or None; a vision model's
    image (:func:`image_data`), or None. Tokens are shown as
    :func:`~attnlab.trace._display.display_text` gives.

    Raises:
        MissingDependencyError: the trace has an image and Pillow is not installed.
    """
    sequences, rows_cols = _sequences(trace)
    named: list[tuple[int | None, Trace]] = (
        list(trace.layers.items()) if isinstance(trace, ModelTrace) else [(None, trace)]
    )
    model = trace.model if isinstance(trace, ModelTrace) else ""
    given = sum(_with_heads(t.scores).size for _, t in named) <= GIVEN_SCORES_UP_TO
    shape = PageShape.of(trace)
    exact = "float64" if shape.itemsize == 8 else "float32"
    chosen = encoding(shape) or ("fixed10" if shape.model else exact)  # (past the limits: check_page_size's)
    layers = []
    for i, one in named:
        finite = all(np.isfinite(x).all() for x in (one.Q, one.K, one.V))
        dtype = "float24" if chosen.startswith("fixed") and not finite else chosen
        name = "" if i is None else trace.name(i) if isinstance(trace, ModelTrace) else f"layer {i}"
        kind = trace.kind(i) if isinstance(trace, ModelTrace) and i is not None else "self"
        rows, cols = rows_cols(kind)
        layers.append(
            {"name": name, "index": i, "kind": kind, "rows": rows, "cols": cols, **_layer_data(one, given, dtype)}
        )
    seeds = [t.random_seed for _, t in named if t.random_seed is not None]
    return {  # the page shows text: control characters and lone surrogates escaped (no page can encode those)
        "model": display_text(model), "sequences": sequences, "layers": layers, "opens": opens or opening(trace),
        "random_seed": seeds[0] if seeds else None,
        "notes": [display_text(n) for n in trace.notes] if isinstance(trace, ModelTrace) else [],
        "image": image_data(trace) if isinstance(trace, ModelTrace) else None,
    }  # fmt: skip


def _sequence(
    name: str, tokens: list[str], special: list[bool], parts: list[str], template: list[bool] | None = None
) -> dict[str, object]:
    """One sequence of the page: its name and its tokens, as text fit for display, with their marks
    (special, a piece of a character, put there by a chat template)."""
    return {
        "name": name, "tokens": [display_text(t) for t in tokens], "special": list(special),
        "parts": [display_text(p) for p in parts], "template": list(template or [False] * len(tokens)),
    }  # fmt: skip


def _sequences(trace: Trace | ModelTrace) -> tuple[list[dict[str, object]], Callable[[str], tuple[int, int]]]:
    """The page's sequences, and which of them (rows, columns) an entry of a kind is over."""
    if isinstance(trace, Trace):
        rows = _sequence("queries", trace.labels, [False] * len(trace.labels), [""] * len(trace.labels))
        if trace.key_tokens is None and trace.num_keys == len(trace.inputs):
            rows["name"] = "tokens"
            return [rows], lambda kind: (0, 0)
        keys = trace.key_labels
        return [rows, _sequence("keys", keys, [False] * len(keys), [""] * len(keys))], lambda kind: (0, 1)
    if trace.source_tokens is None:
        return [_sequence("tokens", trace.tokens, trace.special, trace.parts, trace.template)], lambda kind: (0, 0)
    target = _sequence("decoder", trace.tokens, trace.special, trace.parts)
    source = _sequence("encoder", trace.source_tokens, trace.source_special, trace.source_parts)
    over = {"encoder": (1, 1), "cross": (0, 1)}  # the decoder's self-attention: (0, 0)
    return [target, source], lambda kind: over.get(kind, (0, 0))


def image_data(trace: ModelTrace) -> dict[str, object] | None:
    """A vision model's image for its page, or None: the PNG as base64, its height and
    width, the patch grid (rows, cols), the sequence (0 or 1) whose tokens are the patches
    and the patches' token indices, row by row (the tokens not marked special).

    Raises:
        MissingDependencyError: Pillow is not installed (``pip install 'attnlab[hf]'``).
    """
    if trace.image is None or trace.patch_grid is None:
        return None
    try:
        from PIL import Image
    except ImportError:
        raise MissingDependencyError(
            "a vision model's page draws its image with Pillow: pip install 'attnlab[hf]'"
        ) from None
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(trace.image, dtype=np.uint8), "RGB").save(buffer, format="PNG")
    on_source = trace.image_sequence == "source"
    special = trace.source_special if on_source else trace.special
    height, width, _ = trace.image.shape
    return {
        "png": base64.b64encode(buffer.getvalue()).decode(), "height": int(height), "width": int(width),
        "grid": list(trace.patch_grid), "sequence": 1 if on_source else 0,
        "patches": [i for i, marked in enumerate(special) if not marked],
    }  # fmt: skip


def _layer_data(trace: Trace, with_scores: bool, dtype: str) -> dict[str, object]:
    """One attention layer's numbers for the page: q, k and v as ``dtype`` (the raw
    scores and a bias in its float: float24 beside fixed numbers), whether the trace's
    numbers are float32 (its scores round as float32), its masks as runs
    (:func:`~attnlab.viz._encoding.mask_runs`), one per head or one for all, and its
    variants (softcap, bias, sinks, their words)."""
    masked = _with_heads(trace.masked)  # (H, L, L)
    masked = masked[:1] if (masked == masked[:1]).all() else masked
    q, k, v = (_with_heads(x) for x in (trace.Q, trace.K, trace.V))  # (H, L, E), (H, L, E), (H, L, Ev)
    variants = trace.variants
    bias = None if trace.bias is None else _with_heads(trace.bias)  # (H, L, L)
    if bias is not None and np.array_equal(bias, np.broadcast_to(bias[:1], bias.shape)):
        bias = bias[:1]  # every head adds the same (a float mask)
    sinks = None if variants is None or variants.sinks is None else list(variants.sinks)
    floats = "float24" if dtype.startswith("fixed") else dtype
    return {
        "scale": trace.scale,
        "heads": q.shape[0],
        "d_k": int(q.shape[-1]),
        "d_v": int(v.shape[-1]),
        "dtype": dtype,
        "single": q.dtype != np.float64,
        "masks": mask_runs(masked),
        **{name: binary(x, dtype) for name, x in (("q", q), ("k", k), ("v", v))},
        "scores": binary(_with_heads(trace.scores), floats) if with_scores else None,
        "bias": None if bias is None else binary(bias, floats),
        "bias_heads": 0 if bias is None else bias.shape[0],
        "softcap": None if variants is None else variants.softcap,
        "sinks": None if sinks is None else sinks * (q.shape[0] if len(sinks) == 1 else 1),
        "rules": "" if variants is None else variants.describe("en"),
    }


def render_page(trace: Trace | ModelTrace, opens: dict[str, int] | None = None, views: Views | None = None) -> str:
    """The HTML text: assets/page.html with page.css and page.js inline, opening on
    ``opens`` (:func:`opening`'s; default the trace's own), and the ``views`` beyond the
    trace's (:mod:`._views`: a second text, generated tokens, rollout and flow, an
    ablation) with views.css and views.js. The data sits in JSON script blocks with '<',
    '>' and '&' escaped, so no token can end the block or inject markup; the scripts only
    ever write tokens as text."""
    check_page_size(trace)
    payload = json.dumps(page_data(trace, opens), ensure_ascii=False, allow_nan=False)
    if len(payload) > PAGE_LIMITS["page"] + 10**6:  # masks of many runs a row, past page_bytes' estimate
        shape = PageShape.of(trace)
        raise fail(
            "trace", "a page that a browser opens in a few seconds",
            f"a page of {len(payload) / 1e6:.1f} MB, at most {PAGE_LIMITS['page'] / 1e6:g} MB: masks of many runs "
            f"a row; use fewer tokens" + (" or fewer layers" if shape.layers > 1 else ""),
        )  # fmt: skip
    return _filled_page(_escaped(payload), _escaped_json(views_data(trace, views)))


def _escaped_json(data: object) -> str:
    return _escaped(json.dumps(data, ensure_ascii=False, allow_nan=False))


def _escaped(payload: str) -> str:
    """JSON that cannot close its <script> block."""
    return payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


_ASSET_SLOTS = {  # in page.html: the file it holds
    "__ATTNLAB_STYLE__": "page.css", "__ATTNLAB_SCRIPT__": "page.js",
    "__ATTNLAB_VIEWS_STYLE__": "views.css", "__ATTNLAB_VIEWS_SCRIPT__": "views.js",
}  # fmt: skip
_VIEWS_PLACEHOLDER = "__ATTNLAB_VIEWS_DATA__"
_SLOT = re.compile("|".join(re.escape(slot) for slot in (*_ASSET_SLOTS, _VIEWS_PLACEHOLDER, _PLACEHOLDER)))


def _filled_page(payload: str, views_payload: str = "null") -> str:
    """assets/page.html with assets/page.css and views.css in its <style>s, page.js and
    views.js in its <script>s, ``payload`` (escaped JSON) in its data block and
    ``views_payload`` in the views' block: one pass, so nothing filled in is searched for
    slots again (a token may read __ATTNLAB_SCRIPT__)."""
    assets = files("attnlab.viz") / "assets"
    filling = {slot: (assets / name).read_text(encoding="utf-8") for slot, name in _ASSET_SLOTS.items()}
    filling[_PLACEHOLDER] = payload
    filling[_VIEWS_PLACEHOLDER] = views_payload
    return _SLOT.sub(lambda slot: filling[slot[0]], (assets / "page.html").read_text(encoding="utf-8"))


def check_path(path: str | Path) -> Path:
    """``path`` as a Path, once it names an .html file in a folder that exists."""
    return output_path(path, (".html", ".htm"))


def write_page(
    trace: Trace | ModelTrace, path: str | Path, opens: dict[str, int] | None = None, views: Views | None = None
) -> None:
    """Write the page of ``trace`` to ``path`` (.html), opening on ``opens``, with ``views`` (see
    :func:`render_page`)."""
    check_path(path).write_text(render_page(trace, opens, views), encoding="utf-8")


def view(
    trace: Trace | ModelTrace | tuple[ModelTrace, ModelTrace],
    path: str | Path | None = None,
    *,
    layer: int | None = None,
    head: int | None = None,
    query: int | None = None,
    generation: GenerationTrace | None = None,
    rollout: ArrayLike | None = None,
    flow: ArrayLike | None = None,
) -> str | None:
    """The interactive page of ``trace``, self-contained: scripts, styles and data inline.

    Args:
        trace: an :class:`attnlab.Trace` or a model's :class:`attnlab.models.ModelTrace`;
            or a pair (A, B) of ModelTraces of two texts through one model (the same
            layers): A in the main views, and A and B side by side under the same layer
            and head with their difference where the tokens align (a longest common
            subsequence of the tokens, gaps of one length paired position by position).
        path: the .html file to write; None returns the page as HTML text.
        layer: the layer it opens on (a model's layer number, among the traced ones).
        head: the head it opens on.
        query: the query it opens on (a token's position, 0..L−1).
        generation: a :class:`attnlab.models.GenerationTrace` (``Model.trace_generation``,
            ``attnlab.hf.trace_generation``) of the tokens the trace is over: a view of
            each generated token's attention over everything before it.
        rollout: attention rollout over the trace's tokens, (layers, L, L) (as
            ``attnlab.analysis.rollout`` gives): a view of a layer's matrix and a query's row.
        flow: attention flow, (layers, L, L) (``attnlab.analysis.flow``), beside the rollout.

    Each of layer, head and query left None is the trace's own (a model's answering head
    where its config names one, such as builtin:coref's layer 1, head 0 on the pronoun),
    else the first traced layer, head 0, query 0. A link's ``#layer=…&head=…&query=…`` wins
    over all of them.

    Raises:
        ArgumentError: a path that is not an .html file in an existing folder, a trace
            too large for a browser, a layer, head or query out of range, or a view that
            does not fit the trace (see :func:`._views.views_data`).
        ArgumentTypeError: a trace, pair or generation of another type.
    """
    first, second = split_pair(trace)
    _check_trace(first)
    if generation is not None and not isinstance(generation, GenerationTrace):
        raise fail("generation", "an attnlab.models.GenerationTrace", type(generation).__name__, TypeError)
    opens = opening(first, layer, head, query)
    views = Views(second, generation, rollout, flow)  # type: ignore[arg-type]  # views_data checks the arrays
    if path is None:
        return render_page(first, opens, views)
    write_page(first, path, opens, views)
    return None


def view_ablation(
    trace: ModelTrace,
    ablation: dict[str, Any],
    path: str | Path | None = None,
    *,
    layer: int | None = None,
    head: int | None = None,
    query: int | None = None,
) -> str | None:
    """The page of ``trace`` with an ablation's layers × heads heatmap: each cell the
    effect of ablating that head, and a click on it opens that head in the main views.

    Args:
        trace: the model's trace of the ablated text (every layer, for every cell to open).
        ablation: ``{"effect": layers × heads floats (None: not ablated), "metric":
            "Δ log p(target)" or "KL", "target": a token or None, "mode": "zero", "mean"
            or "patch"}``, as ``attnlab.analysis.ablate(...).to_dict()`` gives (its other
            keys ignored).
        path: the .html file to write; None returns the page as HTML text.
        layer: the layer it opens on, as :func:`view` takes it.
        head: the head it opens on.
        query: the query it opens on.

    Raises:
        ArgumentError, ArgumentTypeError: what :func:`view` refuses, and an ablation of
            another shape than the model's layers × heads or with other fields.
    """
    if not isinstance(trace, ModelTrace):
        raise fail("trace", "an attnlab.models.ModelTrace", type(trace).__name__, TypeError)
    opens = opening(trace, layer, head, query)
    views = Views(ablation=ablation)
    if path is None:
        return render_page(trace, opens, views)
    write_page(trace, path, opens, views)
    return None


def _check_trace(trace: object) -> None:
    if not isinstance(trace, (Trace, ModelTrace)):
        raise fail("trace", "an attnlab.Trace or attnlab.models.ModelTrace", type(trace).__name__, TypeError)


def notebook_html(
    trace: Trace | ModelTrace, height: int = 900, opens: dict[str, int] | None = None, views: Views | None = None
) -> str:
    """The page in a sandboxed iframe, for Jupyter, opening on ``opens``, with ``views``
    (see :func:`render_page`): its scripts run in an opaque origin that can reach neither
    the notebook nor the network."""
    page = html.escape(render_page(trace, opens, views), quote=True)
    return (  # in a div: IPython warns about HTML that starts with <iframe
        f'<div><iframe sandbox="allow-scripts allow-downloads" srcdoc="{page}" title="attnlab view" '
        f'style="width: 100%; height: {height}px; border: 1px solid #ddd"></iframe></div>'
    )


def show(
    trace: Trace | ModelTrace | tuple[ModelTrace, ModelTrace],
    *,
    layer: int | None = None,
    head: int | None = None,
    query: int | None = None,
) -> None:
    """Display the page of ``trace`` in a Jupyter notebook (IPython's display).

    Args:
        trace: an :class:`attnlab.Trace` or a model's :class:`attnlab.models.ModelTrace`,
            or a pair of ModelTraces of two texts (see :func:`view`).
        layer: the layer it opens on, as :func:`view` takes it.
        head: the head it opens on.
        query: the query it opens on.

    Raises:
        ArgumentError: a layer, head or query out of range (see :func:`view`).
        MissingDependencyError: IPython is not installed.
    """
    first, second = split_pair(trace)
    _check_trace(first)
    opens = opening(first, layer, head, query)
    try:
        from IPython.display import HTML, display
    except ImportError:
        raise MissingDependencyError("attnlab.show needs IPython (Jupyter): pip install ipython") from None
    display(HTML(notebook_html(first, opens=opens, views=Views(second))))
