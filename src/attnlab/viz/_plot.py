"""Heatmaps of a trace with matplotlib (the ``viz`` extra): PNG, SVG, PDF, or an Axes.

One panel per head in a grid, token labels on both axes (every n-th past 60 tokens;
one- and two-character tokens upright; cross-attention's L × S matrix with the queries'
tokens on the rows and the keys' on the columns), a colour bar, and the values written in the
cells when the matrix is small. A masked cell of the weights or the scaled scores (a key
that a rule rules out: causal, a window, a mask) is drawn light grey, hatched, with no
number, and a legend under the panels says so, titled by the trace's attention rules.
Chinese tokens need a CJK font: one is looked for among the system's fonts; when none
exists a single ``MissingFontWarning`` says that the tokens will be drawn as empty boxes,
and how to install a font.
"""

from __future__ import annotations

import contextlib
import logging
import math
import textwrap
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._exceptions import MissingFontWarning
from .._validation import MissingDependencyError, fail, flag
from ..trace import ModelStatistics, ModelTrace
from ..trace._display import display_text
from ..trace._opening import telling_view
from ..trace._trace import Trace
from ._plot_args import FORMATS, check_path, select_heads
from ._plot_statistics import plot_statistics

__all__ = [
    "FORMATS",
    "STAGES",
    "MissingFontWarning",
    "check_path",
    "find_cjk_font",
    "font_families",
    "needs_cjk",
    "plot",
    "select_heads",
]

STAGES = {"scores": "scores", "scaled": "scaled_scores", "weights": "weights"}
ANNOTATE_UP_TO = 16  # write the values in the cells of matrices up to this many rows and columns
LABELS_UP_TO = 60  # past this many tokens, label every n-th so that at most this many show
MASKED_FACE, MASKED_EDGE = "#e0e0e0", "#9a9a9a"  # a masked cell: light grey (no viridis colour is grey), hatched
MASKED_LABEL = "masked: the key is ruled out for this query (score −∞, weight exactly 0)"


_CJK_FONTS = (
    "Noto Sans CJK SC",
    "Noto Sans CJK JP",
    "Noto Sans SC",
    "Source Han Sans SC",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "Droid Sans Fallback",
    "AR PL UMing CN",
    "SimHei",
    "Microsoft YaHei",
    "PingFang SC",
)
_CJK_FILE_HINTS = ("cjk", "wqy", "han", "droid", "uming", "ukai", "zenhei", "simhei", "yahei", "pingfang", "sc")


# CJK punctuation, kana and ideographs; Hangul (jamo, compatibility jamo, syllables); full-width forms
_CJK_RANGES = ((0x1100, 0x11FF), (0x3000, 0x9FFF), (0xAC00, 0xD7AF), (0xFF00, 0xFFEF))


def needs_cjk(texts: list[str]) -> bool:
    """Whether any text has a character that Latin fonts lack: Chinese, Japanese or Korean."""
    return any(low <= ord(c) <= high for text in texts for c in text for low, high in _CJK_RANGES)


def find_cjk_font() -> str | None:
    """The family name of an installed font with Chinese glyphs, or None. Fonts
    installed after matplotlib built its cache are found and added too, and a family
    whose only weight is another than normal (WenQuanYi Zen Hei's 500) is registered at
    normal too, so that matplotlib finds it as asked ("findfont: Failed to find font
    weight normal" no more)."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    known = {font.name for font in font_manager.fontManager.ttflist}
    for name in _CJK_FONTS:
        if name in known:
            return _at_normal_weight(name)
    for path in font_manager.findSystemFonts():
        if not any(hint in Path(path).name.lower() for hint in _CJK_FILE_HINTS):
            continue
        try:
            if FT2Font(path).get_char_index(ord("中")):
                font_manager.fontManager.addfont(path)
                return _at_normal_weight(str(font_manager.FontProperties(fname=path).get_name()))
        except (OSError, RuntimeError):
            continue
    return None


def _at_normal_weight(family: str) -> str:
    """``family``, with an entry at weight normal (400) in matplotlib's font list where it has none."""
    import dataclasses

    from matplotlib import font_manager

    entries = [f for f in font_manager.fontManager.ttflist if f.name == family and f.style == "normal"]
    if entries and not any(f.weight in (400, "normal", "regular") for f in entries):
        font_manager.fontManager.ttflist.append(dataclasses.replace(entries[0], weight=400))
    return family


