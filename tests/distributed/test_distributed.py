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

from attnlab import ArgumentError, distributed  # noqa: E402
from oracles import TOLERANCE  # noqa: E402

WORKER = Path(__file__).with_name("ring_worker.py")


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
    paths = [str(WORKER.parent), *filter(None, [os.environ.get("PYTHONPATH")])]  # the caller's attnlab too
    env = {**os.environ, "ATTNLAB_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(paths)}
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
        *variant_cases(uneven),
    ]


VARIANT_KEYS = ("window", "alignment", "softcap", "alibi", "sinks")


def variant_cases(uneven: list[int]) -> list[dict[str, Any]]:
    """Windows (each side alone, both, with causal), bottom-right causal, softcap, ALiBi
    and sinks, across the layouts, uneven shards, GQA and both dtypes; blocks of 5 rows
    (the default) cut the windows' bands into every kind of piece."""
    return [
        case("window-causal", window=[6, 0]),
        case("window-causal-zigzag-bottom-right", window=[4, 0], alignment="bottom_right", layout="zigzag"),
        case("window-both-sides-float32", causal=False, window=[3, 5], dtype="float32"),
        case("window-right-only-zigzag", causal=False, window=[None, 2], layout="zigzag"),
        case("window-left-only", causal=False, window=[7, None], block=3),
        case("window-uneven-gqa", window=[5, 0], lengths=uneven, L=sum(uneven), H=4, Hk=2),
        case("window-one-block", window=[10, 0], block=4096, L=50),
        case("bottom-right-causal-zigzag", alignment="bottom_right", layout="zigzag"),
        case("softcap-alibi-sinks-window", window=[8, 0], softcap=2.5, alibi=True, sinks=True, layout="zigzag"),
        case("alibi-per-batch-float32", alibi="batch", B=2, causal=False, window=[None, 4], dtype="float32"),
        case("sinks-full-uneven", sinks=True, causal=False, lengths=uneven, L=sum(uneven), block=4096),
    ]


def oracle(spec: dict[str, Any]) -> dict[str, np.ndarray]:
    """torch's output, lse and gradients over the whole sequence, in float64."""
    from ring_worker import whole

    if any(spec.get(name) for name in VARIANT_KEYS):
        return variant_oracle(spec)

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


def variant_oracle(spec: dict[str, Any]) -> dict[str, Any]:
    """The variants written out in torch float64 autograd: scores → softcap → ALiBi →
    the causal and window masks at d = j − (i + offset), offset = S − L (0: L = S) for
    bottom-right → the softmax with the sinks' column; its output, lse and gradients."""
    from ring_worker import variants, whole

    q, k, v, d = (torch.tensor(x.astype(np.float64), requires_grad=True) for x in whole(spec))
    keywords = variants(spec)
    group, L = spec["H"] // spec["Hk"], spec["L"]
    scores = q @ k.repeat_interleave(group, dim=1).transpose(-1, -2) / np.sqrt(spec["E"])  # (B, H, L, L)
    if "softcap" in keywords:
        scores = keywords["softcap"] * torch.tanh(scores / keywords["softcap"])
    offset = L - L if keywords.get("causal_alignment") == "bottom_right" else 0  # S − L
    distance = torch.arange(L)[None, :] - (torch.arange(L)[:, None] + offset)  # d, (L, S)
    if "alibi_slopes" in keywords:
        slopes = torch.tensor(keywords["alibi_slopes"], dtype=torch.float64)
        scores = scores - slopes.reshape(*slopes.shape, 1, 1) * distance.abs()
    allowed = torch.ones(L, L, dtype=torch.bool)
    left, right = keywords.get("window", (None, None))
    if spec["causal"]:
        allowed &= distance <= 0
    if left is not None:
        allowed &= distance >= -left
    if right is not None:
        allowed &= distance <= right
    scores = scores.masked_fill(~allowed, -torch.inf)
    sinks = None
    if "sinks" in keywords:
        sinks = torch.tensor(keywords["sinks"], requires_grad=True)
        column = sinks.reshape(1, -1, 1, 1).expand(*scores.shape[:-1], 1)  # the sink's logit in every row
        lse = torch.logsumexp(torch.cat((scores, column), dim=-1), dim=-1)
    else:
        lse = torch.logsumexp(scores, dim=-1)
    output = torch.exp(scores - lse[..., None]) @ v.repeat_interleave(group, dim=1)
    (output * d).sum().backward()
    result = {"output": output, "lse": lse, "dq": q.grad, "dk": k.grad, "dv": v.grad}
    return result if sinks is None else {**result, "dsinks": sinks.grad}


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
        tolerance = TOLERANCE[np.dtype(spec["dtype"])]["ring"]
        for name, want in expected.items():
            got = sinks_gradient(tmp_path, spec, world) if name == "dsinks" else gathered(tmp_path, spec, world, name)
            assert got.dtype == (np.float64 if spec["dtype"] == "float64" else np.float32), (spec["name"], name)
            np.testing.assert_allclose(got, want.detach().numpy(), rtol=tolerance, atol=tolerance,
                                       err_msg=f"{spec['name']}: {name}")  # fmt: skip
        if any(spec.get(name) for name in VARIANT_KEYS):
            same_as_attention(tmp_path, spec, world)


