"""The statistics page: a model's attention at any length, from its statistics
(``attnlab.trace.ModelStatistics``, exact from the tiles) instead of its weights, one
self-contained HTML file (assets/length.html, length.css, and the script's modules in
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

from .._json import json_text
from ..trace import ModelStatistics
from ._page import _escaped, check_path
from ._statistics_data import statistics_data

__all__ = ["STATISTICS_SCRIPTS", "past_the_page", "render_statistics_page", "write_statistics_page"]

# the statistics page's script: these modules of assets/js, inlined in this order into one <script>
STATISTICS_SCRIPTS = ("core", "i18n", "colours", "state", "length_state", "length_views", "length_main")
_SLOTS = re.compile("__ATTNLAB_STYLE__|__ATTNLAB_SCRIPT__|__ATTNLAB_DATA__")


def past_the_page(length: int, cap: int) -> str:
    """The line that says why a page shows statistics: ``length`` tokens, past the page of
    weights' ``cap`` tokens."""
    return (
        f"{length:,} tokens: past the {cap:,}-token page of weights, this page shows statistics computed "
        "exactly from the tiles"
    )


def render_statistics_page(
    stats: ModelStatistics, *, lang: str = "en", opens: dict[str, int] | None = None, headline: str = ""
) -> str:
    """The statistics page of ``stats`` as HTML text, its interface in ``lang`` ("en" or "zh"),
    opening on ``opens`` (layer, head, token), with ``headline`` at its top (see
    :func:`~._statistics_data.statistics_data`, which raises what it refuses). The data sits
    in a JSON script block with '<', '>' and '&' escaped, as the page of weights'."""
    payload = _escaped(json_text(statistics_data(stats, lang, opens, headline)))
    assets = files("attnlab.viz") / "assets"
    filling = {
        "__ATTNLAB_STYLE__": assets.joinpath("length.css").read_text(encoding="utf-8"),
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
    headline: str = "",
) -> None:
    """Write the statistics page of ``stats`` to ``path`` (.html; see :func:`render_statistics_page`)."""
    check_path(path).write_text(
        render_statistics_page(stats, lang=lang, opens=opens, headline=headline), encoding="utf-8"
    )