def _tick_labels(labels: list[str], most: int = LABELS_UP_TO, keep: Sequence[int] = ()) -> tuple[list[int], list[str]]:
    """Positions and texts of the labels to draw: all up to ``most``, else every n-th and the
    positions ``keep`` (the regular ones nearer than n to a kept one left out, so that none
    overlap); a token past 16 characters is cut to its first 15 and "…". Control characters
    and lone surrogates are escaped (:func:`~attnlab.trace._display.display_text`)."""
    every = math.ceil(len(labels) / most)
    kept = {k for k in keep if 0 <= k < len(labels)}
    regular = [p for p in range(0, len(labels), every) if all(abs(p - k) >= every for k in kept) or every == 1]
    positions = sorted(set(regular) | kept)
    shown = [display_text(labels[i]) for i in positions]
    return positions, [text if len(text) <= 16 else text[:15] + "…" for text in shown]


def font_families(texts: Sequence[str] = ()) -> list[str]:
    """The font families to draw ``texts`` with, as a fallback list for matplotlib's
    ``font.family``: DejaVu Sans (shipped with matplotlib) for Latin letters, digits and
    signs such as − (U+2212), then, when a text has Chinese, Japanese or Korean characters,
    an installed CJK font for those (:func:`find_cjk_font`; none when none is installed)."""
    family = find_cjk_font() if needs_cjk(list(texts)) else None
    return ["DejaVu Sans"] if family is None else ["DejaVu Sans", family]


def _font(labels: list[str]) -> dict[str, Any]:
    """Font properties that draw ``labels`` (:func:`font_families`); warns once when
    Chinese has no font."""
    families = font_families(labels)
    if needs_cjk(labels) and len(families) == 1:
        warnings.warn(
            "no font with Chinese glyphs is installed, so the Chinese tokens will be drawn as empty boxes; "
            "install one (Debian/Ubuntu: apt-get install fonts-noto-cjk) and run again",
            MissingFontWarning,
            stacklevel=3,
        )
    return {"family": families}


@contextlib.contextmanager
def quiet_fonts(font: dict[str, Any], labels: list[str]) -> Iterator[None]:
    """Draw ``labels`` in ``font`` without matplotlib's font chatter: its font manager's
    log of weight substitutions (CJK fonts are 500), and its missing-glyph warnings where
    they repeat :func:`_font`'s (Chinese tokens with no font for them; any other is a real
    fault, and shown)."""
    logger = logging.getLogger("matplotlib.font_manager")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            if needs_cjk(labels) and len(font["family"]) == 1:
                warnings.filterwarnings("ignore", message="Glyph .* missing from")  # said once, by _font
            yield
    finally:
        logger.setLevel(level)


@dataclass(frozen=True)
class _Panel:
    """One matrix of the picture: head ``head`` of ``trace``, titled by ``where``; a small
    panel of a grid labels only the axes on the grid's edge and writes no values."""

    trace: Trace
    head: int
    where: str = ""
    small: bool = False
    left: bool = True
    bottom: bool = True
    query: int | None = None  # the row that matters: labelled with its strongest keys, in bold, whatever the thinning


def _focus(panel: _Panel) -> tuple[list[int], list[int]]:
    """The rows and columns a panel labels whatever the thinning: its query, and the three
    keys that query weighs most in this head (none without a query)."""
    if panel.query is None:
        return [], []
    row = np.asarray(panel.trace.head(panel.head).weights[panel.query], dtype=np.float64)  # (S,)
    strongest = np.argsort(-np.where(np.isfinite(row), row, -np.inf), kind="stable")[:3]
    return [panel.query], sorted(int(j) for j in strongest)


def _masked_cells(panel: _Panel, stage: str) -> Any:
    """The masked cells of the panel's matrix (L, S), none for the raw scores (Q·Kᵀ is
    computed before any mask)."""
    one = panel.trace.head(panel.head)
    return np.zeros(one.scores.shape, dtype=bool) if stage == "scores" else one.masked