def sinks_gradient(out: Path, spec: dict[str, Any], world: int) -> np.ndarray:
    """The sinks' gradient, which every rank returns whole: the same on each."""
    every = [np.load(out / f"{spec['name']}-{r}.npz")["dsinks"] for r in range(world)]
    for r, other in enumerate(every):
        np.testing.assert_allclose(other, every[0], rtol=1e-12, atol=0, err_msg=f"rank {r}'s dsinks")
    return every[0]


def same_as_attention(out: Path, spec: dict[str, Any], world: int) -> None:
    """The ring's results equal single-process attnlab.attention's with the same keywords
    over the whole sequence: the same semantics of every keyword, positions included."""
    from ring_worker import variants, whole

    from attnlab import attention

    q, k, v, d = whole(spec)
    result = attention(q, k, v, is_causal=spec["causal"], enable_gqa=spec["H"] != spec["Hk"], **variants(spec))
    grads = result.backward(d)
    single = {"output": result.output, "lse": result.lse, "dq": grads.query, "dk": grads.key, "dv": grads.value}
    if grads.sinks is not None:
        single["dsinks"] = grads.sinks
    tolerance = TOLERANCE[np.dtype(spec["dtype"])]["ring"]
    for name, want in single.items():
        got = sinks_gradient(out, spec, world) if name == "dsinks" else gathered(out, spec, world, name)
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance, err_msg=f"{spec['name']}: {name}")


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


def refusal_cases() -> list[tuple[dict[str, Any], str]]:
    """(case, the message every rank must raise) at P = 3: the variants the ring refuses,
    a bad variant on one rank, and ranks that disagree on one."""
    mask_expected = "None (ring attention takes no mask over the whole sequence: use is_causal or window)"
    function_expected = "None (ring attention takes no mask function: its ranks cannot check they share one)"
    window_expected = "(left, right), each a non-negative int or None (unbounded)"
    return [
        (case("float-mask", expect_error=True, bad={"all": {"attn_mask": "float"}}),
         f"ring_attention: rank 0 of 3: attn_mask: expected {mask_expected}, got an attn_mask of dtype float64"),
        (case("bool-mask-backward", expect_error=True, call="backward", bad={"2": {"attn_mask": "bool"}}),
         f"ring_attention_backward: rank 2 of 3: attn_mask: expected {mask_expected}, got an attn_mask of dtype bool"),
        (case("mask-mod-on-rank-1", expect_error=True, bad={"1": {"mask_mod": True}}),
         f"ring_attention: rank 1 of 3: mask_mod: expected {function_expected}, got a function"),
        (case("negative-window", expect_error=True, bad={"2": {"window": [-1, 0]}}),
         f"ring_attention: rank 2 of 3: window: expected {window_expected}, got (-1, 0)"),
        (case("softcap-zero", expect_error=True, bad={"all": {"softcap": 0.0}}),
         "ring_attention: rank 0 of 3: softcap: expected a positive finite number or None, got 0.0"),
        (case("short-sinks", expect_error=True, bad={"0": {"sinks": [0.5]}}),
         "ring_attention: rank 0 of 3: sinks: expected shape (H,) with H=2, for the batch shape (1, 2), "
         "got shape (1,)"),
        (case("alignment", expect_error=True, bad={"1": {"causal_alignment": "bottom_left"}}),
         "ring_attention: rank 1 of 3: causal_alignment: expected one of ('top_left', 'bottom_right'), "
         "got 'bottom_left'"),
        (case("windows-disagree", expect_error=True, window=[3, 0], bad={"2": {"window": [4, 0]}}),
         "ring_attention: the ranks disagree: rank 0 has window=(3, 0), rank 2 window=(4, 0)"),
        (case("torch-requires-grad-on-rank-1", expect_error=True, grad_rank=1, bad={}),
         "ring_attention: rank 1 of 3: query: expected an array, or a tensor without requires_grad (pass "
         "tensor.detach(), as torch's Tensor.numpy() asks), got a Tensor with requires_grad=True"),
        (case("rank-1-one-call-ahead", expect_error=True, ahead_rank=1, bad={}),
         "ring_attention: the ranks are out of step: rank 0 is at its ring call 11 (ring_attention), rank 1 at its "
         "call 12 (ring_attention)"),
    ]  # fmt: skip


