"""attnlab ring: ring attention over N local processes (torchrun, gloo).

Split one sequence over N processes on this machine (torchrun, the gloo backend) and run
ring attention on it: time, each rank's extra memory and the bytes it sent, and the
error against the single-process engine, of the gradients too with --backward (--check).
Across machines, see docs/guides/ring.md.

Examples::

  attnlab ring --nproc 4 --length 65536 --causal
  attnlab ring --nproc 2 --length 8192 --backward --check
"""

from __future__ import annotations

import argparse
import sys

from ._options import at_least

__all__ = ["OPTIONS", "add_options", "run"]


def add_options(parser: argparse.ArgumentParser) -> None:
    """ring's own options."""
    parser.add_argument("--nproc", type=at_least(1, 64), required=True, help="processes (ranks) on this machine")
    parser.add_argument("--length", type=at_least(1, 2**24), required=True, help="tokens of the whole sequence")
    parser.add_argument("--num-heads", type=at_least(1, 1024), default=1, help="how many heads (default 1)")
    parser.add_argument(  # --num-heads' old name, kept one release
        "--heads", type=at_least(1, 1024), dest="old_heads", default=None, help=argparse.SUPPRESS
    )
    parser.add_argument("--dim", type=at_least(1, 4096), default=64, help="width of each head (default 64)")
    parser.add_argument("--causal", action="store_true", help="token i attends to tokens 0..i only")
    parser.add_argument("--backward", action="store_true", help="also run and time the backward")
    parser.add_argument("--layout", choices=("zigzag", "contiguous"), default="zigzag", help="how the rows are shared")
    parser.add_argument("--float64", action="store_true", help="float64 instead of float32")
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare with the single-process engine, the gradients too with --backward (slow)",
    )


OPTIONS = (add_options,)  # the option groups, in --help's order


def run(args: argparse.Namespace) -> None:
    """Launch the ranks and print their figures."""
    from ..bench import format_ring, launch_ring

    if args.old_heads is not None:  # ring's --heads was a count, where ablate's and plot's name heads
        print("attnlab ring: --heads is deprecated and will be removed in the next release: use --num-heads",
              file=sys.stderr)  # fmt: skip
        args.num_heads = args.old_heads
    print(format_ring(launch_ring(args.nproc, args.length, heads=args.num_heads, dim=args.dim, is_causal=args.causal,
                                  backward=args.backward, layout=args.layout, float64=args.float64,
                                  check=args.check)))  # fmt: skip
