"""The statistics page: a model's attention at any length, from its statistics
(``attnlab.trace.ModelStatistics``, exact from the tiles) instead of its weights, one
self-contained HTML file (assets/length.html, page.css and length.css, and the script's modules in
STATISTICS_SCRIPTS inline; the data as :mod:`._statistics_data` packs it).

Its views: the grid of every head's distance profile, tinted by its role (sink, local,
long-range, mixed: :mod:`._head_roles`), a click opening the head; the attention each token
receives along the text, and each query's entropy and sink share, over a range of
positions that the wheel zooms and a drag pans; a clicked query's top keys as arcs over
its tokens; the text, scrolled to the clicked token.
"""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path
from typing import Any

from .._json import json_text
from .._validation import fail, is_integer
from ..trace import ModelStatistics
from ..trace._opening import telling_statistics_view
from ._html import check_path, escaped
from ._statistics_data import page_cap, past_the_page, statistics_data

__all__ = [
    "STATISTICS_SCRIPTS",
    "cap_of",
    "page_cap",
    "past_the_page",
    "render_statistics_page",
    "statistics_of",
    "statistics_opening",
    "write_statistics_page",
]

# the statistics page's script: these modules of assets/js, inlined in this order into one <script>
STATISTICS_SCRIPTS = (
    "core", "i18n", "decoding", "notes", "colours", "state", "length_state", "length_views", "length_main",
)  # fmt: skip
STYLES = ("page.css", "length.css")  # the page of weights' styles, then the statistics page's own
_SLOTS = re.compile("__ATTNLAB_STYLE__|__ATTNLAB_SCRIPT__|__ATTNLAB_DATA__")


def render_statistics_page(
    stats: ModelStatistics, *, lang: str = "en", opens: dict[str, int] | None = None, cap: int | None = None
) -> str:
    """The statistics page of ``stats`` as HTML text, its interface in ``lang`` ("en" or "zh"),
    opening on ``opens`` (layer, head, token; default :func:`statistics_opening`'s), saying
    at its top that it stands in for the page of weights, past its ``cap`` tokens, where one
    is given (see
    :func:`~._statistics_data.statistics_data`, which raises what it refuses). The data sits
    in a JSON script block with '<', '>' and '&' escaped, as the page of weights'."""
    opens = statistics_opening(stats) if opens is None else opens
    payload = escaped(json_text(statistics_data(stats, lang, opens, cap)))
    assets = files("attnlab.viz") / "assets"
    filling = {
        "__ATTNLAB_STYLE__": "".join(assets.joinpath(name).read_text(encoding="utf-8") for name in STYLES),
        "__ATTNLAB_SCRIPT__": "".join(
            assets.joinpath("js").joinpath(f"{name}.js").read_text(encoding="utf-8") for name in STATISTICS_SCRIPTS
        ),
        "__ATTNLAB_DATA__": payload,
    }
    template = assets.joinpath("length.html").read_text(encoding="utf-8")
    return _SLOTS.sub(lambda slot: filling[slot[0]], template)  # one pass: nothing filled in is searched again


def write_statistics_page(
    stats: ModelStatistics,
    path: str | Path,
    *,
    lang: str = "en",
    opens: dict[str, int] | None = None,
    cap: int | None = None,
) -> None:
    """Write the statistics page of ``stats`` to ``path`` (.html; see :func:`render_statistics_page`)."""
    check_path(path).write_text(render_statistics_page(stats, lang=lang, opens=opens, cap=cap), encoding="utf-8")


def statistics_of(subject: Any, text: Any) -> ModelStatistics | None:
    """The statistics a page of ``subject`` shows instead of its weights: ``subject`` itself
    (a ModelStatistics, with no text), or a model's (``Runner.statistics``) of a ``text``
    whose tokens pass the page of weights' cap (:func:`page_cap`); None for anything else (a
    page of weights).

    Raises:
        ArgumentError: a ModelStatistics with a text.
    """
    if isinstance(subject, ModelStatistics):
        if text is not None:
            raise fail("text", "None for statistics (they are drawn as they are)", "a text")
        return subject
    statistics, ids = getattr(subject, "statistics", None), getattr(subject, "ids", None)
    if text is None or not callable(statistics) or not callable(ids):
        return None
    result = statistics(text) if len(ids(text, "text")) > page_cap() else None
    return result if isinstance(result, ModelStatistics) else None


def statistics_opening(
    stats: ModelStatistics, layer: int | None = None, head: int | None = None, query: int | None = None
) -> dict[str, int]:
    """The view the statistics page opens on: layer, head and token (``query``); each one not
    given is the rule's (:func:`attnlab.trace._opening.telling_statistics_view`: for causal
    heads the last token of the text on the strongest previous-token head), else 0.

    Raises:
        ArgumentError: one out of range (0..layers − 1, 0..heads − 1, 0..L − 1), named.
    """
    told, opens = telling_statistics_view(stats), {}
    limits = {"layer": stats.num_layers, "head": stats.num_heads, "query": len(stats.tokens)}
    for name, given in (("layer", layer), ("head", head), ("query", query)):
        if given is not None and (not is_integer(given) or not 0 <= given < limits[name]):
            raise fail(name, f"an index in 0..{limits[name] - 1}", repr(given))
        opens["token" if name == "query" else name] = int(given) if given is not None else told.get(name, 0)
    return opens


def cap_of(stats: ModelStatistics) -> int | None:
    """The page of weights' cap (:func:`page_cap`) where the tokens of ``stats`` pass it, else None."""
    return page_cap() if len(stats.tokens) > page_cap() else None
