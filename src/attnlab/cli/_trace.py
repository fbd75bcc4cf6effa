"""attnlab trace: every step of attention on your own sequence.

Run the seed's layer on your sequence and print every intermediate.

Examples::

  attnlab trace x.json --d-k 4 --causal
  attnlab trace --text "小明是个运动达人，他平时很爱打篮球"
  echo '[[1, 0], [0, 1]]' | attnlab trace - --tokens 'a b' --format json
"""

from __future__ import annotations

import argparse

from ._options import add_output_options, print_trace
from ._sequence import add_input_options, trace_from_args

__all__ = ["OPTIONS", "run"]


OPTIONS = (add_input_options, add_output_options)  # the option groups, in --help's order


def run(args: argparse.Namespace) -> None:
    """Print the trace the input options name, as the output options ask."""
    title = {"zh": "自注意力追踪", "en": "Self-attention trace"}[args.lang]
    print_trace(trace_from_args(args), args, title)
