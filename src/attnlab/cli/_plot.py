"""attnlab plot: draw the attention weights as a heatmap (PNG, SVG or PDF).

Draw a heatmap of a trace: token labels on both axes, one panel per head. INPUT is what
'attnlab trace' takes, or a trace saved with 'attnlab trace --format json'.

Examples::

  attnlab plot --text "小明是个运动达人，他平时很爱打篮球" -o weights.png
  attnlab plot trace.json --stage scaled --heads 0,2 -o scaled.svg
  attnlab plot --model SmolLM2-135M-Instruct.Q4_1.gguf --text "$(cat long.txt)" --stage profiles -o heads.png
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

from ..trace import ModelTrace
from ._sequence import add_input_options, trace_from_args

__all__ = ["OPTIONS", "add_options", "run"]


def add_options(parser: argparse.ArgumentParser) -> None:
    """plot's own options."""
    parser.add_argument("-o", "--output", required=True, help="the picture to write: .png, .svg or .pdf")
    parser.add_argument(
        "--stage",
        choices=("weights", "scaled", "scores", "rollout", "profiles", "received", "positions"),
        default="weights",
        help="what to draw; rollout (with --model, every layer): attention rollout and flow after --layer "
        "(default the last), computed by attnlab.analysis; profiles, received, positions (with --model, at any "
        "length, or a statistics JSON): from the model's statistics, every head's distance profile and role, the "
        "attention each token receives, entropy and sink share across positions",
    )
    parser.add_argument("--heads", default="all", help="'all' (default) or head indices such as 0,2,5")
    parser.add_argument("--relative", action="store_true", help="colour weights from 0 to the largest, not from 0 to 1")


OPTIONS = (add_input_options, add_options)  # the option groups, in --help's order


def run(args: argparse.Namespace) -> None:
    """Draw the trace the input options name to -o; progress, font warnings and the time
    taken (past a second) go to standard error."""
    from ..viz._plot import MissingFontWarning, check_path, plot, select_heads

    check_path(args.output)
    if args.stage == "rollout":
        _plot_rollout(args)
        return
    if args.stage in ("profiles", "received", "positions"):
        from ._plot_statistics import plot_statistics_from_args

        plot_statistics_from_args(args)
        return

    def heads_there(_layers: int, heads: int, _tokens: int) -> None:
        select_heads(args.heads, heads)  # --heads among the model's, before it runs

    trace = trace_from_args(args, check=heads_there)
    start = time.perf_counter()

    def progress(message: str) -> None:
        print(f"attnlab plot: {message}…", file=sys.stderr, flush=True)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MissingFontWarning)
        plot(trace, args.output, stage=args.stage, heads=args.heads, relative=args.relative, progress=progress)
    for warning in caught:
        print(f"attnlab plot: warning: {warning.message}", file=sys.stderr)
    if time.perf_counter() - start > 1.0:
        print(f"attnlab plot: wrote {args.output} in {time.perf_counter() - start:.1f} s", file=sys.stderr)


def _plot_rollout(args: argparse.Namespace) -> None:
    """--stage rollout: every layer traced, the rollout (and the flow, on short texts)
    computed by attnlab.analysis, --layer's drawn (one index; default the last)."""
    from ..viz._plot_rollout import plot_rollout
    from ._inputs import InputError
    from ._rollout import check_rollout_size, require_analysis, rollout_and_flow

    if args.model is None:
        raise InputError("--stage rollout: expected --model (rollout runs over a model's layers)")
    require_analysis("--stage rollout")
    if isinstance(args.layer, list):
        raise InputError("--stage rollout: expected one --layer to draw (every layer is traced), got a list")
    layer = -1 if args.layer in (None, "all") else args.layer
    args.layer = "all"

    def drawn(layers: int, _heads: int, tokens: int) -> None:
        if not -layers <= layer < layers:
            raise InputError(f"--layer: expected a layer in {-layers}..{layers - 1}, got {layer}")
        check_rollout_size(layers, tokens, "--stage rollout")

    trace = trace_from_args(args, check=drawn)  # the layer drawn, checked before the model runs
    rollout, flow = rollout_and_flow(trace, "--stage rollout")
    tokens = trace.tokens if isinstance(trace, ModelTrace) else trace.labels
    plot_rollout(tokens, rollout, args.output, flow=flow, layer=layer)
