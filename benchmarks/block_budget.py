"""Where the time of one 512 × 512 block goes, on one thread: the fused engine's compiled
pieces against torch's matrix products and torch's whole fused attention per block.

python benchmarks/block_budget.py      (needs attnlab[fast] and torch)

docs/benchmarks.md, "What limits the remaining gaps", quotes its output.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from attnlab._timer import best_times
from attnlab.engine.fused import _kernels as kernels

BLOCK = 512
KEYS = 16 * BLOCK  # the pieces are timed over 16 blocks of keys


def best_seconds(run: Callable[[], object], repeat: int = 7) -> float:
    return best_times({"run": run}, repeat, settle=True)["run"]


@kernels.compile_
def pieces(q, k, v, acc, part, scores, row_max, row_sum, rescale, which):  # type: ignore[no-untyped-def]
    """The forward's loop over blocks of keys (``attnlab.engine.fused._kernels.attend``), with only the
    pieces in ``which`` (1: Q·Kᵀ, 2: the softmax step, 4: P·V, 8: the accumulation)."""
    rows, width = q.shape[0], v.shape[1]
    for start in range(0, k.shape[0], BLOCK):
        block = scores.reshape((rows, BLOCK))
        if which & 1:
            np.dot(q, k[start : start + BLOCK].T, block)
        if which & 2:
            kernels.online_softmax(block, row_max, row_sum, rescale)
        if which & 4:
            np.dot(block, v[start : start + BLOCK], part)
        if which & 8:
            for i in range(rows):
                for e in range(width):
                    acc[i, e] = rescale[i] * acc[i, e] + part[i, e]


def report(width: int, rng: np.random.Generator) -> str:
    """One line: the pieces of a block of queries of ``width`` and torch's counterparts, µs."""
    q = rng.standard_normal((BLOCK, width), dtype=np.float32) / np.sqrt(np.float32(width))
    k, v = (rng.standard_normal((KEYS, width), dtype=np.float32) for _ in range(2))
    acc, part = np.zeros((BLOCK, width), np.float32), np.zeros((BLOCK, width), np.float32)
    scores = np.empty(BLOCK * BLOCK, np.float32)
    rows = np.full(BLOCK, -np.inf, np.float32), np.zeros(BLOCK, np.float32), np.ones(BLOCK, np.float32)
    names = {1: "Q·Kᵀ", 2: "softmax step", 4: "P·V", 15: "whole block"}
    blocks = KEYS // BLOCK
    with threadpool_limits(1):
        ours = {
            name: best_seconds(lambda w=which: pieces(q, k, v, acc, part, scores, *rows, w)) / blocks * 1e6
            for which, name in names.items()
        }
    tq, tk, tv = (torch.from_numpy(x[:BLOCK].copy()) for x in (q, k, v))
    t_scores, t_part = torch.empty(BLOCK, BLOCK), torch.empty(BLOCK, width)
    torch_qk = best_seconds(lambda: torch.mm(tq, tk.t(), out=t_scores)) * 1e6
    torch_pv = best_seconds(lambda: torch.mm(t_scores, tv, out=t_part)) * 1e6
    heads = [torch.from_numpy(x[None, None].copy()) for x in (q * np.sqrt(np.float32(width)), k, v)]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    torch_block = best_seconds(lambda: sdpa(*heads)) / blocks * 1e6
    flop = 2 * BLOCK * BLOCK * width / 1e3  # one product's FLOP / 1e9, per µs
    return (
        f"E={width}, one {BLOCK}×{BLOCK} block, one thread, µs: attnlab "
        + ", ".join(f"{name} {t:.0f}" for name, t in ours.items())
        + f"; torch: Q·Kᵀ {torch_qk:.0f}, P·V {torch_pv:.0f}, its whole attention {torch_block:.0f} a block"
        + f" (GFLOP/s Q·Kᵀ {flop / ours['Q·Kᵀ']:.0f} against {flop / torch_qk:.0f},"
        + f" P·V {flop / ours['P·V']:.0f} against {flop / torch_pv:.0f})"
    )


def main() -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    for width in (64, 32):
        print(report(width, rng))


if __name__ == "__main__":
    main()
