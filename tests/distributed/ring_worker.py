"""One rank of a ring-attention test, run as its own process by tests/distributed/test_distributed.py:

    python tests/distributed/ring_worker.py SPEC.json RANK WORLD_SIZE PORT OUT_DIR

Each case of the spec builds the whole sequence from its seed, runs ring attention on this
rank's shard, forward and backward, and writes the shards of the results to
OUT_DIR/CASE-RANK.npz; the test gathers them and compares with torch.
"""

from __future__ import annotations

import json
import os
import sys
import time
import tracemalloc
from datetime import timedelta

import numpy as np
import torch.distributed as dist

from attnlab import distributed
from attnlab.distributed import _ring


def whole(case: dict) -> tuple[np.ndarray, ...]:
    """q, k, v and the output's gradient over the whole sequence, from the case's seed."""
    rng = np.random.default_rng(case["seed"])
    B, H, Hk, L, E, Ev = (case[k] for k in ("B", "H", "Hk", "L", "E", "Ev"))
    dtype = np.dtype(case["dtype"])
    q = rng.standard_normal((B, H, L, E)).astype(dtype)
    k = rng.standard_normal((B, Hk, L, E)).astype(dtype)
    v = rng.standard_normal((B, Hk, L, Ev)).astype(dtype)
    d = rng.standard_normal((B, H, L, Ev)).astype(dtype)
    return q, k, v, d


def cut(x: np.ndarray, case: dict, world: int, rank: int) -> np.ndarray:
    """This rank's shard: by the layout, or by explicit contiguous lengths."""
    if case.get("lengths"):
        start = sum(case["lengths"][:rank])
        return x[..., start : start + case["lengths"][rank], :]
    return distributed.shard(x, world, rank, case["layout"])


def main() -> None:
    spec, rank, world, port, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=300)
    )
    with open(spec, encoding="utf-8") as file:
        cases = json.load(file)
    try:
        for case in cases:
            _ring.BLOCK = case.get("block", 2048)
            q, k, v, d = whole(case)
            if case.get("bad_rank") == rank:
                q = q[..., :-1]  # a width that does not fit: this rank's error, every rank's exit
            shards: list = [cut(x, case, world, rank) for x in (q, k, v, d)]
            if case.get("ragged_rank") == rank:
                shards[0] = [[1.0, 2.0], [3.0]]  # not an array at all
            if case.get("empty_rank") == rank:
                shards = [x[..., :0, :] for x in shards]  # no rows
            options = {"is_causal": case["causal"], "enable_gqa": case["H"] != case["Hk"], "layout": case["layout"]}
            if case.get("memory"):
                report = {}
                if rank == 0:
                    tracemalloc.start()
                    distributed_free = tracemalloc.get_traced_memory()[0]
                    from attnlab import attention

                    attention(q, k, v, is_causal=case["causal"], engine="tiled")
                    report["single_extra"] = tracemalloc.get_traced_memory()[1] - distributed_free
                    tracemalloc.stop()
                dist.barrier()
                tracemalloc.start()
                before = tracemalloc.get_traced_memory()[0]
                start = time.perf_counter()
                distributed.ring_attention(*shards[:3], engine="tiled", **options)
                report.update(seconds=time.perf_counter() - start, extra=tracemalloc.get_traced_memory()[1] - before)
                tracemalloc.stop()
                with open(os.path.join(out, f"{case['name']}-{rank}.json"), "w", encoding="utf-8") as f:
                    json.dump(report, f)
                continue
            output, lse = distributed.ring_attention(*shards[:3], return_lse=True, **options)
            grads = distributed.ring_attention_backward(shards[3], *shards[:3], output, lse, **options)
            np.savez(os.path.join(out, f"{case['name']}-{rank}.npz"), output=output, lse=lse, dq=grads.query,
                     dk=grads.key, dv=grads.value)  # fmt: skip
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
