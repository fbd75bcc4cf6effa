"""The page's views beyond one trace's heads, each drawn by assets/js/views/ from its own
JSON block (``__ATTNLAB_VIEWS_DATA__``), beside the main views and under the same layer,
head and query controls:

- **two texts**: a second text through the same model, its weights of the layer and head
  on show beside the first text's, and their difference over the tokens that align (see
  :func:`align_tokens`);
- **generated tokens**: each new token's attention over everything before it, as the
  decode steps with the KV cache computed it (:class:`attnlab.trace.GenerationTrace`);
- **rollout and flow**: precomputed (layers, L, L) arrays (``attnlab.analysis``), a layer's
  matrix and a query's row over the tokens;
- **ablation**: a layers × heads effect (``attnlab.analysis.ablate``'s ``to_dict()``), a
  heatmap whose cells open their head;
- **head types**: each head's dominant kind (``attnlab.analysis.head_types``'s
  ``to_dict()``), the model view's heads outlined and labelled by it, with a legend.

Every view's numbers are carried exact (float64, base64) or as float32 weights, and the
views' data together is at most MAX_VIEWS_BYTES, checked before the page is written.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from .._validation import Array, fail, is_integer, is_real
from ..trace import GenerationTrace, ModelTrace
from ..trace._display import display_text
from ..trace._trace import Trace

__all__ = [
    "MAX_VIEWS_BYTES", "Views", "align_tokens", "check_ablation", "check_flows_size", "check_head_types",
    "check_views_size", "split_pair", "views_data", "views_size",
]  # fmt: skip

MAX_VIEWS_BYTES = 16 * 10**6  # the views' own data, in base64: what Chromium decodes in well under a second
# the ablations the page has words for: how each head's output was replaced, and the effect it draws
# (an ablation's metric name, and the page's words for it)
MODES = ("zero", "mean", "patch")
METRICS = {"logprob": "Δ log p(target)", "kl": "KL"}
ALIGNMENT_RULE = (
    "tokens align by a longest common subsequence of the two texts' tokens; between two aligned tokens, "
    "gaps of equal length pair position by position (a substituted token, shown as A|B); other tokens are left out"
)


@dataclass(frozen=True)
class Views:
    """What a page shows beyond its trace (None: not shown): ``second``, a second text's
    trace through the same model; ``generation``, a generation's recorded decode steps;
    ``rollout`` and ``flow``, (layers, L, L) arrays over the trace's tokens; ``ablation``,
    an ablation's effect as a dict (see :func:`check_ablation`); ``head_types``, each head's
    dominant kind as a dict (see :func:`check_head_types`)."""

    second: ModelTrace | None = None
    generation: GenerationTrace | None = None
    rollout: Array | None = None
    flow: Array | None = None
    ablation: dict[str, Any] | None = None
    head_types: dict[str, Any] | None = None


def _b64(x: Array, dtype: str = "<f8") -> str:
    return base64.b64encode(np.ascontiguousarray(x, dtype=dtype).tobytes()).decode()


def _texts(tokens: list[str]) -> list[str]:
    return [display_text(t) for t in tokens]


def align_tokens(first: list[str], second: list[str]) -> list[tuple[int, int]]:
    """The pairs (i, j) of token i of ``first`` and token j of ``second`` that align: a
    longest common subsequence of the tokens (equal tokens, in order; the first such
    subsequence by dynamic programming), and between two consecutive aligned pairs (and
    before the first, after the last) gaps of the same length on both sides paired
    position by position, as substitutions (他 against 她). Other tokens are left out.
    Identical texts align every token with itself; texts of one length that differ only
    in substituted tokens align position by position."""
    m, n = len(first), len(second)
    longest = np.zeros((m + 1, n + 1), dtype=np.int64)  # [i, j]: the LCS of first[i:] and second[j:]
    for i in range(m - 1, -1, -1):
        for j in range(n - 1, -1, -1):
            same = first[i] == second[j]
            longest[i, j] = longest[i + 1, j + 1] + 1 if same else max(longest[i + 1, j], longest[i, j + 1])
    matched, i, j = [], 0, 0
    while i < m and j < n:
        if first[i] == second[j]:
            matched.append((i, j))
            i, j = i + 1, j + 1
        elif longest[i + 1, j] >= longest[i, j + 1]:
            i += 1
        else:
            j += 1
    pairs, before = [], (-1, -1)
    for anchor in [*matched, (m, n)]:
        gap_first, gap_second = anchor[0] - before[0] - 1, anchor[1] - before[1] - 1
        if gap_first == gap_second:
            pairs += [(before[0] + 1 + k, before[1] + 1 + k) for k in range(gap_first)]
        if anchor != (m, n):
            pairs.append(anchor)
        before = anchor
    return pairs


def _weights(trace: ModelTrace) -> list[dict[str, Any]]:
    """Each traced layer's weights at the model's scale, float32 (H, L, L)."""
    out = []
    for index, one in trace.layers.items():
        weights = one.weights if one.weights.ndim == 3 else one.weights[None]  # (H, L, S)
        out.append({"index": index, "heads": int(weights.shape[0]), "weights": _b64(weights, "<f4")})
    return out


def _pair_data(first: ModelTrace, second: ModelTrace) -> dict[str, Any]:
    """The two texts: each its tokens and weights, and the aligned pairs."""
    if sorted(first.layers) != sorted(second.layers) or first.model != second.model:
        raise fail("trace", "two traces of one model and the same layers", f"{first.model!r} and {second.model!r}")
    for trace in (first, second):
        if trace.source_tokens is not None or any(k != "self" for k in trace.kinds.values()):
            raise fail("trace", "two traces of self-attention over one sequence each", "an encoder-decoder's")
    return {
        "texts": [
            {"tokens": _texts(t.tokens), "special": list(t.special), "layers": _weights(t)} for t in (first, second)
        ],
        "aligned": [list(p) for p in align_tokens(first.tokens, second.tokens)],
        "rule": ALIGNMENT_RULE,
    }


def _generation_data(trace: Trace | ModelTrace, generation: GenerationTrace) -> dict[str, Any]:
    """The generated tokens' rows, per layer (H, N, L + N − 1) float32."""
    ids = list(trace.ids) if isinstance(trace, ModelTrace) else None
    if ids is not None and ids not in (list(generation.ids), list(generation.ids)[: generation.prompt_length]):
        raise fail("generation", "the generation whose tokens (or prompt) the trace is over", "another sequence's")
    return {
        "prompt": generation.prompt_length, "tokens": _texts(generation.tokens), "special": generation.special,
        "layers": [
            {"index": i, "name": display_text(generation.names[i]), "heads": int(w.shape[0]), "weights": _b64(w, "<f4")}
            for i, w in sorted(generation.weights.items())
        ],
    }  # fmt: skip


