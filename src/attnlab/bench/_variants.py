"""``attnlab bench``'s attention variants, side by side in one run: a sliding window
against full causal attention, torch's SDPA given the same boolean mask and torch's
FlexAttention; softcapping and sinks against the plain fused engine (float32)."""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .._timer import PAUSE_SECONDS, best_times
from .._validation import Array
from ..engine._attention import attention
from ._shapes import Shape
from ._table import cell, markdown_table, ratio

__all__ = ["CAP_CASE", "SOFTCAP", "WINDOW", "WINDOW_CASE", "format_variants", "variant_rows"]

WINDOW_CASE = Shape((1, 8), 16384, 16384, 64, causal=True, name="B1 H8 L=S=16384 E64 causal, window (512, 0)")
WINDOW = (512, 0)
CAP_CASE = Shape((1, 8), 4096, 4096, 64, name="B1 H8 L=S=4096 E64, fused")  # the shape classes' row
SOFTCAP = 30.0


def _inputs(shape: Shape) -> tuple[Array, Array, Array, Array]:
    """Seeded standard-normal q, k, v and dO of ``shape``, float32 (self-attention: L = S)."""
    rng = np.random.default_rng(0)
    q, k, v, d = (rng.standard_normal(shape.query_shape, dtype=np.float32) for _ in range(4))
    return q, k, v, d


def _flex(query: Array, key: Array, value: Array, left: int) -> tuple[Callable[[], object] | None, str]:
    """torch's flex_attention over the same causal window, compiled when the machine has a
    C++ compiler (inductor's CPU code needs one), else eager; (None, why) when torch has
    no FlexAttention or it cannot run."""
    try:
        import torch
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as error:
        return None, f"not run ({error})"

    def windowed(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return (kv_idx <= q_idx) & (q_idx - kv_idx <= left)

    compiled = shutil.which("c++") is not None or shutil.which("g++") is not None
    how = "compiled (inductor, C++)" if compiled else "eager (no C++ compiler here)"
    tq, tk, tv = (torch.from_numpy(x) for x in (query, key, value))
    try:
        _, _, L, _ = query.shape
        mask = create_block_mask(windowed, 1, 1, L, L, device="cpu")
        run = torch.compile(flex_attention) if compiled else flex_attention
        with warnings.catch_warnings():  # eager's one warning says what `how` says
            warnings.filterwarnings("ignore", "flex_attention called without torch.compile", UserWarning)
            run(tq, tk, tv, block_mask=mask)  # compiles, untimed
    except Exception as error:  # inductor missing pieces, out of memory, …: say so, never a made-up number
        return None, f"not run ({type(error).__name__}: {str(error).splitlines()[0][:80]})"
    return (lambda: run(tq, tk, tv, block_mask=mask)), how


def _window_row(repeat: int) -> dict[str, Any]:
    """ms of the causal window, full causal attention (both attnlab's choice of engine),
    torch's SDPA with the window's (L, L) bool mask, and flex_attention."""
    query, key, value, _ = _inputs(WINDOW_CASE)
    window = WINDOW
    runs: dict[str, Callable[[], object]] = {
        "window": lambda: attention(query, key, value, is_causal=True, window=window),
        "full causal": lambda: attention(query, key, value, is_causal=True),
    }
    flex_note = "not run (torch is not installed)"
    try:
        import torch
    except ImportError:
        pass
    else:
        L = query.shape[-2]
        distance = np.arange(L)[:, None] - np.arange(L)[None, :]  # i − j, (L, L)
        mask = torch.from_numpy((distance >= 0) & (distance <= window[0]))
        tq, tk, tv = (torch.from_numpy(x) for x in (query, key, value))
        runs["torch SDPA, bool mask"] = lambda: torch.nn.functional.scaled_dot_product_attention(
            tq, tk, tv, attn_mask=mask
        )
        flex, flex_note = _flex(query, key, value, window[0])
        if flex is not None:
            runs["torch flex_attention"] = flex
    ms = best_times(runs, repeat, settle=True, pause=PAUSE_SECONDS, milliseconds=True)
    return {"case": WINDOW_CASE.name, "ms": ms, "flex": flex_note}


def _cap_row(repeat: int, backward: bool) -> dict[str, Any]:
    """ms of the fused engine plain, with a softcap and with sinks."""
    query, key, value, grad = _inputs(CAP_CASE)
    sinks = np.linspace(-1.0, 1.0, CAP_CASE.batch[-1]).astype(np.float32)  # (H,)

    def run(**variant: Any) -> Callable[[], object]:
        def once() -> None:
            result = attention(query, key, value, engine="fused", **variant)
            if backward:
                result.backward(grad)

        return once

    runs = {"plain": run(), "softcap": run(softcap=SOFTCAP), "sinks": run(sinks=sinks)}
    ms = best_times(runs, repeat, settle=True, pause=PAUSE_SECONDS, milliseconds=True)
    return {"case": ("fwd+bwd " if backward else "") + CAP_CASE.name, "ms": ms}


def variant_rows(repeat: int) -> dict[str, Any]:
    """The window row and the softcap and sinks rows (forward, forward+backward); the
    latter need the fused engine, and are left out (None) without it.

    Raises ArgumentError or ArgumentTypeError: ``repeat`` not an integer >= 1."""
    from ..engine.fused import _engine as fused

    caps = [_cap_row(repeat, backward) for backward in (False, True)] if fused.available() else None
    return {"window": _window_row(repeat), "caps": caps}


def format_variants(rows: dict[str, Any]) -> str:
    """Markdown: the window row with each ratio to attnlab's window, then the softcap and
    sinks rows with their ratio to the plain engine (below 1.1: within 10 %)."""
    window = rows["window"]
    ms = window["ms"]
    others = [name for name in ms if name != "window"]
    header = ["case", "window ms", *(f"{n} ms" for n in others), *(f"{n} ÷ window" for n in others)]
    body = [[window["case"], cell(ms["window"]), *(cell(ms[n]) for n in others)]]
    body[0] += [cell(ratio(ms[n], ms["window"]), 2, "×") for n in others]
    lines = [markdown_table(header, body), "", f"torch flex_attention: {window['flex']}"]
    if "gemm_gflops" in rows:  # the window's products, 4·H·E per allowed score, against the machine's ceiling
        visible = sum(min(i, WINDOW[0]) + 1 for i in range(WINDOW_CASE.L))
        gflops = 4 * WINDOW_CASE.slices * WINDOW_CASE.E * visible / (ms["window"] * 1e6)
        lines.append(
            f"window: {gflops:.0f} GFLOP/s of allowed scores, {gflops / rows['gemm_gflops']:.0%} of the ceiling"
        )
    if rows["caps"] is not None:
        header = ["case", "plain ms", "softcap ms", "sinks ms", "softcap ÷ plain", "sinks ÷ plain"]
        body = [
            [r["case"], *(cell(r["ms"][n]) for n in ("plain", "softcap", "sinks"))]
            + [cell(ratio(r["ms"][n], r["ms"]["plain"]), 2, "×") for n in ("softcap", "sinks")]
            for r in rows["caps"]
        ]
        lines += ["", markdown_table(header, body)]
    return "\n".join(lines)
