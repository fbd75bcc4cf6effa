"""MkDocs hooks of attnlab's site (mkdocs.yml: ``hooks:``).

The tutorial's cells are executed by markdown-exec while the pages are built. They write the
attnlab pages they embed as iframes into the built site, so the site's directory is handed to
them in ``ATTNLAB_SITE_DIR``; the shell cells run the ``attnlab`` of the Python that builds the
site, and matplotlib draws without a display. A figure that lacks a glyph (drawn as a box)
fails the build, naming the page. A cell's print() writes what Python's would (``sep`` too).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError


class _MissingGlyphs(logging.Handler):
    """Keeps matplotlib's mathtext messages about a glyph a font does not have."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "glyph" in record.getMessage():
            self.messages.append(record.getMessage())


_MISSING = _MissingGlyphs()


def _print_as_python(buffer: Any, *values: Any, sep: str | None = " ", end: str | None = "\n", **_: Any) -> None:
    """print() into a cell's output as Python prints: markdown-exec 1.12.6's own joins the
    values with a space whatever ``sep`` says, so ``print(a, b, sep="\n")`` showed one line."""
    buffer.write((" " if sep is None else sep).join(map(str, values)) + ("\n" if end is None else end))


def on_config(config: Any) -> Any:
    """Hand the site's directory, the builder's ``bin`` and a headless matplotlib to the cells.

    Args:
        config: the MkDocs configuration.
    """
    os.environ["ATTNLAB_SITE_DIR"] = str(Path(config.site_dir).resolve())
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    os.environ.setdefault("MPLBACKEND", "Agg")
    from markdown_exec._internal.formatters import python as python_cells

    python_cells._buffer_print = _print_as_python  # looked up when each cell runs
    # a missing glyph: an error in the cell (markdown-exec's warning fails the strict build), or a
    # mathtext message (a tick label such as 10⁻²), which on_page_content turns into an error
    warnings.filterwarnings("error", message="Glyph .* missing from")
    logging.getLogger("matplotlib.mathtext").addHandler(_MISSING)
    return config


def on_page_content(html: str, page: Any, **_: Any) -> str:
    """Fail the build on a figure of this page that drew a glyph as a box.

    Args:
        html: the page's HTML.
        page: the page.
    """
    if _MISSING.messages:
        found, _MISSING.messages[:] = "; ".join(dict.fromkeys(_MISSING.messages)), []
        raise PluginError(f"{page.file.src_path}: a figure lacks a glyph: {found}")
    return html