def _grey_out(ax: Any, masked: Any, hatch: bool) -> None:
    """Cover the masked cells of ``ax``'s image: a grey rectangle per run of masked keys in a
    row (a causal or windowed mask is a few runs a row, not a patch a cell)."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    runs = []
    for i, row in enumerate(masked):
        edges = np.flatnonzero(np.diff(np.concatenate([[0], row.astype(np.int8), [0]])))  # starts and stops
        runs += [Rectangle((start - 0.5, i - 0.5), stop - start, 1) for start, stop in edges.reshape(-1, 2)]
    hatching = "///" if hatch else None
    ax.add_collection(
        PatchCollection(runs, facecolor=MASKED_FACE, edgecolor=MASKED_EDGE, linewidth=0, hatch=hatching, zorder=2)
    )


def _masked_legend(target: Any, rules: str, width: float, masked: bool, hatch: bool) -> None:
    """Under the panels of a figure (or in an Axes' corner): the masked cells' swatch
    (``hatch``ed as they are), titled by the trace's attention rules wrapped to ``width`` inches."""
    from matplotlib.patches import Patch

    swatch = Patch(facecolor=MASKED_FACE, edgecolor=MASKED_EDGE, hatch="///" if hatch else None, label=MASKED_LABEL)
    handles = [swatch] if masked else []
    title = textwrap.fill(f"attention rules: {rules}", max(30, int(width * 11))) if rules else None
    if not handles and title is None:
        return
    if hasattr(target, "legend") and not hasattr(target, "add_subfigure"):  # an Axes
        target.legend(handles=handles, title=title, loc="upper right", fontsize=7, title_fontsize=7, framealpha=0.9)
        return
    target.legend(handles=handles, title=title, loc="outside lower center", fontsize=8, title_fontsize=8, frameon=False)


def _draw(ax: Any, panel: _Panel, stage: str, low: float, high: float, font: dict[str, Any]) -> Any:
    """One head's matrix into ``ax``, with its labels and a title that ends with the panel's
    ``where`` (default: the head, when there are several); masked cells greyed out;
    returns the image."""
    trace, h = panel.trace, panel.head
    matrix = getattr(trace.head(h), STAGES[stage])
    masked = _masked_cells(panel, stage)
    longest = max(len(trace.labels), trace.num_keys)  # L queries, S keys
    shown = np.ma.array(matrix, mask=~np.isfinite(matrix) | masked)
    image = ax.imshow(shown, cmap="viridis", vmin=low, vmax=high, interpolation="nearest")
    if masked.any():
        _grey_out(ax, masked, hatch=longest <= LABELS_UP_TO)
    most = 12 if panel.small else LABELS_UP_TO
    focus_rows, focus_keys = _focus(panel)
    positions, texts = _tick_labels(trace.labels, most, focus_rows)  # the rows: the queries' tokens
    key_positions, key_texts = _tick_labels(trace.key_labels, most, focus_keys)  # the columns: the keys' tokens
    # one or two characters (Chinese ones above all) stand upright while there is room for them
    upright = all(len(t) <= 2 for t in key_texts) and len(key_positions) <= 30
    size = max(6, min(10, 500 / max(len(positions), len(key_positions), 1)))
    # parse_math=False: a token is drawn as typed, "$x^2$" as those five characters, not as mathtext
    ax.set_xticks(
        key_positions, key_texts if panel.bottom else [], rotation=0 if upright else 90, fontdict=font,
        fontsize=size, parse_math=False,
    )  # fmt: skip
    ax.set_yticks(positions, texts if panel.left else [], fontdict=font, fontsize=size, parse_math=False)
    for tick_labels, ticks, focused in (
        (ax.get_yticklabels(), positions, focus_rows),
        (ax.get_xticklabels(), key_positions, focus_keys),
    ):
        for tick_label, tick in zip(tick_labels, ticks, strict=False):
            if tick in focused:
                tick_label.set_fontweight("bold")
    if panel.bottom:
        ax.set_xlabel("key")
    if panel.left:
        ax.set_ylabel("query")
    title = {"weights": "attention weights", "scaled": "scaled scores", "scores": "raw scores Q·Kᵀ"}[stage]
    where = panel.where or (f"head {h}" if trace.num_heads > 1 else "")
    ax.set_title(
        where if panel.small else f"{title} · {where}" if where else title, fontsize=9 if panel.small else None
    )
    if longest <= ANNOTATE_UP_TO and not panel.small:
        for (i, j), value in np.ndenumerate(matrix):
            if masked[i, j]:
                continue  # the grey cell says it: no number, least of all −∞ as if it were a score
            text = "−∞" if np.isneginf(value) else f"{value:.2f}"
            light = np.isfinite(value) and value < low + 0.6 * (high - low)
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color="white" if light else "black")
    return image


