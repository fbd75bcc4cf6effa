"""Jupyter's display of a trace, drawn by the renderer that the pictures register, and
tokens as text fit for display (:func:`display_text`).

The pictures (:mod:`attnlab.viz`) sit above the traces in the layers and need their types,
so a trace cannot import them: importing :mod:`attnlab.viz`, which ``import attnlab`` does,
registers its page here, and a trace's ``_repr_html_`` asks for it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Any

from .._validation import AttnlabError

__all__ = ["display_text", "notebook_html", "register_notebook_html"]

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


def display_text(text: str) -> str:
    """``text`` as it may be shown on a terminal, a plot or a page: each control character
    (Unicode category Cc: an escape sequence's ESC, a newline, DEL) and each lone surrogate
    (Cs: a Linux argument's undecodable byte) replaced by its Python escape, ``\\x1b`` or
    ``\\udcff``; everything else, joiners and combining marks included, kept. Only for
    display: a trace keeps its tokens as given, and its JSON holds them exactly.

    Args:
        text: a token, a title or a label.
    """
    if text.isprintable():  # the common case: nothing to escape (Cc and Cs are never printable)
        return text
    return "".join(_escape(c) if unicodedata.category(c) in ("Cc", "Cs") else c for c in text)


def _escape(character: str) -> str:
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
