"""attnlab experiment: rerun the experiments that answer the article's questions.

List the experiments, or run one: it writes report.md, results.json and PNG figures to
--out.

Examples::

  attnlab experiment list
  attnlab experiment run coref --quick
  attnlab experiment run coref --seed 1
"""

from __future__ import annotations

import argparse

from .._validation import is_real
from ._inputs import InputError
from ._options import at_least

__all__ = ["OPTIONS", "add_options", "run"]


def add_options(parser: argparse.ArgumentParser) -> None:
    """experiment's own options."""
    parser.add_argument("action", choices=("list", "run"), help="list the experiments, or run one")
    parser.add_argument("name", nargs="?", metavar="NAME", help="the experiment to run")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a short run (4 to 77 s on 2 idle cores, coref the longest; longer on a busy machine)",
    )
    parser.add_argument("--seed", type=at_least(0, 2**32 - 1), default=0, help="the seed, 0..2**32-1 (default 0)")
    parser.add_argument("--out", metavar="DIR", help="where to write (default experiments/NAME)")


OPTIONS = (add_options,)  # the option groups, in --help's order


def run(args: argparse.Namespace) -> None:
    """List the experiments, or run NAME and print where it wrote and its metrics as a
    Markdown table (nested metrics joined with ·)."""
    from pathlib import Path

    from ..experiments._run import EXPERIMENTS
    from ..experiments._run import run as run_experiment

    if args.action == "list":
        if args.name is not None:
            raise InputError(f"NAME: expected nothing after 'list' (it lists them all), got {args.name!r}")
        for name, experiment in EXPERIMENTS.items():
            print(f"{name:14} {experiment.summary}")
        return
    if args.name is None:
        raise InputError(f"NAME: expected one of {', '.join(EXPERIMENTS)} after 'run', got nothing")
    out = Path(args.out or f"experiments/{args.name}")
    results = run_experiment(args.name, quick=args.quick, seed=args.seed, out=out)
    print(f"{args.name}: wrote {out / 'report.md'}, {out / 'results.json'} and {', '.join(results['figures'])} "
          f"in {results['seconds']:.0f} s")  # fmt: skip
    print("| metric | value |\n|---|---|")
    _print_rows("", results["metrics"])


def _print_rows(prefix: str, value: object) -> None:
    """The table's rows: each number of ``value``, named by its keys joined with ·."""
    if isinstance(value, dict):
        for key, inner in value.items():
            _print_rows(f"{prefix}{key} · ", inner)
    elif is_real(value):
        print(f"| {prefix.rstrip(' ·')} | {value:.4g} |")