@pytest.mark.slow
def test_each_refused_or_bad_variant_is_the_same_one_line_error_on_every_rank(tmp_path):
    """One launch of 3 ranks: each refusal case raises the same one-line error on every rank
    (the ranks' agreement step): a torch tensor with requires_grad on one rank, and a rank
    one call ahead (the sequence guard), among them; the ring still works after them all,
    and NumPy scalars on one rank agree with Python's numbers and bools on the others."""
    refusals = refusal_cases()
    after = case("window-after-the-refusals", window=[6, 0], layout="zigzag")
    numpy_settings = case("numpy-settings-on-rank-1", numpy_settings_rank=1)  # the same by value: agreed
    runs = launch([spec for spec, _ in refusals] + [after, numpy_settings], 3, tmp_path)
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
    for spec, message in refusals:
        errors = [json.loads((tmp_path / f"{spec['name']}-{r}.json").read_text())["error"] for r in range(3)]
        assert errors[0] is not None and errors[0].startswith(message), (spec["name"], errors[0])
        assert "\n" not in errors[0] and errors == [errors[0]] * 3, (spec["name"], errors)
    for spec in (after, numpy_settings):  # the counts of calls met again after the one ahead: the ring pairs
        np.testing.assert_allclose(gathered(tmp_path, spec, 3, "output"), oracle(spec)["output"].detach().numpy(),
                                   rtol=1e-12, atol=1e-12)  # fmt: skip


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


@pytest.mark.slow
def test_the_pieces_cover_the_band_once_and_meet_it_in_every_row(monkeypatch):
    """For random shard lengths, layouts, blocks, causal flags and windows, every rank's
    pieces against every block of every source allow exactly the cells of the whole
    sequence's band (−left <= J − I <= right, J <= I when causal; written here from the
    positions that ``shard`` gives), each once; every row of a piece meets a key; and
    without a window only full and top-left causal pieces (those the fused engine compiles)."""
    from attnlab.distributed import _ring, _shards
    from attnlab.engine.variants import Band

    rng = np.random.default_rng(7)
    for trial in range(200):
        world, layout = int(rng.integers(1, 5)), distributed.LAYOUTS[trial % 2]
        if layout == "contiguous" and trial % 4 == 0:  # uneven runs, positions counted here
            lengths = [int(n) for n in rng.integers(1, 12, world)]
            starts = np.cumsum([0, *lengths])
            positions = [np.arange(starts[r], starts[r + 1]) for r in range(world)]
        else:  # the rows that shard() gives each rank
            whole = np.arange(int(rng.integers(world, 40)))[:, None]
            positions = [distributed.shard(whole, world, r, layout)[:, 0] for r in range(world)]
            lengths = [len(p) for p in positions]
        total, causal = sum(lengths), bool(trial % 3)
        left, right = (None if rng.integers(3) == 0 else int(rng.integers(0, 8)) for _ in range(2))
        window = None if trial % 5 == 0 else (left, right)
        monkeypatch.setattr(_ring, "BLOCK", int(rng.integers(1, 6)))
        band = Band.of(causal, window, 0, (total, total))
        runs = _shards.runs_of(lengths, layout)
        for rank in range(world):
            ring = _ring.Ring(None, None, rank, world, lengths, runs, causal, None, False, band)
            for source in range(world):
                for j in range(ring.blocks(source)):
                    first = j * _ring.BLOCK
                    rows = min(_ring.BLOCK, lengths[source] - first)
                    distance = positions[source][None, first : first + rows] - positions[rank][:, None]  # J − I
                    want = np.ones(distance.shape, dtype=bool)
                    if causal:
                        want &= distance <= 0
                    if window is not None and left is not None:
                        want &= distance >= -left
                    if window is not None and right is not None:
                        want &= distance <= right
                    cover = np.zeros(distance.shape, dtype=int)
                    for piece in _ring.pieces(ring, source, first, rows):
                        block = distance[piece.rows, piece.cols]
                        assert block[0, 0] == piece.shift
                        i, k = np.arange(block.shape[0])[:, None], np.arange(block.shape[1])[None, :]
                        shifted = (band.lowest <= k - i + piece.shift) & (k - i + piece.shift <= band.highest)
                        allowed = {"full": np.ones(block.shape, dtype=bool), "causal": k <= i, "band": shifted}
                        allowed = allowed[piece.kind]
                        assert allowed.any(axis=1).all(), piece
                        assert window is not None or piece.kind != "band", piece
                        cover[piece.rows, piece.cols] += allowed
                    np.testing.assert_array_equal(cover, want.astype(int), err_msg=f"{lengths} {layout} {window}")


