"""``attnlab trace``: every step of attention on the user's own sequence."""

from __future__ import annotations

import argparse

from ._options import add_command, add_output_options, print_trace
from ._sequence import add_input_options, trace_from_args

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``trace``: the input options, then the output options."""
    add_command(
        commands,
        "trace",
        run,
        "every step of attention on your own sequence",
        "Run the seed's layer on your sequence and print every intermediate.",
        "  attnlab trace x.json --d-k 4 --causal\n"
        '  attnlab trace --text "小明是个运动达人，他平时很爱打篮球"\n'
        "  echo '[[1, 0], [0, 1]]' | attnlab trace - --tokens 'a b' --format json",
        [add_input_options, add_output_options],
    )


def run(args: argparse.Namespace) -> None:
    """Print the trace the input options name, as the output options ask."""
    title = {"zh": "自注意力追踪", "en": "Self-attention trace"}[args.lang]
    print_trace(trace_from_args(args), args, title)
