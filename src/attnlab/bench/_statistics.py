"""``attnlab bench``'s statistics rows, side by side in one run: each blocked engine's plain
forward against its statistics pass (``attnlab.engine.attention_statistics``: both passes,
every statistic) on B1 H8 E64 causal float32 self-attention, as a ratio; and the statistics'
peak memory beyond the inputs (NumPy's allocations, tracemalloc: the compiled pass's work
arrays are made in Python, so counted), against L·S/16 float32 scores, a sixteenth of one
head's weights.

The peak bounds every single allocation of the call (an array is counted while it is
alive), so a peak below L·S/16 scores shows that nothing of that size was allocated,
though it holds the results of all eight heads: O(H·L·(top_k + 7) + H·S + bins).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from .._timer import PAUSE_SECONDS, best_times
from ..engine import attention_statistics
from ..engine._attention import attention
from ._memory import traced_peak_mib
from ._shapes import Shape, available_engines
from ._table import cell, markdown_table, ratio

__all__ = ["STATISTICS_CASES", "format_statistics", "statistics_rows"]

STATISTICS_CASES = (
    Shape((1, 8), 2048, 2048, 64, causal=True, name="B1 H8 L=S=2048 E64 causal"),
    Shape((1, 8), 8192, 8192, 64, causal=True, name="B1 H8 L=S=8192 E64 causal"),
)


def _row(shape: Shape, repeat: int) -> dict[str, Any]:
    """ms of each blocked engine's forward and statistics (taking turns), and the peak MiB
    of NumPy's allocations during one statistics call and one forward."""
    rng = np.random.default_rng(0)
    query, key, value = (rng.standard_normal(shape.query_shape, dtype=np.float32) for _ in range(3))
    engines = [name for name in available_engines() if name != "naive"]
    runs: dict[str, Callable[[], object]] = {}
    for engine in engines:
        runs[f"{engine} forward"] = functools.partial(attention, query, key, value, is_causal=True, engine=engine)
        runs[f"{engine} statistics"] = functools.partial(
            attention_statistics, query, key, is_causal=True, engine=engine
        )
    ms = best_times(runs, repeat, settle=True, pause=PAUSE_SECONDS, milliseconds=True)
    peaks = {name: traced_peak_mib(run) for name, run in runs.items()}
    sixteenth = shape.L * shape.S / 16 * 4 / 2**20  # float32 MiB of L·S/16 scores, a sixteenth of one head's
    return {"case": shape.name, "engines": engines, "ms": ms, "peak_mib": peaks, "sixteenth_mib": sixteenth}


def statistics_rows(repeat: int, cases: tuple[Shape, ...] | None = None) -> dict[str, Any]:
    """One row per case of STATISTICS_CASES (or ``cases``): {case, engines, ms, peak_mib,
    sixteenth_mib}, ms and peak_mib keyed "<engine> forward" and "<engine> statistics".

    Raises ArgumentError or ArgumentTypeError: ``repeat`` not an integer >= 1."""
    return {"statistics": [_row(shape, repeat) for shape in (cases or STATISTICS_CASES)]}


def format_statistics(rows: dict[str, Any]) -> str:
    """Markdown: per case and engine, the forward's and the statistics' ms, their ratio,
    and the statistics' peak beyond the inputs against L·S/16 float32 scores (of one head)."""
    header = ["case", "engine", "forward ms", "statistics ms", "statistics ÷ forward", "peak MiB (statistics)",
              "peak MiB (forward)", "L·S/16 scores MiB", "statistics peak ÷ L·S/16"]  # fmt: skip
    body = []
    for row in rows["statistics"]:
        ms, peak, sixteenth = row["ms"], row["peak_mib"], row["sixteenth_mib"]
        for engine in row["engines"]:
            forward, stats = ms[f"{engine} forward"], ms[f"{engine} statistics"]
            body.append([
                row["case"], engine, cell(forward), cell(stats), cell(ratio(stats, forward), 2, "×"),
                cell(peak[f"{engine} statistics"]), cell(peak[f"{engine} forward"]), cell(sixteenth),
                cell(ratio(peak[f"{engine} statistics"], sixteenth), 2),
            ])  # fmt: skip
    return markdown_table(header, body)
