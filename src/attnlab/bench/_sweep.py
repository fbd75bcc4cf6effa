"""The length sweep of ``attnlab bench``: the tiled and naive engines, the textbook's
three lines and torch over L = S, forward and forward+backward, causal or not, with
GFLOP/s and NumPy's peak memory.

FLOPs: forward 4·B·H·L·S·E (half when causal), backward 2.5× the forward."""

from __future__ import annotations

from dataclasses import dataclass

from .._timer import PAUSE_SECONDS, best_times
from ._memory import traced_peak_mib
from ._shapes import Shape, timed_runs
from ._table import cell, markdown_table, ratio

__all__ = ["IMPLEMENTATIONS", "SIZES", "Row", "format_sweep", "length_sweep"]

B, H, E = 1, 8, 64
SIZES = (256, 512, 1024, 2048, 4096)
IMPLEMENTATIONS = ("tiled", "naive", "textbook", "torch")


@dataclass
class Row:
    """One configuration: milliseconds and peak MiB per implementation (None: not run)."""

    passes: str  # "forward" or "forward+backward"
    causal: bool
    length: int
    gflop: float
    ms: dict[str, float | None]
    peak_mib: dict[str, float | None]


def length_sweep(sizes: tuple[int, ...], repeat: int, memory: bool = True) -> list[Row]:
    """Every implementation at L = S = each of ``sizes`` (float32, B=1, H=8, E=64): forward
    then forward+backward, not causal then causal; ms, best of ``repeat`` in turns, and
    (with ``memory``) the peak of NumPy's allocations during one more run (not torch's).

    Raises ArgumentError or ArgumentTypeError: ``repeat`` not an integer >= 1."""
    rows = []
    for backward in (False, True):
        for causal in (False, True):
            for length in sizes:
                flop = 4 * B * H * length * length * E / (2 if causal else 1) * (3.5 if backward else 1)
                shape = Shape((B, H), length, length, E, causal=causal, backward=backward)
                runs = timed_runs(shape, ("tiled", "naive"), textbook=True)
                timed = best_times(runs, repeat, settle=True, pause=PAUSE_SECONDS, milliseconds=True)
                ms: dict[str, float | None] = {**dict.fromkeys(IMPLEMENTATIONS), **timed}
                peak: dict[str, float | None] = dict.fromkeys(IMPLEMENTATIONS)
                for name, run in runs.items():
                    if memory and name != "torch":
                        peak[name] = traced_peak_mib(run)
                passes = "forward+backward" if backward else "forward"
                rows.append(Row(passes, causal, length, flop / 1e9, ms, peak))
    return rows


def format_sweep(rows: list[Row]) -> str:
    """A Markdown table: ms per implementation, GFLOP/s and the ratios that matter."""
    header = [
        "pass", "causal", "L", "tiled ms", "naive ms", "textbook ms", "torch ms", "tiled GFLOP/s", "torch GFLOP/s",
        "tiled ÷ torch", "tiled ÷ textbook", "peak MiB tiled / naive / textbook",
    ]  # fmt: skip
    return markdown_table(header, [_sweep_cells(r) for r in rows])


def _sweep_cells(r: Row) -> list[object]:
    t = r.ms
    speed = {name: None if ms is None else r.gflop / (ms / 1e3) for name, ms in t.items()}
    peaks = " / ".join(cell(r.peak_mib[name], 0) for name in ("tiled", "naive", "textbook"))
    return [
        r.passes, "yes" if r.causal else "no", r.length, cell(t["tiled"]), cell(t["naive"]), cell(t["textbook"]),
        cell(t["torch"]), cell(speed["tiled"], 0), cell(speed["torch"], 0), cell(ratio(t["torch"], t["tiled"]), 2, "×"),
        cell(ratio(t["textbook"], t["tiled"]), 2, "×"), peaks,
    ]  # fmt: skip
