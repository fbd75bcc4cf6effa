"""The shape classes of ``attnlab bench``: attnlab's choice of engine (and each blocked
engine) side by side with torch on the shapes that models run."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._timer import PAUSE_SECONDS, best_times
from ..engine._attention import Engine, choose_engine
from ..engine._problem import make_problem
from ..engine.variants import Rules
from ._machine import gemm_run, read_run
from ._shapes import Shape, available_engines, timed_runs
from ._table import cell, markdown_table, ratio

__all__ = ["CASES", "chosen_engine", "format_classes", "shape_classes"]

CASES = (
    Shape((1, 8), 4096, 4096, 64, name="B1 H8 L=S=4096 E64"),
    Shape((1, 8), 4096, 4096, 64, causal=True, name="B1 H8 L=S=4096 E64 causal"),
    Shape((1, 8), 2048, 2048, 128, name="B1 H8 L=S=2048 E128"),
    Shape((1, 16), 2048, 2048, 32, name="B1 H16 L=S=2048 E32"),
    Shape((4, 16), 512, 512, 64, name="B4 H16 L=S=512 E64"),
    Shape((32, 8), 64, 64, 64, name="B32 H8 L=S=64 E64"),
    Shape((1, 8), 256, 8192, 64, name="prefill B1 H8 L=256 S=8192 E64"),
    Shape((1, 32), 2048, 2048, 128, kv_heads=8, name="GQA H32/Hk8 L=S=2048 E128"),
    Shape((1, 8), 2048, 2048, 64, dtype="float64", name="float64 B1 H8 L=S=2048 E64"),
    Shape((1, 32), 1, 8192, 128, name="decode L=1 S=8192 H32 E128"),
    Shape((1, 1), 1, 65536, 128, name="decode L=1 S=65536 H1 E128"),
    Shape((1, 32), 1, 32768, 128, kv_heads=8, name="decode GQA H32/Hk8 S=32768 E128"),
    Shape((8, 8), 1, 4096, 128, key_lengths=tuple(range(512, 4097, 512)), name="decode B8 H8 S=512…4096 E128"),
    Shape((1, 8), 2048, 2048, 64, backward=True, name="fwd+bwd B1 H8 L=S=2048 E64"),
    Shape((1, 8), 2048, 2048, 128, causal=True, backward=True, name="fwd+bwd B1 H8 L=S=2048 E128 causal"),
    Shape((4, 16), 512, 512, 64, backward=True, name="fwd+bwd B4 H16 L=S=512 E64"),
)


def chosen_engine(shape: Shape) -> str:
    """The engine engine=None picks for ``shape``, without running it."""
    query = np.broadcast_to(np.zeros((), shape.dtype), shape.query_shape)  # views: nothing is allocated
    key = np.broadcast_to(np.zeros((), shape.dtype), shape.key_shape)
    lengths = None if shape.key_lengths is None else np.array(shape.key_lengths)
    problem = make_problem(
        query, key, key, None, 0.0, None, shape.gqa, None, Rules(is_causal=shape.causal), key_lengths=lengths
    )
    return choose_engine(None, problem, False)


def shape_classes(repeat: int, every_engine: bool = True) -> list[dict[str, Any]]:
    """Each of CASES timed side by side: attnlab's choice (and each blocked engine when
    ``every_engine``) against torch, ms, best of ``repeat`` in turns, with the machine's
    limit taking its turn in the same rounds (the GEMM of ``gemm_run`` in the row's dtype, or for a decode
    row the GEMV of ``read_run`` over as many bytes as it reads), so that a slow spell of
    the shared machine falls on the limit too; one row {case, chosen, ms, the work: flops (forward rows) or bytes of the
    cache read (decode rows), limit_rate: the limit's GFLOP/s or GB/s} per case.

    Raises ArgumentError or ArgumentTypeError: ``repeat`` not an integer >= 1."""
    engines: list[Engine | None] = [None]
    if every_engine:
        engines += [e for e in available_engines() if e != "naive"]
    gemms = {dtype: gemm_run(dtype=dtype) for dtype in sorted({case.dtype for case in CASES})}
    rows = []
    for case in CASES:
        # a decode's limit: a GEMV over as many bytes as its keys and values, settled as it is;
        # a forward's or backward's: the GEMM of its dtype
        limit, work = read_run(case.cache_bytes / 2**20) if case.decoding else gemms[case.dtype]
        runs = timed_runs(case, engines) | {"limit": limit}
        ms = best_times(runs, repeat, settle=True, pause=PAUSE_SECONDS, milliseconds=True)
        limit_rate = work / ms.pop("limit") / 1e6
        rows.append(
            {
                "case": case.name,
                "chosen": chosen_engine(case),
                "ms": ms,
                **({"bytes": case.cache_bytes} if case.decoding else {"flops": case.flops}),
                "limit_rate": limit_rate,
                "dtype": case.dtype,
            }
        )
    return rows


def _kind(row: dict[str, Any]) -> tuple[str, str]:
    """What limits a row: (unit, dtype): a decode's GEMV read (GB/s), else the GEMM of its dtype (GFLOP/s)."""
    dtype = row.get("dtype") or ("float64" if row["case"].startswith("float64") else "float32")  # older runs' rows
    return ("GB/s", "") if "bytes" in row else ("GFLOP/s", dtype)


def _rate(row: dict[str, Any], best: dict[tuple[str, str], float]) -> tuple[str, str, str]:
    """attnlab's rate on ``row``, the machine's limit for its kind (``best``: the fastest of
    the run's rounds) and the share of it: GB/s of the cache read against the GEMV's (decode
    rows), else GFLOP/s of the products against the GEMM's of its dtype."""
    ms = row["ms"]["attnlab"]
    unit = _kind(row)[0]
    rate, limit = (row["bytes"] if "bytes" in row else row.get("flops", 0.0)) / ms / 1e6, best.get(_kind(row))
    if not limit:
        return f"{rate:.1f} {unit}", "—", "—"
    return f"{rate:.1f} {unit}", f"{limit:.1f} {unit}", f"{rate / limit:.0%}"


def format_classes(rows: list[dict[str, Any]]) -> str:
    """Markdown: ms per implementation, torch ÷ attnlab (above 1: attnlab is faster),
    attnlab's rate, the machine's limit (the GFLOP/s of a GEMM in the row's dtype for
    forward and backward rows, the GEMV's read GB/s for decode rows: each row times it in
    its own rounds, and the table gives the fastest of the run's, since a slower one was a
    neighbour's spell, not the machine's limit) and attnlab's share of that limit.

    Args:
        rows: :func:`shape_classes`'s rows.
    """
    names = list(rows[0]["ms"])
    header = ["case", "engine", *(f"{n} ms" for n in names), "torch ÷ attnlab", "attnlab rate", "limit (run's best)",
              "share of the limit"]  # fmt: skip
    best: dict[tuple[str, str], float] = {}
    for r in rows:
        if r.get("limit_rate"):
            best[_kind(r)] = max(best.get(_kind(r), 0.0), r["limit_rate"])
    body = [
        [
            r["case"],
            r["chosen"],
            *(cell(r["ms"][n]) for n in names),
            cell(ratio(r["ms"].get("torch"), r["ms"]["attnlab"]), 2, "×"),
            *_rate(r, best),
        ]
        for r in rows
    ]
    return markdown_table(header, body)
