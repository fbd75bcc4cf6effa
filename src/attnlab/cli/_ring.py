"""``attnlab ring``: ring attention over N local processes (torchrun, gloo)."""

from __future__ import annotations

import argparse

from ._options import add_command, at_least

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``ring``: the processes, the sequence's shape, and what to run and check."""
    ring = add_command(
        commands,
        "ring",
        run,
        "ring attention over N local processes (torchrun, gloo)",
        "Split one sequence over N processes on this machine (torchrun, the gloo backend) and run ring "
        "attention on it: time, each rank's extra memory and the bytes it sent, and the error against the "
        "single-process engine (--check). Across machines, see README.",
        "  attnlab ring --nproc 4 --length 65536 --causal\n  attnlab ring --nproc 2 --length 8192 --backward --check",
    )
    ring.add_argument("--nproc", type=at_least(1, 64), required=True, help="processes (ranks) on this machine")
    ring.add_argument("--length", type=at_least(1, 2**24), required=True, help="tokens of the whole sequence")
    ring.add_argument("--heads", type=at_least(1, 1024), default=1, help="heads (default 1)")
    ring.add_argument("--dim", type=at_least(1, 4096), default=64, help="width of each head (default 64)")
    ring.add_argument("--causal", action="store_true", help="token i attends to tokens 0..i only")
    ring.add_argument("--backward", action="store_true", help="also run and time the backward")
    ring.add_argument("--layout", choices=("zigzag", "contiguous"), default="zigzag", help="how the rows are shared")
    ring.add_argument("--float64", action="store_true", help="float64 instead of float32")
    ring.add_argument("--check", action="store_true", help="compare with the single-process engine (slow)")


def run(args: argparse.Namespace) -> None:
    """Launch the ranks and print their figures."""
    from ..bench import format_ring, launch_ring

    print(format_ring(launch_ring(args.nproc, args.length, heads=args.heads, dim=args.dim, causal=args.causal,
                                  backward=args.backward, layout=args.layout, float64=args.float64,
                                  check=args.check)))  # fmt: skip
