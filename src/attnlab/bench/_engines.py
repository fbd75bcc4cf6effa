"""Side-by-side timings of attention implementations, for ``attnlab bench``.

Every figure of one table comes from one run on one machine: attnlab's tiled and
naive engines, the textbook three-line NumPy attention and torch's fused
``scaled_dot_product_attention`` (when torch is installed), float32, B=1, H=8, d=64.
FLOPs: forward 4·B·H·L·S·d (half when causal), backward 2.5× the forward.
Times are the best of ``repeat`` runs; memory is the peak of NumPy's allocations
during one run (tracemalloc), which torch's allocations are not part of.
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
import timeit
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .. import reference
from ..engine._attention import ENGINES, Engine, attention, choose_engine
from ..engine._problem import make_problem
from ..engine._threads import default_threads
from ..engine.fused import _engine as _fused

B, H, E = 1, 8, 64
SIZES = (256, 512, 1024, 2048, 4096)
LONG_LENGTH = 65_536
IMPLEMENTATIONS = ("tiled", "naive", "textbook", "torch")
PAUSE_SECONDS = 0.05  # before each implementation's turn

__all__ = [
    "CASES",
    "Case",
    "Row",
    "Shape",
    "engine_report",
    "engine_table",
    "first_call_seconds",
    "format_classes",
    "format_table",
    "gemm_gflops",
    "long_sequence",
    "main",
    "reference_vs_seed",
    "run",
    "shape_classes",
    "textbook_attention",
]


@dataclass
class Row:
    """One configuration: milliseconds and peak MiB per implementation (None: not run)."""

    passes: str  # "forward" or "forward+backward"
    causal: bool
    length: int
    gflop: float
    ms: dict[str, float | None]
    peak_mib: dict[str, float | None]


def _best_ms(run: Callable[[], Any], repeat: int) -> float:
    """The fastest of ``repeat`` runs after one to warm up (caches, thread pool, BLAS buffers), ms."""
    return min(timeit.repeat(run, number=1, repeat=repeat + 1)[1:]) * 1e3


def _peak_mib(run: Callable[[], Any]) -> float:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def textbook_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """The three lines every tutorial writes (plus the causal mask)."""
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])  # (B, H, L, S)
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape[-2:], dtype=bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)) @ v


def _runs(length: int, causal: bool, backward: bool) -> dict[str, Callable[[], Any]]:
    rng = np.random.default_rng(0)
    q, k, v, grad = (rng.standard_normal((B, H, length, E), dtype=np.float32) for _ in range(4))

    def engine(name: Engine) -> Callable[[], Any]:
        def run() -> None:
            result = attention(q, k, v, is_causal=causal, engine=name)
            if backward:
                result.backward(grad)

        return run

    runs = {"tiled": engine("tiled"), "naive": engine("naive")}
    if not backward:
        runs["textbook"] = lambda: textbook_attention(q, k, v, causal)
    try:
        import torch
    except ImportError:
        return runs
    tq, tk, tv = (torch.tensor(x, requires_grad=backward) for x in (q, k, v))
    t_grad = torch.tensor(grad)

    def torch_run() -> None:
        out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        if backward:
            out.backward(t_grad)

    runs["torch"] = torch_run
    return runs


def gemm_gflops(n: int = 2048, repeat: int = 5) -> float:
    """The machine's float32 matrix-multiply rate, all cores: the ceiling."""
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    return 2 * n**3 / _best_ms(lambda: a @ a, repeat) / 1e6


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # pragma: no cover
        return "unknown"
    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    coretype = os.environ.get("OPENBLAS_CORETYPE")
    override = f"OPENBLAS_CORETYPE={coretype}" if coretype else "OPENBLAS_CORETYPE unset"
    names = ", ".join(f"{i['internal_api']} {i.get('version')} {i.get('architecture', '')}".strip() for i in blas)
    return f"{names} ({override})"