def _rules(trace: Trace | ModelTrace) -> str:
    """The attention rules a trace was built with, in words, or "" (none recorded, or none)."""
    first = next(iter(trace.layers.values())) if isinstance(trace, ModelTrace) else trace
    return "" if first.variants is None else first.variants.describe("en")


def _model_line(trace: Trace | ModelTrace) -> str:
    """A model's picture says what it is: its name (a hub id, or a checkpoint's folder or file
    name, not its whole path: the trace holds it so), architecture, layers and heads (and the key/value heads they
    share); "" for a single layer's trace."""
    if not isinstance(trace, ModelTrace):
        return ""
    architecture = f" ({trace.architecture})" if trace.architecture else ""
    kv = trace.num_key_value_heads
    shared = f" sharing {kv} key/value head{'s' * (kv > 1)}" if 0 < kv < trace.num_heads else ""
    layers = f"{trace.num_layers} layer{'s' * (trace.num_layers > 1)}"
    return f"{display_text(trace.model)}{architecture} · {layers}, {trace.num_heads} heads{shared}"


def _random_note(trace: Trace | ModelTrace) -> str:
    """What a picture of random (untrained) weights says of them, or ""."""
    traces = list(trace.layers.values()) if isinstance(trace, ModelTrace) else [trace]
    seeds = [t.random_seed for t in traces if t.random_seed is not None]
    return f"random weights (seed {seeds[0]}), not trained: the pattern is chance" if seeds else ""


def _value_range(panels: list[_Panel], stage: str, relative: bool) -> tuple[float, float]:
    """The colour scale: weights from 0 to 1, as the page draws them (to the largest with
    ``relative``); scores over their range."""
    matrices = [getattr(p.trace.head(p.head), STAGES[stage]) for p in panels]
    finite = np.concatenate([m[np.isfinite(m)] for m in matrices])
    if stage == "weights":  # a matrix with no finite value (overflow) still gets a colour scale
        return 0.0, max(float(finite.max(initial=0.0)), 1e-12) if relative else 1.0
    return float(finite.min(initial=0.0)), float(finite.max(initial=0.0))


