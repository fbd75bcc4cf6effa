"""Ring attention over torch.distributed (gloo on 127.0.0.1), P processes spawned per test
(tests/distributed/ring_worker.py), each test under a timeout; torch is the oracle."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnlab import distributed  # noqa: E402

WORKER = Path(__file__).with_name("ring_worker.py")
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(
    cases: list[dict[str, Any]], world: int, out: Path, timeout: float = 900
) -> list[subprocess.CompletedProcess]:
    """Run every case on ``world`` spawned ranks; kill them all past ``timeout`` seconds (a
    hang's bound, above the ranks' own 300 s gloo timeout, never what a test asserts)."""
    spec = out / "spec.json"
    spec.write_text(json.dumps(cases), encoding="utf-8")
    port = str(free_port())
    env = {**os.environ, "ATTNLAB_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(WORKER.parent)}
    ranks = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(spec), str(r), str(world), port, str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for r in range(world)
    ]
    deadline = time.monotonic() + timeout
    done = []
    try:
        for process in ranks:
            stdout, stderr = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
            done.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    finally:
        for process in ranks:  # no orphan, whatever happened
            if process.poll() is None:
                process.kill()
                process.wait()
    return done


def case(name: str, **fields: Any) -> dict[str, Any]:
    base = {"seed": len(name), "B": 1, "H": 2, "Hk": 2, "L": 37, "E": 8, "Ev": 8, "dtype": "float64",
            "causal": True, "layout": "contiguous", "block": 5}  # fmt: skip
    return {"name": name, **base, **fields}


def cases_for(world: int) -> list[dict[str, Any]]:
    uneven = [1, 9, 2, 14][:world]
    return [
        case("causal-contiguous"),
        case("causal-zigzag", layout="zigzag"),
        case("full-contiguous-float32", dtype="float32", causal=False, B=2, H=3, Hk=3, Ev=5),
        case("full-zigzag", causal=False, layout="zigzag", block=4096),
        case("gqa-causal-zigzag-float32", dtype="float32", H=4, Hk=2, layout="zigzag", L=29),
        case("gqa-full-float64", H=4, Hk=1, causal=False, block=3),
        case("uneven-causal", lengths=uneven, L=sum(uneven)),
        case("uneven-causal-float32", dtype="float32", lengths=uneven, L=sum(uneven), block=4096),
        case("one-block", block=4096, L=50),
    ]


def oracle(spec: dict[str, Any]) -> dict[str, np.ndarray]:
    """torch's output, lse and gradients over the whole sequence, in float64."""
    from ring_worker import whole

    q, k, v, d = (torch.tensor(x.astype(np.float64), requires_grad=True) for x in whole(spec))
    gqa = spec["H"] != spec["Hk"]
    output = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=spec["causal"], enable_gqa=gqa)
    (output * d).sum().backward()
    group = spec["H"] // spec["Hk"]
    scores = q @ k.repeat_interleave(group, dim=1).transpose(-1, -2) / np.sqrt(spec["E"])
    if spec["causal"]:
        scores = scores.masked_fill(torch.ones(spec["L"], spec["L"]).triu(1).bool(), -torch.inf)
    lse = torch.logsumexp(scores, dim=-1)
    return {"output": output, "lse": lse, "dq": q.grad, "dk": k.grad, "dv": v.grad}


def gathered(out: Path, spec: dict[str, Any], world: int, name: str) -> np.ndarray:
    shards = [np.load(out / f"{spec['name']}-{r}.npz")[name] for r in range(world)]
    axis = -1 if name == "lse" else -2
    if spec.get("lengths"):
        return np.concatenate(shards, axis=axis)
    return distributed.unshard(shards, spec["layout"], axis=axis)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.slow
def test_ring_attention_equals_attention_over_the_whole_sequence(tmp_path, world):
    cases = cases_for(world)
    runs = launch(cases, world, tmp_path)
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
    for spec in cases:
        expected = oracle(spec)
        tolerance = TOLERANCE[spec["dtype"]]
        for name, want in expected.items():
            got = gathered(tmp_path, spec, world, name)
            assert got.dtype == (np.float64 if spec["dtype"] == "float64" else np.float32), (spec["name"], name)
            np.testing.assert_allclose(got, want.detach().numpy(), rtol=tolerance, atol=tolerance,
                                       err_msg=f"{spec['name']}: {name}")  # fmt: skip


