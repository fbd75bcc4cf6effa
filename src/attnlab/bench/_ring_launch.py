"""``attnlab ring``: start N local ranks of :mod:`attnlab.bench._ring` with torchrun and
turn rank 0's figures into a table."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any

from .._validation import ArgumentError, MissingDependencyError, fail
from ._table import markdown_table

__all__ = ["format_ring", "launch_ring"]

MiB = 2**20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_ring(
    nproc: int, length: int, *, heads: int = 1, dim: int = 64, is_causal: bool = False, backward: bool = False,
    layout: str = "zigzag", float64: bool = False, check: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Run the ring on ``nproc`` local processes; rank 0's report."""
    try:
        import torch.distributed.run  # noqa: F401 - torchrun itself
    except ImportError:
        raise MissingDependencyError("attnlab ring runs on torch.distributed: pip install 'attnlab[torch]'") from None
    if length < nproc:
        raise fail("length", f"at least one row per process ({nproc})", length)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--master-addr=127.0.0.1",
        f"--master-port={_free_port()}",
        "-m",
        "attnlab.bench._ring",
        str(length),
        "--heads",
        str(heads),
        "--dim",
        str(dim),
        "--layout",
        layout,
    ]
    command += [flag for flag, on in (("--causal", is_causal), ("--backward", backward), ("--float64", float64),
                                      ("--check", check)) if on]  # fmt: skip
    threads = str(max(1, (os.cpu_count() or 1) // nproc))  # the cores shared out, no oversubscription
    env = {**os.environ, "ATTNLAB_NUM_THREADS": threads, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    reports = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not reports:
        errors = [line for line in done.stderr.splitlines() if "Error" in line and "attnlab" in line]
        last = (errors or done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ArgumentError(f"ring: the ranks failed (torchrun exit {done.returncode}): {last.strip()}", "ring")
    return dict(json.loads(reports[-1]))


def _backward_cells(rank: dict[str, Any]) -> list[str]:
    """A rank's backward time, extra memory and messages; dashes without a backward."""
    if rank["backward_s"] is None:
        return ["–"] * 3
    return [
        f"{rank['backward_s']:.2f} s",
        f"{rank['backward_extra_bytes'] / MiB:.1f} MiB",
        f"{rank['backward_messages']} msgs, {rank['backward_bytes'] / MiB:.1f} MiB",
    ]


def format_ring(report: dict[str, Any]) -> str:
    """The report as a table: one row per rank."""
    lines = [
        f"ring attention: L={report['length']}, {report['heads']} head(s) of width {report['dim']}, "
        f"{report['dtype']}, {'causal' if report['causal'] else 'not causal'}, {report['layout']} layout, "
        f"{report['world_size']} process(es) (torchrun, gloo)",
    ]
    header = ["rank", "rows", "forward", "extra memory", "sent", "backward", "extra memory", "sent", "peak RSS"]
    body = [
        [r["rank"], r["rows"], f"{r['forward_s']:.2f} s", f"{r['forward_extra_bytes'] / MiB:.1f} MiB",
         f"{r['forward_messages']} msgs, {r['forward_bytes'] / MiB:.1f} MiB", *_backward_cells(r),
         f"{r['peak_rss_mib']:.0f} MiB"] for r in report["ranks"]
    ]  # fmt: skip
    lines += ["", markdown_table(header, body, align="---:")]
    if "max_abs_error" in report:
        lines += ["", f"single-process engine: {report['single_process_s']:.2f} s; the ring's output differs by at "
                  f"most {report['max_abs_error']:.1e}"]  # fmt: skip
    if "max_abs_grad_error" in report:
        grads = ", ".join(f"d{name} {error:.1e}" for name, error in report["max_abs_grad_error"].items())
        lines.append(f"its backward: {report['single_process_backward_s']:.2f} s; the ring's gradients differ by at "
                     f"most {grads}")  # fmt: skip
    return "\n".join(lines)
