"""``attnlab bench``'s report: every figure of one run on one machine, the shape classes,
the length sweep, the attention variants, the attention statistics against the forward,
reference vs seed, a long sequence and the fused engine's first call, with the machine's
limits beside them (float32, B=1, H=8, E=64 unless named).

Times are the best of ``repeat`` runs taken in turns (see :func:`attnlab._timer.best_times`);
memory is the peak of NumPy's allocations during one run (tracemalloc), which torch's
allocations are not part of, or a fresh process's peak resident memory.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from ._classes import format_classes, shape_classes
from ._first_call import first_call_seconds
from ._long_sequence import long_sequence
from ._machine import gemm_gflops, machine, read_bandwidth
from ._seed import reference_vs_seed
from ._statistics import format_statistics, statistics_rows
from ._sweep import SIZES, B, E, H, format_sweep, length_sweep
from ._variants import format_variants, variant_rows

__all__ = ["main"]


def main(quick: bool = False, json_path: str | None = None, repeat: int | None = None) -> str:
    """Run the whole benchmark and return its report (Markdown); with ``json_path``, write
    every figure there too. ``quick``: the shape classes only, attnlab's choice against
    torch, one timed run each (under a minute).

    Raises ArgumentError or ArgumentTypeError: ``repeat`` not an integer >= 1."""
    repeat = repeat or (1 if quick else 3)
    described = machine()
    ceiling = gemm_gflops()
    bandwidth = read_bandwidth()
    classes = shape_classes(repeat, every_engine=not quick)
    rows = [] if quick else length_sweep(SIZES, repeat)
    variants = None if quick else variant_rows(repeat)
    statistics = None if quick else statistics_rows(repeat)
    seed = reference_vs_seed((16, 32) if quick else (16, 32, 64))
    long = None if quick else long_sequence()
    first_call = None if quick else first_call_seconds()

    report = [
        f"attnlab bench: best of {repeat}; machine: " + ", ".join(f"{k} {v}" for k, v in described.items()),
        f"float32 GEMM ceiling (2048², all cores): {ceiling:.0f} GFLOP/s",
        f"memory read (GEMV over 512 MB, all cores): {bandwidth:.1f} GB/s",
        "",
        "Shape classes, side by side with torch (float32 unless named; engine: what engine=None picks; "
        "the rate: GFLOP/s of the products, decode rows GB/s of K and V read; the limit: a 2048² GEMM's "
        "GFLOP/s in the row's dtype, decode rows a GEMV's GB/s over as many bytes, timed in the same rounds "
        "as the row):",
        "",
        format_classes(classes),
    ]
    if rows:
        report += [
            "",
            f"Length sweep: float32, B={B}, H={H}, E={E}, L = S; GFLOP/s with forward 4·B·H·L·S·E (½ causal), "
            "backward 2.5× forward:",
            "",
            format_sweep(rows),
        ]
    if variants:
        report += ["", "Attention variants, side by side (float32, attnlab's choice of engine unless named):", ""]
        report.append(format_variants(variants))
    if statistics:
        report += ["", "Attention statistics against the same engine's forward (float32; peak: NumPy's "
                   "allocations beyond the inputs, tracemalloc):", "", format_statistics(statistics)]  # fmt: skip
    report += ["", "attnlab.reference vs the seed's triple-loop algorithm (L = d_model = d_k = n, same numbers):"]
    report += [
        f"  n={s['n']}: seed {s['seed_ms']:.2f} ms, reference {s['reference_ms']:.2f} ms, {_faster(s['speedup'])}"
        for s in seed
    ]
    if long:
        report.append(
            f"long sequence, tiled forward, L = S = {long['length']}, H=1, E=64: {long['seconds']:.1f} s, "
            f"peak process memory {long['peak_rss_mib']:.0f} MiB "
            f"(the textbook's scores alone: {long['textbook_scores_mib']:.0f} MiB)"
        )
    if first_call:
        report.append(
            "fused engine, first forward+backward in a fresh process (float32, float64): "
            + "; ".join(f"{when} {t['float32']:.2f} s, {t['float64']:.2f} s" for when, t in first_call.items())
        )
    if json_path:
        data: dict[str, Any] = {
            "machine": described,
            "gemm_gflops": ceiling,
            "read_gb_s": bandwidth,
            "repeat": repeat,
            "classes": classes,
            "rows": [asdict(r) for r in rows],
            "variants": variants,
            "statistics": statistics,
            "reference_vs_seed": seed,
            "long_sequence": long,
            "first_call_seconds": first_call,
        }
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
    return "\n".join(report)


def _faster(speedup: float) -> str:
    """The seed's time ÷ the reference's in words: "1.3× faster", or "1.1× slower" below 1 (never "0.9× faster")."""
    return f"{speedup:.1f}× faster" if speedup >= 1 else f"{1 / speedup:.1f}× slower"
