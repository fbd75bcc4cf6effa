"""Write the tutorial's notebooks from its pages: ``python docs/notebooks/generate.py``.

Each page of docs/tutorial/ (English ``NAME.md``, Chinese ``NAME.zh.md``) becomes
docs/notebooks/NAME-en.ipynb or NAME-zh.ipynb: every executed cell of the page (a fence
written ```python exec="on" or ```bash exec="on", as markdown-exec runs them when the site is
built) a code cell, a shell command as ``!command``, and the prose between them Markdown
cells. The notebooks carry no outputs: tests/docs/test_notebooks.py checks that they are
up to date with the pages and executes them with nbclient.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

DOCS = Path(__file__).resolve().parents[1]
PAGES = ("self-attention", "multi-head")
LANGUAGES = {"en": "", "zh": ".zh"}
FENCE = re.compile(r"^```(python|bash) exec=\"on\"[^\n]*\n(.*?)^```\n", re.S | re.M)


def cells(page: str) -> list[nbformat.NotebookNode]:
    """The notebook cells of one page's Markdown text, in order.

    Args:
        page: the page's Markdown, with markdown-exec fences.
    """
    found, start = [], 0
    for fence in FENCE.finditer(page):
        prose = page[start : fence.start()].strip()
        if prose:
            found.append(nbformat.v4.new_markdown_cell(prose))
        language, code = fence.group(1), fence.group(2).rstrip("\n")
        if language == "bash":
            code = "\n".join(f"!{line}" for line in code.splitlines())
        found.append(nbformat.v4.new_code_cell(code))
        start = fence.end()
    rest = page[start:].strip()
    if rest:
        found.append(nbformat.v4.new_markdown_cell(rest))
    return found


def notebook(page: str) -> str:
    """The notebook of one page, as the text of an .ipynb file (no outputs, stable ids).

    Args:
        page: the page's Markdown, with markdown-exec fences.
    """
    book = nbformat.v4.new_notebook(cells=cells(page))
    for number, cell in enumerate(book.cells):
        cell["id"] = f"cell-{number}"  # stable, so that an unchanged page gives the same file
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    book.metadata["language_info"] = {"name": "python"}
    return nbformat.writes(book) + "\n"


def expected() -> dict[Path, str]:
    """Every notebook's path and the text it should have."""
    books = {}
    for name in PAGES:
        for language, suffix in LANGUAGES.items():
            page = (DOCS / "tutorial" / f"{name}{suffix}.md").read_text(encoding="utf-8")
            books[DOCS / "notebooks" / f"{name}-{language}.ipynb"] = notebook(page)
    return books


if __name__ == "__main__":
    for path, text in expected().items():
        path.write_text(text, encoding="utf-8")
        print(path.relative_to(DOCS.parent), file=sys.stderr)
