"""The Markdown tables of ``attnlab bench``'s reports, and their cells."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["cell", "markdown_table", "ratio"]


def cell(x: float | None, digits: int = 1, unit: str = "") -> str:
    """``x`` with ``digits`` decimals and ``unit`` after it; "—" for None (not run)."""
    return "—" if x is None else f"{x:.{digits}f}{unit}"


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator ÷ denominator, None when either was not measured."""
    return None if numerator is None or denominator is None else numerator / denominator


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]], align: str = "---") -> str:
    """A Markdown table: the header, a separator of ``align`` ("---", or "---:" for
    right-aligned) per column of the header, then one line per row of cells."""
    lines = [_line(header), "|" + f"{align}|" * len(header)]
    lines += [_line(row) for row in rows]
    return "\n".join(lines)


def _line(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"
