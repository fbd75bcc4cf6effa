"""Jupyter's display of a trace, drawn by the renderer that the pictures register, tokens
as text fit for display (:func:`display_text`), and a model by its name, never its path
(:func:`shown_name`).

The pictures (:mod:`attnlab.viz`) sit above the traces in the layers and need their types,
so a trace cannot import them: importing :mod:`attnlab.viz`, which ``import attnlab`` does,
registers its page here, and a trace's ``_repr_html_`` asks for it.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Callable
from typing import Any

from .._validation import AttnlabError

__all__ = ["display_text", "notebook_html", "register_notebook_html", "shown_name"]

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
    """``text`` as it may be shown on a terminal, a plot or a page: a newline as ↵, a tab
    as ⇥ and a carriage return as ␍ (a tokenizer's whitespace tokens, visible: SmolLM2's
    "\\n"), each other control character (Unicode category Cc: an escape sequence's ESC,
    DEL) and each lone surrogate (Cs: a Linux argument's undecodable byte) replaced by its
    Python escape, ``\\x1b`` or ``\\udcff``; everything else, joiners and combining marks
    included, kept. Only for display: a trace keeps its tokens as given, and its JSON holds
    them exactly.

    Args:
        text: a token, a title or a label.
    """
    if text.isprintable():  # the common case: nothing to escape (Cc and Cs are never printable)
        return text
    return "".join(_escape(c) if unicodedata.category(c) in ("Cc", "Cs") else c for c in text)


_WHITESPACE = {"\n": "↵", "\t": "⇥", "\r": "␍"}  # shown as a sign, not an escape


def _escape(character: str) -> str:
    if character in _WHITESPACE:
        return _WHITESPACE[character]
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


# a Hugging Face cache's snapshot: …/models--ORG--NAME/snapshots/REVISION[/FILE]
_HUB_SNAPSHOT = re.compile(r"(?:^|[\\/])models--([^\\/]+)[\\/]snapshots[\\/][^\\/]+(?:[\\/](.+))?$")


def shown_name(name: str) -> str:
    """A model as a page, a plot, a trace's JSON or a table names it: a hub id
    (``Qwen/Qwen2.5-0.5B``) or ``builtin:coref`` as it is; a checkpoint folder or a GGUF
    file by its own name (``SmolLM2-135M-Instruct.Q4_1.gguf``), never the path that leads
    to it; a folder of the Hugging Face cache by the hub id it holds. The one place that
    decides what of a path may be shown: nothing attnlab writes holds the machine's folders.

    A path is a name that exists on this machine, or one that no hub id can be: it starts
    with ``/``, ``~`` or ``.``, holds a backslash, starts with a drive (``C:\\``) or more than one ``/``
    (a saved trace's model, read on another machine, is still a path).

    Args:
        name: a hub id, ``builtin:NAME``, or a checkpoint's path (absolute or relative).
    """
    if name.startswith("builtin:") or not _is_path(name):
        return name
    full = os.path.abspath(os.path.expanduser(name))  # ".", "..", "~": the folder they name
    if hub := _HUB_SNAPSHOT.search(full):
        return "/".join(part for part in (hub.group(1).replace("--", "/", 1), hub.group(2)) if part)
    return re.split(r"[\\/]", full.rstrip("\\/"))[-1] or name


def _is_path(name: str) -> bool:
    """Whether ``name`` is a path rather than a hub id (see :func:`shown_name`)."""
    if name.startswith(("/", "~", ".", "\\")) or "\\" in name or name.count("/") > 1:
        return True
    return bool(re.match(r"[A-Za-z]:[\\/]", name)) or os.path.exists(name)