def views_size(
    layers: int, heads: int, length: int, *, flows: int = 0, generate: int = 0, second: int | None = None
) -> dict[str, int]:
    """The base64 characters of the views' data, by view, before they are computed, for a
    text of ``length`` tokens through a model of ``layers`` × ``heads``: ``flows`` (0, 1: the
    rollout, 2: and flow) (layers, L, L) float64 arrays over the L = length + ``generate``
    tokens; the generated tokens' rows, (heads, generate, L − 1) float32 a layer; a
    ``second`` text's pair, (heads, length, length) and (heads, second, second) float32 a layer."""
    total, parts = length + generate, {}
    if flows:
        parts["rollout and flow" if flows == 2 else "rollout"] = flows * _base64(layers * total**2 * 8)
    if generate:
        parts["generated tokens"] = layers * _base64(heads * generate * (total - 1) * 4)
    if second is not None:
        parts["two texts"] = layers * (_base64(heads * length**2 * 4) + _base64(heads * second**2 * 4))
    return parts


def check_views_size(parts: dict[str, int], name: str, tokens: int, layers: int, hint: str) -> None:
    """Refuse, before they are computed, views whose data (:func:`views_size`) is over
    MAX_VIEWS_BYTES, as :func:`views_data` would after.

    Raises:
        ArgumentError: naming ``name``, the size, its parts and the limit, and ``hint``.
    """
    size = sum(parts.values())
    if size > MAX_VIEWS_BYTES:
        shares = "" if len(parts) < 2 else " (" + ", ".join(f"{k} {v / 1e6:.3g} MB" for k, v in parts.items()) + ")"
        raise fail(
            name, f"at most {MAX_VIEWS_BYTES / 1e6:g} MB of the views' data",
            f"{size / 1e6:.3g} MB{shares} for {tokens} tokens on {layers} layers; {hint}",
        )  # fmt: skip


