"""One rank of ``attnlab ring``, started by torchrun:

    python -m torch.distributed.run --nproc-per-node N -m attnlab.bench._ring LENGTH [options]

Every rank builds the whole sequence from one seed (float32 unless --float64, one head of
width 64 unless told), runs ring attention on its shard (and the backward with
--backward), and measures its time, its extra memory (tracemalloc: NumPy's allocations,
the blocks in flight included) and the bytes it sent. Rank 0 gathers the figures and, when
--check is given, compares the output (and with --backward dQ, dK and dV) with the
single-process engine's over the whole sequence; it prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import tracemalloc
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import numpy as np

from .. import distributed
from .._timer import time_once
from ..distributed import _agreement, _ring
from ..distributed import _attention as _ring_api
from ..engine.variants import Rules
from ._memory import peak_rss_mib

__all__ = ["main"]

T = TypeVar("T")


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    parser = argparse.ArgumentParser(prog="attnlab.bench._ring")
    parser.add_argument("length", type=int)
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--backward", action="store_true")
    parser.add_argument("--layout", default="zigzag")
    parser.add_argument("--float64", action="store_true")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)

    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    dtype = np.float64 if args.float64 else np.float32
    rng = np.random.default_rng(0)
    shape = (1, args.heads, args.length, args.dim)
    q, k, v, d = (rng.standard_normal(shape, dtype=dtype) for _ in range(4))
    shards = [distributed.shard(x, size, rank, args.layout) for x in (q, k, v, d)]
    arrays = {"query": shards[0], "key": shards[1], "value": shards[2]}
    ring = _ring_api._agree("ring", arrays, Rules(is_causal=args.causal), None, False, args.layout, None)
    _warm_up()
    dist.barrier()
    query, key, value, grad_output = shards
    tracemalloc.start()
    (output, lse), forward, forward_extra = _measured(lambda: _ring.ring_forward(ring, query, key, value, None))
    forward_sent = list(ring.sent)
    backward = backward_extra = grads = None
    if args.backward:
        grads, backward, backward_extra = _measured(
            lambda: _ring.ring_backward(ring, grad_output, query, key, value, output, lse, None)
        )
    tracemalloc.stop()
    mine = {
        "rank": rank, "rows": int(shards[0].shape[-2]), "forward_s": forward, "forward_extra_bytes": forward_extra,
        "forward_messages": forward_sent[0], "forward_bytes": forward_sent[1], "backward_s": backward,
        "backward_extra_bytes": backward_extra, "backward_messages": ring.sent[0] - forward_sent[0],
        "backward_bytes": ring.sent[1] - forward_sent[1], "peak_rss_mib": peak_rss_mib(),
    }  # fmt: skip
    every = _agreement._all_gather_json(dist, None, size, mine)
    mine_out = [output, *(grads if grads is not None else ())]  # O, then dQ, dK, dV with --backward
    whole = [_gathered(dist, size, x, args.layout) for x in mine_out] if args.check else []
    dist.destroy_process_group()
    if rank != 0:
        return None
    report: dict[str, Any] = {"length": args.length, "heads": args.heads, "dim": args.dim, "world_size": size,
                              "causal": args.causal, "layout": args.layout, "dtype": np.dtype(dtype).name,
                              "ranks": every}  # fmt: skip
    if args.check:
        report.update(_checked(whole, q, k, v, d, args.causal))
    print(json.dumps(report))
    return report


def _gathered(dist: Any, size: int, shard: np.ndarray, layout: Literal["contiguous", "zigzag"]) -> np.ndarray:
    """The whole sequence's array (…, L, E) from every rank's ``shard`` of it (float64)."""
    if size == 1:
        return shard.astype(np.float64)
    pieces = _agreement._all_gather_json(dist, None, size, shard.astype(np.float64).tolist())
    return distributed.unshard([np.asarray(p) for p in pieces], layout)


def _checked(
    whole: list[np.ndarray], q: np.ndarray, k: np.ndarray, v: np.ndarray, d: np.ndarray, is_causal: bool
) -> dict[str, Any]:
    """The single-process engine's time and the ring's largest error against it: of the
    output (``whole[0]``) and, when ``whole`` holds them, of dQ, dK and dV (the backward
    of Σ d∘O, the same ``d`` the ranks used)."""
    from ..engine._attention import attention

    result, seconds = time_once(lambda: attention(q, k, v, is_causal=is_causal))
    checked: dict[str, Any] = {"single_process_s": seconds}
    checked["max_abs_error"] = float(np.abs(whole[0] - result.output).max())
    if len(whole) == 4:
        expected, checked["single_process_backward_s"] = time_once(lambda: result.backward(d))
        checked["max_abs_grad_error"] = {
            name: float(np.abs(got - want).max()) for name, got, want in zip("QKV", whole[1:], expected, strict=True)
        }
    return checked


def _measured(run: Callable[[], T]) -> tuple[T, float, int]:
    """One call of ``run`` as it comes, tracemalloc on: its result, seconds, and the peak
    of the allocations above those held before it (bytes)."""
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    result, seconds = time_once(run)
    return result, seconds, tracemalloc.get_traced_memory()[1] - base


def _warm_up() -> None:
    """Compile the fused engine's kernels (numba) before anything is timed or measured."""
    from ..engine._attention import attention
    from ..engine.fused import _engine as _fused

    if _fused.available():
        x = np.ones((1, 8, 8), dtype=np.float32)
        attention(x, x, x, engine="fused").backward(x)
        attention(x.astype(np.float64), x.astype(np.float64), x.astype(np.float64), engine="fused")


if __name__ == "__main__":
    main()
