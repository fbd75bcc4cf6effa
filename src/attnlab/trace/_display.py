"""Jupyter's display of a trace, drawn by the renderer that the pictures register.

The pictures (:mod:`attnlab.viz`) sit above the traces in the layers and need their types,
so a trace cannot import them: importing :mod:`attnlab.viz`, which ``import attnlab`` does,
registers its page here, and a trace's ``_repr_html_`` asks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._validation import AttnlabError

__all__ = ["notebook_html", "register_notebook_html"]

_renderer: list[Callable[[Any], str]] = []  # at most one: the page's notebook_html


def register_notebook_html(render: Callable[[Any], str]) -> None:
    """Make ``render(trace)`` the HTML that Jupyter shows for a trace (idempotent)."""
    _renderer[:] = [render]


def notebook_html(trace: Any) -> str | None:
    """The registered renderer's HTML for ``trace``, or None (Jupyter then shows the text
    repr) when none is registered or the trace is too large for a page."""
    if not _renderer:
        return None
    try:
        return _renderer[0](trace)
    except AttnlabError:
        return None