def check_flows_size(layers: int, length: int, arrays: int, name: str) -> None:
    """Refuse, before they are computed, ``arrays`` (layers, L, L) float64 views (rollout,
    flow) whose base64 alone is over MAX_VIEWS_BYTES, as :func:`views_data` would after.

    Raises:
        ArgumentError: naming ``name``, the size and the limit.
    """
    check_views_size(views_size(layers, 0, length, flows=arrays), name, length, layers, "use fewer tokens")


def _base64(size: int) -> int:
    """The characters of ``size`` bytes in base64."""
    return 4 * math.ceil(size / 3)


def _flows_data(trace: Trace | ModelTrace, rollout: Any, flow: Any) -> dict[str, Any]:
    """Rollout and flow, (layers, L, L) float64 each (either may be absent)."""
    tokens = trace.tokens if isinstance(trace, ModelTrace) else trace.labels
    length = len(tokens)
    arrays = {}
    for name, given in (("rollout", rollout), ("flow", flow)):
        if given is None:
            continue
        x = np.asarray(given, dtype=np.float64)
        if x.ndim != 3 or x.shape[1:] != (length, length) or not np.isfinite(x).all():
            raise fail(name, f"finite (layers, {length}, {length}) numbers over the trace's tokens", np.shape(given))
        arrays[name] = x
    counts = {x.shape[0] for x in arrays.values()}
    if len(counts) > 1:
        raise fail(
            "flow", "as many layers as the rollout", f"{arrays['flow'].shape[0]} and {arrays['rollout'].shape[0]}"
        )
    return {"layers": counts.pop(), "tokens": _texts(tokens), **{name: _b64(x) for name, x in arrays.items()}}


def check_ablation(ablation: Any, trace: Trace | ModelTrace) -> dict[str, Any]:
    """An ablation's result as the page draws it: ``effect``, layers × heads floats (None
    or NaN: a head not ablated), as many layers as the model has and as many heads;
    ``metric`` "Δ log p(target)" or "KL" (or analysis's "logprob", "kl"); ``target`` a
    string or None; ``mode`` "zero", "mean" or "patch". Other keys are ignored.

    Raises:
        ArgumentError, ArgumentTypeError: anything else.
    """
    if not isinstance(ablation, dict):
        raise fail("ablation", "a dict with effect, metric, target and mode", type(ablation).__name__, TypeError)
    layers = trace.num_layers if isinstance(trace, ModelTrace) else 1
    heads = trace.num_heads
    effect = ablation.get("effect")
    rows = effect if isinstance(effect, list) and all(isinstance(r, list) for r in effect) else None
    if rows is None or len(rows) != layers or any(len(r) != heads for r in rows):
        raise fail("ablation", f"effect: {layers} layers × {heads} heads of floats", _shape_of(effect))
    cells = [[_cell(x) for x in row] for row in rows]
    metric = METRICS.get(str(ablation.get("metric")), ablation.get("metric"))
    if metric not in METRICS.values():
        raise fail("ablation", "metric 'Δ log p(target)' or 'KL'", repr(ablation.get("metric")))
    if ablation.get("mode") not in MODES:
        raise fail("ablation", f"mode one of {', '.join(MODES)}", repr(ablation.get("mode")))
    target = ablation.get("target")
    if target is not None and not isinstance(target, str):
        raise fail("ablation", "target a string or None", type(target).__name__, TypeError)
    return {
        "effect": cells, "metric": metric, "target": None if target is None else display_text(target),
        "mode": ablation["mode"],
    }  # fmt: skip


