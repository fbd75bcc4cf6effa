"""Heatmaps of a trace with matplotlib (the ``viz`` extra): PNG, SVG or PDF.

One panel per head in a grid, token labels on both axes, a colour bar, and the values
written in the cells when the matrix is small. Chinese tokens need a CJK font: one is
looked for among the system's fonts, and when none exists a single warning says so
instead of drawing boxes silently.
"""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ._trace import Trace
from ._validation import MissingDependencyError, fail, output_path

__all__ = ["FORMATS", "STAGES", "check_path", "find_cjk_font", "needs_cjk", "plot", "select_heads"]

FORMATS = (".png", ".svg", ".pdf")
STAGES = {"scores": "scores", "scaled": "scaled_scores", "weights": "weights"}
ANNOTATE_UP_TO = 16  # write the values in the cells of matrices up to this many rows and columns
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


def needs_cjk(texts: list[str]) -> bool:
    """Whether any text has a CJK ideograph or CJK punctuation."""
    return any(0x3000 <= ord(c) <= 0x9FFF or 0xFF00 <= ord(c) <= 0xFFEF for text in texts for c in text)


def find_cjk_font() -> str | None:
    """The family name of an installed font with Chinese glyphs, or None. Fonts
    installed after matplotlib built its cache are found and added too."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    known = {font.name for font in font_manager.fontManager.ttflist}
    for name in _CJK_FONTS:
        if name in known:
            return name
    for path in font_manager.findSystemFonts():
        if not any(hint in Path(path).name.lower() for hint in _CJK_FILE_HINTS):
            continue
        try:
            if FT2Font(path).get_char_index(ord("中")):
                font_manager.fontManager.addfont(path)
                return str(font_manager.FontProperties(fname=path).get_name())
        except (OSError, RuntimeError):
            continue
    return None


def select_heads(spec: str, num_heads: int) -> list[int]:
    """``all`` or comma-separated head indices such as ``0,2,5``."""
    if spec == "all":
        return list(range(num_heads))
    try:
        heads = [int(part) for part in spec.split(",")]
    except ValueError:
        raise fail("heads", "'all' or indices such as 0,2,5", repr(spec)) from None
    bad = [h for h in heads if not 0 <= h < num_heads]
    if bad or not heads:
        raise fail("heads", f"indices in 0..{num_heads - 1}", repr(spec))
    return heads


def check_path(path: str | Path) -> Path:
    """``path`` as a Path, once it names a .png, .svg or .pdf file in a folder that exists."""
    return output_path(path, FORMATS)


def plot(trace: Trace, path: str | Path, *, stage: str = "weights", heads: str = "all") -> list[str]:
    """Draw ``stage`` of the chosen heads of ``trace`` into ``path`` (.png, .svg or
    .pdf); return the warnings to show the user (at most one)."""
    path = check_path(path)
    if stage not in STAGES:
        raise fail("stage", f"one of {', '.join(STAGES)}", repr(stage))
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError("plotting needs matplotlib: pip install 'attnlab[viz]'") from None

    chosen = select_heads(heads, trace.num_heads)
    labels = trace.labels
    notes = []
    font: dict[str, Any] = {}
    if needs_cjk(labels):
        family = find_cjk_font()
        if family is None:
            notes.append(
                "no font with Chinese glyphs found, so Chinese tokens will show as boxes; install one "
                "(Debian/Ubuntu: apt-get install fonts-noto-cjk) and run again"
            )
        else:
            font = {"family": [family, "DejaVu Sans"]}

    L = len(labels)
    columns = min(len(chosen), 4)
    rows = math.ceil(len(chosen) / columns)
    size = min(max(3.0, 0.35 * L + 1.5), 12.0)
    figure = Figure(figsize=(size * columns + 1.2, size * rows), layout="constrained")
    axes = np.atleast_1d(figure.subplots(rows, columns, squeeze=False).ravel())
    matrices = [getattr(trace.head(h), STAGES[stage]) for h in chosen]
    finite = np.concatenate([m[np.isfinite(m)] for m in matrices])
    if stage == "weights":  # a matrix with no finite value (overflow) still gets a colour scale
        low, high = 0.0, max(float(finite.max(initial=0.0)), 1e-12)
    else:
        low, high = float(finite.min(initial=0.0)), float(finite.max(initial=0.0))
    quiet_fonts = logging.getLogger("matplotlib.font_manager")  # it logs weight substitutions (CJK fonts are 500)
    level = quiet_fonts.level
    quiet_fonts.setLevel(logging.ERROR)
    with warnings.catch_warnings():
        if notes:  # said once above; not once per glyph
            warnings.filterwarnings("ignore", message="Glyph .* missing from")
        images = [
            ax.imshow(np.ma.masked_invalid(matrix), cmap="viridis", vmin=low, vmax=high)
            for ax, matrix in zip(axes, matrices, strict=True)
        ]
        for ax, h, matrix in zip(axes, chosen, matrices, strict=True):
            ax.set_xticks(range(L), labels, rotation=90, fontdict=font)
            ax.set_yticks(range(L), labels, fontdict=font)
            ax.tick_params(labelsize=max(4, min(10, 400 / L)))
            ax.set_xlabel("key")
            ax.set_ylabel("query")
            title = {"weights": "attention weights", "scaled": "scaled scores", "scores": "raw scores Q·Kᵀ"}[stage]
            ax.set_title(f"{title} · head {h}" if trace.num_heads > 1 else title)
            if L <= ANNOTATE_UP_TO:
                for (i, j), value in np.ndenumerate(matrix):
                    text = "−∞" if np.isneginf(value) else f"{value:.2f}"
                    light = np.isfinite(value) and value < low + 0.6 * (high - low)
                    ax.text(j, i, text, ha="center", va="center", fontsize=7, color="white" if light else "black")
        for ax in axes[len(chosen) :]:
            ax.set_visible(False)
        figure.colorbar(images[0], ax=list(axes[: len(chosen)]), shrink=0.8)
        try:
            figure.savefig(path)
        finally:
            quiet_fonts.setLevel(level)
    return notes
