"""One rank of a ring-attention test, run as its own process by tests/distributed/test_distributed.py:

    python tests/distributed/ring_worker.py SPEC.json RANK WORLD_SIZE PORT OUT_DIR

Each case of the spec builds the whole sequence from its seed, runs ring attention on this
rank's shard, forward and backward, and writes the shards of the results to
OUT_DIR/CASE-RANK.npz; the test gathers them and compares with torch. A case with
"expect_error" writes the attnlab error's message (or null) to OUT_DIR/CASE-RANK.json instead
and the worker goes on to the next case, so one launch checks many refusals.
"""

from __future__ import annotations

import json
import os
import sys
import time
import tracemalloc
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from attnlab import AttnlabError, distributed
from attnlab.distributed import _agreement, _ring


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


def variants(case: dict) -> dict:
    """The case's variant keywords, as ring_attention and attnlab.attention take them:
    "window" [left, right], "alignment", "softcap", "alibi" (true: slopes (H,); "batch":
    (B, H)) and "sinks" (true: one logit per head)."""
    H, B = case["H"], case["B"]
    options: dict = {}
    if case.get("window") is not None:
        options["window"] = tuple(case["window"])
    if case.get("alignment"):
        options["causal_alignment"] = case["alignment"]
    if case.get("softcap") is not None:
        options["softcap"] = case["softcap"]
    if case.get("alibi"):
        slopes = 2.0 ** -np.arange(1, H + 1)  # (H,), BLOOM's for 8 heads would be 2^(−h)
        options["alibi_slopes"] = slopes if case["alibi"] is True else slopes * np.arange(1, B + 1)[:, None]  # (B, H)
    if case.get("sinks"):
        options["sinks"] = np.linspace(-1.0, 2.0, H)  # (H,)
    return options


def refused(case: dict, rank: int, shard_rows: int) -> dict:
    """This rank's keywords that a refusal case adds ("bad": {"all" or rank: {...}}): an
    "attn_mask" ("float" or "bool", over this rank's rows and every key), a "mask_mod"
    (true), or any keyword as it is."""
    bad = {**case["bad"].get("all", {}), **case["bad"].get(str(rank), {})}
    keywords: dict = {}
    for name, value in bad.items():
        if name == "attn_mask":
            keywords[name] = np.zeros((shard_rows, case["L"]), dtype=bool if value == "bool" else np.float64)
        elif name == "mask_mod":
            keywords[name] = lambda b, h, q_idx, kv_idx: q_idx >= kv_idx
        else:
            keywords[name] = tuple(value) if name == "window" else value
    return keywords


def refusal(case: dict, shards: list, options: dict, rank: int, out: str) -> None:
    """Run a refusal case: the forward (or, with "call": "backward", a plain forward then
    the backward) with this rank's bad keywords; write the error message, or null."""
    bad = refused(case, rank, shards[0].shape[-2])
    message = None
    if case.get("ahead_rank") == rank:  # as if this rank had made a ring call alone: one call ahead of the others
        _agreement._CALLS[id(dist.group.WORLD)] = _agreement._CALLS.get(id(dist.group.WORLD), 0) + 1
    try:
        if case.get("call") == "backward":
            output, lse = distributed.ring_attention(*shards[:3], return_lse=True, **options)
            distributed.ring_attention_backward(shards[3], *shards[:3], output, lse, **{**options, **bad})
        else:
            distributed.ring_attention(*shards[:3], **{**options, **bad})
    except AttnlabError as e:
        message = str(e)
    with open(os.path.join(out, f"{case['name']}-{rank}.json"), "w", encoding="utf-8") as f:
        json.dump({"error": message}, f)


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
            if case.get("grad_rank") == rank:
                shards[0] = torch.tensor(shards[0], requires_grad=True)  # torch refuses .numpy() of it
            options = {"is_causal": case["causal"], "enable_gqa": case["H"] != case["Hk"], "layout": case["layout"]}
            if "numpy_settings_rank" in case:  # that rank's settings as NumPy's scalars, the others' as Python's
                numpy = case["numpy_settings_rank"] == rank
                options["is_causal"] = np.bool_(case["causal"]) if numpy else case["causal"]
                options["scale"] = np.float64(case["E"] ** -0.5) if numpy else case["E"] ** -0.5
            options.update(variants(case))
            if case.get("expect_error"):
                refusal(case, shards, options, rank, out)
                continue
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
            sinks = {} if grads.sinks is None else {"dsinks": grads.sinks}
            np.savez(os.path.join(out, f"{case['name']}-{rank}.npz"), output=output, lse=lse, dq=grads.query,
                     dk=grads.key, dv=grads.value, **sinks)  # fmt: skip
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