def test_shard_and_unshard_are_inverses_in_both_layouts():
    x = np.arange(2 * 23 * 3).reshape(2, 23, 3)
    for layout in distributed.LAYOUTS:
        for world in (1, 2, 3, 5):
            shards = [distributed.shard(x, world, r, layout) for r in range(world)]
            assert sum(s.shape[-2] for s in shards) == 23
            np.testing.assert_array_equal(distributed.unshard(shards, layout), x)
    zigzag = [distributed.shard(np.arange(10)[:, None], 2, r, "zigzag")[:, 0].tolist() for r in range(2)]
    assert zigzag == [[0, 1, 2, 8, 9], [3, 4, 5, 6, 7]]  # chunks 0 and 3, chunks 1 and 2


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_unshard_of_shards_of_different_widths_names_shards_and_their_shapes(layout):
    shards = [np.zeros((2, 4, 8)), np.zeros((2, 3, 6))]  # the rows (axis -2) may differ; the width may not
    with pytest.raises(ArgumentError, match=r"^shards: expected arrays of one shape but along axis -2 .*"
                       r"got shapes \(2, 4, 8\), \(2, 3, 6\)$"):  # fmt: skip
        distributed.unshard(shards, layout)
    with pytest.raises(ArgumentError, match=r"^shards: .*got shapes \(4, 8\), \(2, 4, 8\)$"):
        distributed.unshard([np.zeros((4, 8)), np.zeros((2, 4, 8))], layout)


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


@pytest.mark.parametrize(
    ("layout", "lengths", "expected"),
    [
        # 6 rows in 4 chunks of 2, 2, 1, 1: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2
        ("zigzag", [4, 2], [3, 3]),
        # 6 rows over 2 ranks: 3 and 3; 5 rows: 3 and 2 (the longer first)
        ("contiguous", [1, 5], [3, 3]),
        ("contiguous", [4, 1], [3, 2]),
        ("contiguous", [2, 3], [3, 2]),
        # 7 rows in 6 chunks of 2, 1, 1, 1, 1, 1: ranks hold 2 + 1, 1 + 1, 1 + 1
        ("zigzag", [2, 2, 3], [3, 2, 2]),
    ],
)
def test_unshard_refuses_lengths_shard_cannot_give_naming_both(layout, lengths, expected):
    x = np.arange(float(sum(lengths)))[:, None]
    cuts = np.cumsum([0, *lengths])
    shards = [x[cuts[r] : cuts[r + 1]] for r in range(len(lengths))]
    given = ", ".join(map(str, lengths))
    want = ", ".join(map(str, expected))
    with pytest.raises(ArgumentError, match=rf"^shards: expected lengths \[{want}\] along axis -2 .*{layout}\), "
                       rf"got lengths \[{given}\]$"):  # fmt: skip
        distributed.unshard(shards, layout)


def test_unshard_takes_the_lengths_shard_gives_written_by_hand():
    x = np.arange(7.0)[:, None]
    # zigzag over 2 ranks: chunks of 2, 2, 2, 1 rows; rank 0 holds rows 0-1 and 6, rank 1 rows 2-5
    zigzag = [x[[0, 1, 6]], x[[2, 3, 4, 5]]]
    np.testing.assert_array_equal(distributed.unshard(zigzag, "zigzag"), x)
    np.testing.assert_array_equal(distributed.unshard([x[:4], x[4:]], "contiguous"), x)  # 4 and 3 rows
