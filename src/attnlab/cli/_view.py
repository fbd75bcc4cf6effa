"""attnlab view: write one self-contained interactive HTML page.

Write an HTML page (no network needed) with the heatmap, a head view, a step-by-step
table for one query, a live scale slider and PNG/SVG export.

Examples::

  attnlab view --text "小明是个运动达人，他平时很爱打篮球" -o attention.html
  attnlab view --text 'the cat sat on the mat' --embed random --num-heads 4 -o heads.html
"""

from __future__ import annotations

import argparse

from ._sequence import add_input_options, trace_from_args

__all__ = ["OPTIONS", "add_options", "run"]


def add_options(parser: argparse.ArgumentParser) -> None:
    """view's own options."""
    parser.add_argument("-o", "--output", required=True, help="the page to write (.html)")


OPTIONS = (add_input_options, add_options)  # the option groups, in --help's order


def run(args: argparse.Namespace) -> None:
    """Write the page of the trace the input options name (a model's: every layer unless
    --layer) to -o, once the page's size is known to fit."""
    from ..viz._page import check_path, write_page

    check_path(args.output)
    write_page(trace_from_args(args, page=True), args.output)
