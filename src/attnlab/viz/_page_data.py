"""What a page carries, as JSON: its sequences and their marks, each layer's scale, masks
(as runs), variants and q, k, v (exact or rounded to fit, as viz._page_size.encoding
chooses), a vision model's image, and the view it opens on. The keys are the names
the page's script (assets/js/maths.js, layerOf) reads.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable

import numpy as np

from .._validation import MissingDependencyError, fail, is_integer
from ..engine.variants import Band
from ..engine.variants.length_scale import keys_seen
from ..trace import ModelTrace
from ..trace._display import display_text
from ..trace._labels import LANGUAGES
from ..trace._opening import telling_view
from ..trace._trace import Trace
from ..trace._variants import Variants
from . import _page_size
from ._encoding import binary, mask_runs
from ._page_size import PageShape, encoding, with_heads

__all__ = ["check_lang", "image_data", "opening", "page_data"]


def opening(
    trace: Trace | ModelTrace, layer: int | None = None, head: int | None = None, query: int | None = None
) -> dict[str, int]:
    """The view the page opens on (a link's #layer=…&head=…&query=… still wins): the
    given layer (the model's layer number), head and query, else the trace's own
    (:attr:`ModelTrace.opens`: a model's answering head), else, where the attention is
    causal, the last token of the text on the strongest previous-token head, else the
    first layer, head 0, query 0 (the rule: :mod:`attnlab.trace._opening`).

    Raises:
        ArgumentError: ``layer``: not a traced layer (a single layer's trace has only
            0); ``head``: not in 0..H−1; ``query``: not in 0..L−1.
    """
    opens = dict(trace.opens or {}) if isinstance(trace, ModelTrace) else {}
    opens = opens or telling_view(trace)
    indices = list(trace.layers) if isinstance(trace, ModelTrace) else [0]
    if layer is not None:
        if not is_integer(layer) or int(layer) not in indices:
            among = ", ".join(map(str, indices))
            raise fail("layer", f"a traced layer ({among})", repr(layer))
        opens["layer"] = int(layer)
    if opens.get("layer") not in indices:  # a saved trace of other layers than its answer's
        opens = {"layer": indices[0]}
    shown = trace.layers[opens["layer"]] if isinstance(trace, ModelTrace) else trace
    length = len(shown.inputs)  # its queries: the tokens, or an encoder's the source tokens
    for name, given, limit in (("head", head, shown.num_heads), ("query", query, length)):
        if given is not None:
            if not is_integer(given) or not 0 <= given < limit:
                raise fail(name, f"an index in 0..{limit - 1}", repr(given))
            opens[name] = int(given)
        elif not 0 <= opens.get(name, 0) < limit:
            opens[name] = 0
    return {"layer": indices.index(opens["layer"]), "head": opens.get("head", 0), "query": opens.get("query", 0)}


def check_lang(lang: object) -> None:
    """Refuse a page language other than "en" and "zh" (ArgumentError)."""
    if lang not in LANGUAGES:
        raise fail("lang", f"one of {', '.join(sorted(LANGUAGES))}", repr(lang))


def page_data(trace: Trace | ModelTrace, opens: dict[str, int] | None = None, lang: str = "en") -> dict[str, object]:
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
    image (:func:`image_data`), or None; the language of its interface, ``lang`` ("en" or
    "zh": assets/js/i18n.js's words, and the layers' attention rules). Tokens are shown as
    :func:`~attnlab.trace._display.display_text` gives.

    Raises:
        ArgumentError: ``lang`` is neither "en" nor "zh".
        MissingDependencyError: the trace has an image and Pillow is not installed.
    """
    check_lang(lang)
    sequences, rows_cols = _sequences(trace)
    named: list[tuple[int | None, Trace]] = (
        list(trace.layers.items()) if isinstance(trace, ModelTrace) else [(None, trace)]
    )
    model = trace.model if isinstance(trace, ModelTrace) else ""
    architecture = trace.architecture if isinstance(trace, ModelTrace) else ""
    kv_heads = trace.num_key_value_heads if isinstance(trace, ModelTrace) else 0
    given = sum(with_heads(t.scores).size for _, t in named) <= _page_size.GIVEN_SCORES_UP_TO
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
            {"name": name, "index": i, "kind": kind, "rows": rows, "cols": cols, **_layer_data(one, given, dtype, lang)}
        )
    seeds = [t.random_seed for _, t in named if t.random_seed is not None]
    return {  # the page shows text: control characters and lone surrogates escaped (no page can encode those)
        "model": display_text(model), "architecture": display_text(architecture), "kv_heads": kv_heads,
        "sequences": sequences, "layers": layers, "opens": opens or opening(trace),
        "random_seed": seeds[0] if seeds else None,
        "notes": [display_text(n) for n in trace.notes] if isinstance(trace, ModelTrace) else [],
        "image": image_data(trace) if isinstance(trace, ModelTrace) else None, "lang": lang,
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


def _row_multipliers(variants: Variants, lengths: tuple[int, ...], heads: int) -> list[float] | None:
    """length_scale's m_hi = s_h·log n_i (heads·L, row by row), the multiplier of query i's
    dot products in head h as the engine computes it (``engine.variants.length_scale``), or None."""
    if variants.length_scale is None:
        return None
    L, S = lengths
    offset = S - L if variants.causal_alignment == "bottom_right" else 0
    band = Band.of(variants.is_causal, variants.window, offset, (L, S))
    logs = np.log(np.maximum(keys_seen(band, (L, S), None, False), 1).astype(np.float64))  # (L,)
    scales = np.broadcast_to(np.asarray(variants.length_scale, np.float64), (heads,))
    return [float(x) for x in (scales[:, None] * logs[None, :]).reshape(-1)]  # (H·L,)


def _layer_data(trace: Trace, with_scores: bool, dtype: str, lang: str = "en") -> dict[str, object]:
    """One attention layer's numbers for the page: q, k and v as ``dtype`` (the raw
    scores and a bias in its float: float24 beside fixed numbers), whether the trace's
    numbers are float32 (its scores round as float32), its masks as runs
    (:func:`~attnlab.viz._encoding.mask_runs`), one per head or one for all, and its
    variants (softcap, bias, sinks, their words in ``lang``)."""
    masked = with_heads(trace.masked)  # (H, L, L)
    masked = masked[:1] if (masked == masked[:1]).all() else masked
    q, k, v = (with_heads(x) for x in (trace.Q, trace.K, trace.V))  # (H, L, E), (H, L, E), (H, L, Ev)
    variants = trace.variants
    bias = None if trace.bias is None else with_heads(trace.bias)  # (H, L, L)
    if bias is not None and np.array_equal(bias, np.broadcast_to(bias[:1], bias.shape)):
        bias = bias[:1]  # every head adds the same (a float mask)
    sinks = None if variants is None or variants.sinks is None else list(variants.sinks)
    length_scale = None if variants is None else _row_multipliers(variants, trace.weights.shape[-2:], q.shape[0])
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
        "scores": binary(with_heads(trace.scores), floats) if with_scores else None,
        "bias": None if bias is None else binary(bias, floats),
        "bias_heads": 0 if bias is None else bias.shape[0],
        "softcap": None if variants is None else variants.softcap,
        "sinks": None if sinks is None else sinks * (q.shape[0] if len(sinks) == 1 else 1),
        "length_scale": length_scale,
        "rules": "" if variants is None else variants.describe(lang),
    }
