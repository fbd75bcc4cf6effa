"""attnlab trace: every step of attention on your own sequence.

Run the seed's layer on your sequence and print every intermediate.

Examples::

  attnlab trace x.json --d-k 4 --causal
  attnlab trace --text "小明是个运动达人，他平时很爱打篮球"
  echo '[[1, 0], [0, 1]]' | attnlab trace - --tokens 'a b' --format json
  attnlab trace --model builtin:coref --text "小明是个运动达人，他平时很爱打篮球" --stats --out stats.json
"""

from __future__ import annotations

import argparse

from .._exceptions import InputError
from .._validation import output_path
from ._options import STATS_DEFAULTS, add_output_options, add_stats_options, print_output, print_trace
from ._sequence import add_input_options, model_statistics, trace_from_args

__all__ = ["OPTIONS", "run"]


OPTIONS = (add_input_options, add_output_options, add_stats_options)  # the option groups, in --help's order


def run(args: argparse.Namespace) -> None:
    """Print the trace the input options name, as the output options ask; with --stats, the
    model's statistics as JSON, to standard output or --out."""
    if args.stats:
        _statistics(args)
        return
    given = [f"--{name.replace('_', '-')}" for name in (*STATS_DEFAULTS, "out") if getattr(args, name) is not None]
    if given:
        raise InputError(f"{given[0]}: expected --stats with it (the statistics it sizes or writes)")
    title = {"zh": "自注意力追踪", "en": "Self-attention trace"}[args.lang]
    print_trace(trace_from_args(args), args, title)


def _statistics(args: argparse.Namespace) -> None:
    """--stats: the statistics' JSON written to --out (checked before the model runs) or printed."""
    out = None if args.out is None else output_path(args.out, (".json",), "--out")
    text = model_statistics(args).to_json()
    if out is None:
        print_output(text, "json")
    else:
        out.write_text(text, encoding="utf-8")