def plot(
    trace: Trace | ModelTrace,
    target: str | Path | Any,
    *,
    stage: str = "weights",
    heads: str | Sequence[int] = "all",
    relative: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Any:
    """Draw ``stage`` of the chosen heads of ``trace``.

    A model's trace (``attnlab.models``) draws a grid: a row of the chosen heads for each
    traced layer; when the panels are small, only the grid's left column and bottom row carry
    the tokens, so choose fewer layers or heads to zoom in.

    Args:
        trace: an :class:`attnlab.Trace` or a model's :class:`attnlab.models.ModelTrace`;
            or a model's statistics at any length (:class:`attnlab.models.ModelStatistics`),
            drawn by ``stage`` "profiles" (the default for it: every head's distance profile,
            coloured by its role), "received" or "positions" into a file
            (``attnlab.viz._plot_statistics``).
        target: a file (.png, .svg or .pdf), written with one panel per head and a colour
            bar, or a matplotlib ``Axes``, into which one head is drawn (``heads`` must name
            one).
        stage: "weights" (default), "scaled" (the scaled scores) or "scores".
        heads: "all", indices such as "0,2,5", or a list of ints.
        relative: colour weights from 0 to the largest, not from 0 to 1 (near-uniform
            attention is dark either way).
        progress: told what is being drawn when the picture is large.

    Returns:
        The Figure (a file) or the Axes.

    Raises:
        ArgumentError: a bad path, stage or head index.
        MissingDependencyError: matplotlib is not installed (``pip install 'attnlab[viz]'``).
    Warns:
        MissingFontWarning: Chinese tokens and no font to draw them.
    """
    if isinstance(trace, ModelStatistics):  # a model's statistics at length: their views
        return plot_statistics(trace, target, view="profiles" if stage == "weights" else stage, heads=heads)
    try:
        from matplotlib.axes import Axes
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError("plotting needs matplotlib: pip install 'attnlab[viz]'") from None
    if not isinstance(trace, (Trace, ModelTrace)):
        raise fail("trace", "an attnlab.Trace or attnlab.models.ModelTrace", type(trace).__name__, TypeError)
    if not isinstance(target, (str, Path, Axes)):
        raise fail("target", "a file path (.png, .svg, .pdf) or a matplotlib Axes", type(target).__name__, TypeError)
    if stage not in STAGES:
        raise fail("stage", f"one of {', '.join(STAGES)}", repr(stage))
    chosen = select_heads(heads, trace.num_heads)
    if isinstance(trace, ModelTrace):
        labels = trace.tokens + (trace.source_tokens or [])
        L = max(max(len(t.inputs), t.num_keys) for t in trace.layers.values())
    else:
        labels = trace.labels + (trace.key_tokens or [])
        L = max(len(trace.inputs), trace.num_keys)
    size = min(max(3.5, 0.3 * min(L, LABELS_UP_TO) + 2.0), 10.0)  # inches a panel
    if isinstance(trace, ModelTrace):
        cells = [(i, t, h) for i, t in trace.layers.items() for h in chosen]  # a row per layer
        rows, columns = len(trace.layers), len(chosen)
        if rows == 1 and columns > 4:  # one layer's heads: wrapped, at most 4 a row, rows as even as they can be
            rows = math.ceil(columns / 4)
            columns = math.ceil(len(cells) / rows)
        size = min(size, max(2.2, 30 / max(rows, columns)))  # a 12 × 12 grid stays a few thousand pixels
        small = size < 4.5
        own_keys = not small or trace.source_tokens is not None  # two sequences: each panel labels its own keys
        query = (trace.opens or telling_view(trace)).get("query", len(trace.tokens) - 1)  # the page's query
        panels = [
            _Panel(
                t,
                h,
                f"{trace.name(i)} · head {h}",
                small,
                left=n % columns == 0,
                bottom=n + columns >= len(cells) or own_keys,
                query=query if query < len(t.labels) else None,
            )
            for n, (i, t, h) in enumerate(cells)
        ]
    else:
        panels = [_Panel(trace, h) for h in chosen]
        rows = math.ceil(len(panels) / 4)  # at most 4 a row, rows as even as they can be
        columns = math.ceil(len(panels) / rows)
    low, high = _value_range(panels, stage, flag("relative", relative))
    font = _font(labels)
    with quiet_fonts(font, labels):
        note = _random_note(trace)
        if isinstance(target, Axes):
            if len(panels) != 1:
                raise fail("heads", "one head of one layer to draw into an Axes", repr(heads))
            _draw(target, panels[0], stage, low, high, font)
            if note:
                inches = target.get_figure(root=True).get_figwidth()  # type: ignore[union-attr]  # an Axes' figure
                wide = max(30, int(inches * 8))
                target.set_title(f"{target.get_title()}\n{textwrap.fill(note, wide)}")
            masked = bool(_masked_cells(panels[0], stage).any())
            _masked_legend(target, _rules(trace), 3.0, masked, hatch=L <= LABELS_UP_TO)
            return target
        path = check_path(target)
        if progress is not None and L * L * len(panels) >= 2**14:  # from about a second's work
            progress(f"drawing {len(panels)} head{'s' * (len(panels) > 1)} of {L} tokens into {path}")
        figure = Figure(figsize=(size * columns + 1.5, size * rows + 0.5), layout="constrained")
        axes = figure.subplots(rows, columns, squeeze=False).ravel()
        images = [_draw(ax, panel, stage, low, high, font) for ax, panel in zip(axes, panels, strict=False)]
        for ax in axes[len(panels) :]:
            ax.set_visible(False)
        figure.colorbar(images[0], ax=list(axes[: len(panels)]), shrink=0.8)
        wide = max(30, int(figure.get_figwidth() * 8))  # characters a line of the title holds, its edges kept
        heading = "\n".join(textwrap.fill(line, wide) for line in (_model_line(trace), note) if line)
        if heading:
            figure.suptitle(heading, color="#8a4b00" if note else None)
        masked = any(_masked_cells(panel, stage).any() for panel in panels)
        _masked_legend(figure, _rules(trace), figure.get_figwidth(), masked, hatch=L <= LABELS_UP_TO)
        figure.savefig(path)
        return figure