def check_head_types(types: Any, trace: Trace | ModelTrace) -> dict[str, Any]:
    """Head types as the page draws them (``attnlab.analysis.head_types(...).to_dict()``):
    ``kinds``, names; ``dominant``, layers × heads of a kind or None; ``scores``, each
    kind's layers × heads floats; ``threshold`` and ``repeat`` (None or a count). The page
    gets each head's dominant kind and its score. Other keys are ignored.

    Raises:
        ArgumentError, ArgumentTypeError: anything else, or another shape than the model's.
    """
    if not isinstance(types, dict):
        raise fail("head_types", "a dict (HeadTypes.to_dict())", type(types).__name__, TypeError)
    layers = trace.num_layers if isinstance(trace, ModelTrace) else 1
    kinds, dominant, scores = types.get("kinds"), types.get("dominant"), types.get("scores")
    if not isinstance(kinds, list) or not all(isinstance(k, str) and k for k in kinds):
        raise fail("head_types", "kinds, a list of names", repr(kinds))
    if len(set(kinds)) != len(kinds):
        raise fail("head_types", "kinds, each named once", repr(kinds))
    rows: list[Any] = dominant if isinstance(dominant, list) and len(dominant) == layers else []
    if not rows or any(not isinstance(row, list) or len(row) != trace.num_heads for row in rows):
        raise fail("head_types", f"dominant: {layers} layers × {trace.num_heads} heads", _shape_of(dominant))
    if not isinstance(scores, dict) or any(k not in kinds for row in rows for k in row if k is not None):
        raise fail("head_types", "scores of every kind named in dominant", repr(type(scores).__name__))
    chosen = [
        [None if k is None else _score(scores[k][layer][head]) for head, k in enumerate(row)]
        for layer, row in enumerate(rows)
    ]
    threshold, repeat = types.get("threshold"), types.get("repeat")
    return {
        "kinds": kinds, "dominant": rows, "scores": chosen, "threshold": _score(threshold),
        "repeat": int(repeat) if is_integer(repeat) else None,
    }  # fmt: skip


def _score(x: Any) -> float:
    """A share of attention in [0, 1] (a float sum's rounding past either end clipped)."""
    if not is_real(x) or not -1e-6 <= x <= 1 + 1e-6:
        raise fail("head_types", "scores and threshold in [0, 1]", repr(x))
    return min(1.0, max(0.0, float(x)))


def _shape_of(effect: Any) -> str:
    if isinstance(effect, list):
        return f"a list of {len(effect)} rows"
    return type(effect).__name__


def _cell(x: Any) -> float | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    if not is_real(x) or not math.isfinite(x):
        raise fail("ablation", "effect: finite floats (None: a head not ablated)", repr(x))
    return float(x)


def views_data(trace: Trace | ModelTrace, views: Views | None) -> dict[str, Any] | None:
    """The views' JSON for the page of ``trace``, or None when it shows none: each view's
    data (None where absent) and the model layer numbers of the page's layers (in order).

    Raises:
        ArgumentError: a view that does not fit the trace (another model's second text, a
            generation of other tokens, arrays of another length, an ablation of another
            model's shape) or views over MAX_VIEWS_BYTES.
    """
    if views is None or all(getattr(views, f.name) is None for f in fields(views)):
        return None
    data = {
        "page_layers": list(trace.layers) if isinstance(trace, ModelTrace) else [0],
        "pair": None if views.second is None else _pair_data(_as_model(trace), views.second),
        "generation": None if views.generation is None else _generation_data(trace, views.generation),
        "flows": None
        if views.rollout is None and views.flow is None
        else _flows_data(trace, views.rollout, views.flow),
        "ablation": None if views.ablation is None else check_ablation(views.ablation, trace),
        "head_types": None if views.head_types is None else check_head_types(views.head_types, trace),
    }
    size = sum(len(str(value)) for value in data.values())
    if size > MAX_VIEWS_BYTES:
        raise fail(
            "views", f"at most {MAX_VIEWS_BYTES / 1e6:g} MB of the views' data",
            f"{size / 1e6:.1f} MB; use fewer tokens, layers or generated tokens",
        )  # fmt: skip
    return data


def _as_model(trace: Trace | ModelTrace) -> ModelTrace:
    if not isinstance(trace, ModelTrace):
        raise fail("trace", "a pair of model traces (two texts through one model)", "a single layer's trace", TypeError)
    return trace


def split_pair(trace: Any) -> tuple[Any, ModelTrace | None]:
    """A page's trace, and the second text's when ``trace`` is a pair (a tuple or list of
    two :class:`ModelTrace`); anything else is returned as it is, for the caller to check.

    Raises:
        ArgumentTypeError: a tuple or list that is not two model traces.
    """
    if not isinstance(trace, (tuple, list)):
        return trace, None
    if len(trace) != 2 or not all(isinstance(t, ModelTrace) for t in trace):
        kinds = ", ".join(type(t).__name__ for t in trace)
        raise fail("trace", "a trace, or a pair of two ModelTraces (two texts)", f"({kinds})", TypeError)
    return trace[0], trace[1]
