"""``attnlab bench --engine-table``: every available engine's forward time on the grid of
shapes that engine=None's cost model was fitted to (docs/engine-choice.json)."""

from __future__ import annotations

import json
from typing import Any

from .._timer import PAUSE_SECONDS, best_times
from ._machine import machine
from ._shapes import Shape, available_engines, timed_runs
from ._table import markdown_table

__all__ = ["ENGINE_GRID", "engine_report", "engine_table"]

# Shapes for engine=None's cost model: many tiny heads to one long one, E = 8 and 64,
# causal ones, and decoding (one query against a long cache); B… is one dimension of slices.
ENGINE_GRID = [
    *(
        Shape((slices,), length, length, width)
        for width in (8, 64)
        for slices in (1, 8, 64, 512, 4096, 32768)
        for length in (8, 32, 128, 256, 512, 2048)
        if 2**12 <= slices * length * length <= 2**26
    ),
    *(
        Shape((slices,), length, length, 64, causal=True)
        for slices in (1, 8, 64)
        for length in (128, 256, 512, 1024, 2048)
        if 2**14 <= slices * length * length <= 2**26
    ),
    *(Shape((slices,), 1, length, 128) for slices in (1, 8, 32) for length in (2048, 8192, 65536)),
]


def engine_table(repeat: int = 3) -> list[dict[str, Any]]:
    """Every available engine's forward time (ms, float32, best of ``repeat`` in turns) on
    ENGINE_GRID, one row {slices, L, S, E, causal, ms} per shape: the table that
    docs/engine-choice.json keeps and tests/engine/test_engine_choice.py checks engine=None
    against.

    Raises ArgumentError or ArgumentTypeError: ``repeat`` not an integer >= 1."""
    rows = []
    for shape in ENGINE_GRID:
        runs = timed_runs(shape, available_engines(), with_torch=False)
        ms = best_times(runs, repeat, settle=True, pause=PAUSE_SECONDS, milliseconds=True)
        rows.append(
            {"slices": shape.slices, "L": shape.L, "S": shape.S, "E": shape.E, "causal": shape.causal, "ms": ms}
        )
    return rows


def engine_report(path: str, repeat: int) -> str:
    """Write :func:`engine_table` with the machine and ``repeat`` to ``path`` (JSON) and
    return it as Markdown, the fastest engine last on each row."""
    rows = engine_table(repeat)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"machine": machine(), "repeat": repeat, "rows": rows}, f, indent=1)
    engines = list(rows[0]["ms"])
    header = ["slices", "L", "S", "E", "causal", *(f"{e} ms" for e in engines), "fastest"]
    body = [
        [r["slices"], r["L"], r["S"], r["E"], "yes" if r["causal"] else "no", *(f"{r['ms'][e]:.2f}" for e in engines),
         min(r["ms"], key=r["ms"].get)] for r in rows
    ]  # fmt: skip
    return markdown_table(header, body)