@pytest.mark.parametrize(
    "fault, message",
    [
        ({"bad_rank": 2}, "ring_attention: rank 2 of 4: key: expected last dimension"),
        ({"ragged_rank": 2}, "ring_attention: rank 2 of 4: query: expected"),
        ({"empty_rank": 2}, "ring_attention: rank 2 of 4: query: expected a shard of at least one row"),
    ],
    ids=["width", "ragged", "empty"],
)
@pytest.mark.slow
def test_a_bad_shard_on_one_rank_is_the_same_error_on_every_rank(tmp_path, fault, message):
    runs = launch([case("bad", **fault)], 4, tmp_path)  # a rank left waiting would end in gloo's timeout instead
    for rank, run in enumerate(runs):
        assert run.returncode not in (0, None), rank
        last = run.stderr.strip().splitlines()[-1]
        assert message in last, last


@pytest.mark.slow
def test_per_rank_memory_falls_with_the_ring(tmp_path):
    """At P = 4 a rank's extra memory for the whole sequence's attention (measured by
    tracemalloc in the same processes) is the single-process tiled engine's over P, its
    share of the output, plus the blocks in flight: the keys and values it computes with,
    those arriving, and the work of one engine call and one merge on a block, under five
    blocks' bytes (BLOCK rows of keys and values) in all."""
    spec = case("memory", memory=True, H=1, Hk=1, L=32768, E=64, Ev=64, dtype="float32", causal=True, block=2048)
    runs = launch([spec], 4, tmp_path)
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
    reports = [json.loads((tmp_path / f"memory-{r}.json").read_text()) for r in range(4)]
    single = reports[0]["single_extra"]
    worst = max(r["extra"] for r in reports)
    print(f"L=32768 causal float32: single tiled {single / 2**20:.1f} MiB, ring P=4 worst rank {worst / 2**20:.1f} MiB")
    block_bytes = 2048 * (64 + 64) * 4  # one block of keys and values, float32
    assert worst < single / 4 + 5 * block_bytes, (worst, single)
    assert worst < single


def test_shard_and_unshard_are_inverses_in_both_layouts():
    x = np.arange(2 * 23 * 3).reshape(2, 23, 3)
    for layout in distributed.LAYOUTS:
        for world in (1, 2, 3, 5):
            shards = [distributed.shard(x, world, r, layout) for r in range(world)]
            assert sum(s.shape[-2] for s in shards) == 23
            np.testing.assert_array_equal(distributed.unshard(shards, layout), x)
    zigzag = [distributed.shard(np.arange(10)[:, None], 2, r, "zigzag")[:, 0].tolist() for r in range(2)]
    assert zigzag == [[0, 1, 2, 8, 9], [3, 4, 5, 6, 7]]  # chunks 0 and 3, chunks 1 and 2


def test_ring_attention_without_a_process_group_says_so():
    q = np.ones((1, 4, 8))
    with pytest.raises(ValueError, match=r"group: expected an initialised torch\.distributed process group"):
        distributed.ring_attention(q, q, q)


@pytest.mark.slow
def test_the_ring_command_runs_torchrun_and_reports_every_rank():
    command = [sys.executable, "-m", "attnlab", "ring", "--nproc", "2", "--length", "96", "--causal", "--backward",
               "--check"]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "| 0 | 48 |" in run.stdout and "| 1 | 48 |" in run.stdout, run.stdout
    error = float(run.stdout.split("differs by at most ")[1].split()[0])
    assert error < 1e-5
    grads = run.stdout.split("the ring's gradients differ by at most ")[1].split("\n")[0]  # --backward: checked too
    assert [name for name, _ in map(str.split, grads.split(", "))] == ["dQ", "dK", "dV"], grads
    assert all(float(value) < 1e-5 for _, value in map(str.split, grads.split(", "))), grads
    bad = subprocess.run([sys.executable, "-m", "attnlab", "ring", "--nproc", "4", "--length", "3"],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "attnlab ring: error: length: expected at least one row per process (4), got 3"
    )