def _seed_matrix_multiply(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    """The seed program's matrix multiply, as it wrote it: the triple loop."""
    m, n, p = len(a), len(b), len(b[0])
    result = [[0.0 for _ in range(p)] for _ in range(m)]
    for i in range(m):
        for j in range(p):
            for k in range(n):
                result[i][j] += a[i][k] * b[k][j]
    return result


def _seed_forward(layer: reference.SelfAttention, X: list[list[float]]) -> list[list[float]]:
    """The seed program's forward (without its prints), on the layer's weights."""
    Q, K, V = (_seed_matrix_multiply(X, w) for w in (layer.Wq, layer.Wk, layer.Wv))
    scores = _seed_matrix_multiply(Q, reference.transpose(K))
    scale_factor = math.sqrt(layer.d_k)
    weights = [reference.softmax([s / scale_factor for s in row]) for row in scores]
    return _seed_matrix_multiply(weights, V)


def reference_vs_seed(sizes: tuple[int, ...] = (16, 32, 64), repeat: int = 3) -> list[dict[str, float]]:
    """attnlab.reference against the seed's algorithm, L = d_model = d_k = n."""
    results = []
    for n in sizes:
        rnd = random.Random(n)
        X = [[rnd.uniform(-1, 1) for _ in range(n)] for _ in range(n)]
        layer = reference.SelfAttention(n, n)
        if layer.forward(X)[0] != _seed_forward(layer, X):  # pragma: no cover - the tests check this too
            raise RuntimeError("attnlab.reference no longer reproduces the seed's numbers bit for bit")
        seed_ms = _best_ms(functools.partial(_seed_forward, layer, X), repeat)
        reference_ms = _best_ms(functools.partial(layer.forward, X), repeat)
        results.append({"n": n, "seed_ms": seed_ms, "reference_ms": reference_ms, "speedup": seed_ms / reference_ms})
    return results


def long_sequence(length: int = LONG_LENGTH) -> dict[str, float]:
    """Tiled forward at L = S = ``length``, one head, d=64, in a fresh process: seconds
    and the process's peak resident memory (MiB), against the textbook's score bytes."""
    command = [sys.executable, "-m", "attnlab.bench._long_sequence", str(length)]
    measured = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    return {"length": length, **measured, "textbook_scores_mib": length**2 * 4 / 2**20}


def first_call_seconds() -> dict[str, dict[str, float]] | None:
    """The fused engine's first forward and backward in a fresh process, with an empty
    JIT cache and then with the cache that the first process left."""
    if not _fused.available():
        return None
    with tempfile.TemporaryDirectory() as cache:
        command = [sys.executable, "-m", "attnlab.bench._first_call"]
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        runs = [subprocess.run(command, capture_output=True, text=True, check=True, env=env) for _ in range(2)]
    return {"empty cache": json.loads(runs[0].stdout), "cached": json.loads(runs[1].stdout)}


def run(sizes: tuple[int, ...], repeat: int, memory: bool = True) -> list[Row]:
    rows = []
    for backward in (False, True):
        for causal in (False, True):
            for length in sizes:
                flop = 4 * B * H * length * length * E / (2 if causal else 1) * (3.5 if backward else 1)
                runs = _runs(length, causal, backward)
                ms: dict[str, float | None] = {**dict.fromkeys(IMPLEMENTATIONS), **_interleaved_ms(runs, repeat)}
                peak: dict[str, float | None] = dict.fromkeys(IMPLEMENTATIONS)
                for name, fn in runs.items():
                    if memory and name != "torch":
                        peak[name] = _peak_mib(fn)
                passes = "forward+backward" if backward else "forward"
                rows.append(Row(passes, causal, length, flop / 1e9, ms, peak))
    return rows


@dataclass(frozen=True)
class Shape:
    """One row of the engine table: ``slices`` (batch × heads) of L queries, S keys, width E."""

    slices: int
    L: int
    S: int
    E: int
    causal: bool = False


# Shapes for engine=None's cost model: many tiny heads to one long one, E = 8 and 64,
# causal ones, and decoding (one query against a long cache).
ENGINE_GRID = [
    *(
        Shape(slices, length, length, width)
        for width in (8, 64)
        for slices in (1, 8, 64, 512, 4096, 32768)
        for length in (8, 32, 128, 256, 512, 2048)
        if 2**12 <= slices * length * length <= 2**26
    ),
    *(
        Shape(slices, length, length, 64, causal=True)
        for slices in (1, 8, 64)
        for length in (128, 256, 512, 1024, 2048)
        if 2**14 <= slices * length * length <= 2**26
    ),
    *(Shape(slices, 1, length, 128) for slices in (1, 8, 32) for length in (2048, 8192, 65536)),
]


@dataclass(frozen=True)
class Case:
    """One shape class: B batches of H query heads (Hk key/value heads), L queries, S keys, width E."""

    name: str
    B: int
    H: int
    Hk: int
    L: int
    S: int
    E: int
    causal: bool = False
    backward: bool = False
    dtype: str = "float32"


CASES = (
    Case("B1 H8 L=S=4096 E64", 1, 8, 8, 4096, 4096, 64),
    Case("B1 H8 L=S=4096 E64 causal", 1, 8, 8, 4096, 4096, 64, causal=True),
    Case("B1 H8 L=S=2048 E128", 1, 8, 8, 2048, 2048, 128),
    Case("B1 H16 L=S=2048 E32", 1, 16, 16, 2048, 2048, 32),
    Case("B4 H16 L=S=512 E64", 4, 16, 16, 512, 512, 64),
    Case("B32 H8 L=S=64 E64", 32, 8, 8, 64, 64, 64),
    Case("prefill B1 H8 L=256 S=8192 E64", 1, 8, 8, 256, 8192, 64),
    Case("GQA H32/Hk8 L=S=2048 E128", 1, 32, 8, 2048, 2048, 128),
    Case("float64 B1 H8 L=S=2048 E64", 1, 8, 8, 2048, 2048, 64, dtype="float64"),
    Case("decode L=1 S=8192 H32 E128", 1, 32, 32, 1, 8192, 128),
    Case("decode L=1 S=65536 H1 E128", 1, 1, 1, 1, 65536, 128),
    Case("fwd+bwd B1 H8 L=S=2048 E64", 1, 8, 8, 2048, 2048, 64, backward=True),
    Case("fwd+bwd B1 H8 L=S=2048 E128 causal", 1, 8, 8, 2048, 2048, 128, causal=True, backward=True),
    Case("fwd+bwd B4 H16 L=S=512 E64", 4, 16, 16, 512, 512, 64, backward=True),
)


def _case_runs(case: Case, engines: list[Engine | None]) -> dict[str, Callable[[], Any]]:
    """One callable per attnlab engine (None: engine=None's choice) and for torch."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((case.B, case.H, case.L, case.E)).astype(case.dtype)
    k, v = (rng.standard_normal((case.B, case.Hk, case.S, case.E)).astype(case.dtype) for _ in range(2))
    grad = rng.standard_normal(q.shape).astype(case.dtype)
    gqa = case.Hk != case.H

    def ours(engine: Engine | None) -> Callable[[], Any]:
        def run() -> None:
            result = attention(q, k, v, is_causal=case.causal, enable_gqa=gqa, engine=engine)
            if case.backward:
                result.backward(grad)

        return run

    runs: dict[str, Callable[[], Any]] = {engine or "attnlab": ours(engine) for engine in engines}
    try:
        import torch
    except ImportError:
        return runs
    tq, tk, tv = (torch.tensor(x, requires_grad=case.backward) for x in (q, k, v))
    t_grad = torch.tensor(grad)

    def theirs() -> None:
        out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=case.causal, enable_gqa=gqa)
        if case.backward:
            out.backward(t_grad)

    runs["torch"] = theirs
    return runs


def shape_classes(repeat: int, every_engine: bool = True) -> list[dict[str, Any]]:
    """Each of CASES timed side by side: attnlab's choice (and each blocked engine when
    ``every_engine``) against torch, ms, best of ``repeat``."""
    engines: list[Engine | None] = [None]
    if every_engine:
        engines += [e for e in _engines() if e != "naive"]
    rows = []
    for case in CASES:
        rows.append(
            {
                "case": case.name,
                "chosen": attention_engine(case),
                "ms": _interleaved_ms(_case_runs(case, engines), repeat),
            }
        )
    return rows


def _interleaved_ms(runs: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """The fastest of ``repeat`` timed runs of each, ms, taking turns: a slow spell of a
    shared machine then falls on every implementation alike. Each timed run follows a
    pause, in which the previous implementation's threads stop spinning (torch's OpenMP
    threads wait busily for a while after each call), and an untimed run of the same
    implementation, which wakes its threads and warms its caches."""
    best = dict.fromkeys(runs, math.inf)
    for _ in range(repeat):
        for name, run in runs.items():
            time.sleep(PAUSE_SECONDS)
            run()
            best[name] = min(best[name], timeit.timeit(run, number=1) * 1e3)
    return best


def attention_engine(case: Case) -> str:
    """The engine engine=None picks for ``case``, without running it."""
    x = np.broadcast_to(np.zeros((), case.dtype), (case.B, case.H, case.L, case.E))
    kv = np.broadcast_to(np.zeros((), case.dtype), (case.B, case.Hk, case.S, case.E))
    return choose_engine(None, make_problem(x, kv, kv, None, 0.0, case.causal, None, case.Hk != case.H, None), False)


def format_classes(rows: list[dict[str, Any]]) -> str:
    """Markdown: ms per implementation and torch ÷ attnlab (above 1: attnlab is faster)."""
    names = list(rows[0]["ms"])
    head = f"| case | engine | {' | '.join(f'{n} ms' for n in names)} | torch ÷ attnlab |"
    lines = [head, "|---" * (len(names) + 3) + "|"]
    for r in rows:
        ms = r["ms"]
        ratio = ms["torch"] / ms["attnlab"] if "torch" in ms else None
        times = " | ".join(_fmt(ms[n]) for n in names)
        lines.append(f"| {r['case']} | {r['chosen']} | {times} | {_fmt(ratio, 2, '×')} |")
    return "\n".join(lines)


def _engines() -> list[Engine]:
    """The engines this installation has: the fused one needs numba and SciPy."""
    return [name for name in ENGINES if name != "fused" or _fused.available()]


def engine_table(repeat: int = 3) -> list[dict[str, Any]]:
    """Every available engine's forward time (ms, float32) on ENGINE_GRID: the table that
    docs/engine-choice.json keeps and tests/test_engine_choice.py checks engine=None against."""
    rows = []
    for shape in ENGINE_GRID:
        rng = np.random.default_rng(0)
        q = rng.standard_normal((shape.slices, shape.L, shape.E), dtype=np.float32)
        k, v = (rng.standard_normal((shape.slices, shape.S, shape.E), dtype=np.float32) for _ in range(2))
        run = functools.partial(attention, q, k, v, is_causal=shape.causal)
        ms = _interleaved_ms({name: functools.partial(run, engine=name) for name in _engines()}, repeat)
        rows.append({**asdict(shape), "ms": ms})
    return rows


def engine_report(path: str, repeat: int) -> str:
    """Write :func:`engine_table` to ``path`` (JSON) and return it as Markdown."""
    rows = engine_table(repeat)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"machine": _machine(), "repeat": repeat, "rows": rows}, f, indent=1)
    engines = list(rows[0]["ms"])
    lines = [
        f"| slices | L | S | E | causal | {' | '.join(f'{e} ms' for e in engines)} | fastest |",
        "|---" * (len(engines) + 6) + "|",
    ]
    for r in rows:
        ms = r["ms"]
        times = " | ".join(f"{ms[e]:.2f}" for e in engines)
        causal = "yes" if r["causal"] else "no"
        lines.append(f"| {r['slices']} | {r['L']} | {r['S']} | {r['E']} | {causal} | {times} | {min(ms, key=ms.get)} |")
    return "\n".join(lines)


def _fmt(x: float | None, digits: int = 1, unit: str = "") -> str:
    return "—" if x is None else f"{x:.{digits}f}{unit}"


def format_table(rows: list[Row]) -> str:
    """A Markdown table: ms per implementation, GFLOP/s and the ratios that matter."""
    head = (
        "| pass | causal | L | tiled ms | naive ms | textbook ms | torch ms | tiled GFLOP/s | torch GFLOP/s "
        "| tiled ÷ torch | tiled ÷ textbook | peak MiB tiled / naive / textbook |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        t = r.ms
        speed = {k: None if v is None else r.gflop / (v / 1e3) for k, v in t.items()}
        vs_torch = None if t["torch"] is None or t["tiled"] is None else t["torch"] / t["tiled"]
        vs_text = None if t["textbook"] is None or t["tiled"] is None else t["textbook"] / t["tiled"]
        peaks = " / ".join(_fmt(r.peak_mib[k], 0) for k in ("tiled", "naive", "textbook"))
        lines.append(
            f"| {r.passes} | {'yes' if r.causal else 'no'} | {r.length} | {_fmt(t['tiled'])} | {_fmt(t['naive'])} "
            f"| {_fmt(t['textbook'])} | {_fmt(t['torch'])} | {_fmt(speed['tiled'], 0)} | {_fmt(speed['torch'], 0)} "
            f"| {_fmt(vs_torch, 2, '×')} | {_fmt(vs_text, 2, '×')} | {peaks} |"
        )
    return "\n".join(lines)


def _machine() -> dict[str, Any]:
    """What the figures were measured on."""
    _fused.available()  # loads SciPy's BLAS, if the fused engine is there, so that it is listed too
    machine: dict[str, Any] = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "threads": default_threads(),
        "blas": blas_info(),
        "numpy": np.__version__,
        "python": platform.python_version(),
    }
    try:
        import torch

        machine["torch"] = f"{torch.__version__} ({torch.get_num_threads()} threads)"
    except ImportError:
        machine["torch"] = "not installed (pip install 'attnlab[torch]')"
    if _fused.available():
        import numba

        machine["numba"] = numba.__version__
    # what forces kernels (see docs/benchmarks.md), as this run saw it
    forced = (
        "NPY_DISABLE_CPU_FEATURES",
        "NUMBA_CPU_NAME",
        "NUMBA_CPU_FEATURES",
        "ATEN_CPU_CAPABILITY",
        "MKL_ENABLE_INSTRUCTIONS",
        "ONEDNN_MAX_CPU_ISA",
    )
    machine.update({name: os.environ[name] for name in forced if name in os.environ})
    return machine


def main(quick: bool = False, json_path: str | None = None, repeat: int | None = None) -> str:
    """Run the whole benchmark and return its report (Markdown). ``quick``: the shape
    classes only, attnlab's choice against torch, one timed run each (under a minute)."""
    repeat = repeat or (1 if quick else 3)
    machine = _machine()
    ceiling = gemm_gflops()
    classes = shape_classes(repeat, every_engine=not quick)
    rows = [] if quick else run(SIZES, repeat)
    seed = reference_vs_seed((16, 32) if quick else (16, 32, 64))
    long = None if quick else long_sequence()
    first_call = None if quick else first_call_seconds()

    report = [
        f"attnlab bench: best of {repeat}; machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()),
        f"float32 GEMM ceiling (2048², all cores): {ceiling:.0f} GFLOP/s",
        "",
        "Shape classes, side by side with torch (float32 unless named; engine: what engine=None picks):",
        "",
        format_classes(classes),
    ]
    if rows:
        report += [
            "",
            f"Length sweep: float32, B={B}, H={H}, E={E}, L = S; GFLOP/s with forward 4·B·H·L·S·E (½ causal), "
            "backward 2.5× forward:",
            "",
            format_table(rows),
        ]
    report += ["", "attnlab.reference vs the seed's triple-loop algorithm (L = d_model = d_k = n, same numbers):"]
    report += [
        f"  n={s['n']}: seed {s['seed_ms']:.2f} ms, reference {s['reference_ms']:.2f} ms, {s['speedup']:.1f}× faster"
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
        data = {
            "machine": machine,
            "gemm_gflops": ceiling,
            "repeat": repeat,
            "classes": classes,
            "rows": [asdict(r) for r in rows],
            "reference_vs_seed": seed,
            "long_sequence": long,
            "first_call_seconds": first_call,
        }
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
    return "\n".join(report)
