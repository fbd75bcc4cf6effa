"""attnlab ablate: the effect of each attention head, by ablating or patching its output.

Run --model on --text once per head with that head's output zeroed (or replaced by its
mean over positions, or by its output on --patch-text), and print the layers × heads table
of the change in log p(--target) at the last position, or without --target the KL
divergence of the next-token distribution. With -o, also write the page of the text with
that table as a heatmap, whose cells open their head. On a terminal, a progress bar on
stderr counts the heads done, with an estimate of the time left.

Examples::

  attnlab ablate --model gpt2 --text "The cat sat on the" --target " mat"
  attnlab ablate --model gpt2 --text "The cat sat on the" --target " mat" -o heads.html
  attnlab ablate --model gpt2 --text "The cat sat on the" --mode mean --heads 0:1,5:3
  attnlab ablate --model gpt2 --text "The cat sat on the" --patch-text "The dog sat on the" --target " mat"
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from .._json import json_text
from ..analysis._ablate import MODES
from ._options import at_least
from ._transformers import add_model_options, check_page_first, run_on_model, say_backend

if TYPE_CHECKING:
    from ..analysis import Ablation
    from ..runner import Runner

__all__ = ["OPTIONS", "add_options", "run"]

# ablate's argument names, as the options that carry them
_OPTION_OF = {
    "text": "--text",
    "patch_text": "--patch-text",
    "target": "--target",
    "mode": "--mode",
    "heads": "--heads",
}


def _heads(text: str) -> str | list[tuple[int, int]]:
    """An option type: 'all' or LAYER:HEAD pairs separated by commas (0:1,5:3)."""
    if text == "all":
        return text
    try:
        pairs = [tuple(int(n) for n in pair.split(":")) for pair in text.split(",")]
    except ValueError:
        pairs = []
    if not pairs or any(len(pair) != 2 for pair in pairs):
        raise argparse.ArgumentTypeError(f"expected 'all' or LAYER:HEAD pairs such as 0:1,5:3, got {text!r}")
    return [(pair[0], pair[1]) for pair in pairs]


def add_options(parser: argparse.ArgumentParser) -> None:
    """ablate's options."""
    parser.add_argument("--model", required=True, metavar="NAME|DIR", help="a checkpoint directory or hub id")
    parser.add_argument("--text", required=True, help="the text whose next token is predicted")
    parser.add_argument("--target", metavar="TOKEN", help="one token: measure the change in its log-probability")
    parser.add_argument("--mode", choices=MODES, default="zero", help="zero (default) or mean")
    parser.add_argument("--patch-text", help="a text of as many tokens: patch in each head's output on it")
    parser.add_argument("--heads", type=_heads, default="all", help="all (default) or LAYER:HEAD pairs (0:1,5:3)")
    parser.add_argument("--precision", type=at_least(1, 17), default=4, help="significant digits (default 4)")
    add_model_options(
        parser, "also write the page of --text with the layers × heads heatmap; a click on a cell opens that head"
    )


OPTIONS = (add_options,)


def run(args: argparse.Namespace) -> None:
    """Load --model on its backend, ablate --heads and print the table (or its JSON)."""
    from ..analysis import ablate

    def work(runner: Runner) -> Ablation:
        if args.output is not None:
            check_page_first(runner, args.text, "--text")  # before a forward per head
        return ablate(
            runner, args.text, heads=args.heads, mode=args.mode, target=args.target, patch_text=args.patch_text,
            progress=sys.stderr.isatty(),
        )  # fmt: skip

    ran = run_on_model(args, "lm", work, _OPTION_OF)
    if args.output is not None:
        from ..viz._page import check_page_size, view_ablation

        trace = ran.runner.trace(args.text)
        check_page_size(trace, "--text")
        view_ablation(trace, ran.result.to_dict(), args.output)
    say_backend(args, ran.runner)
    if args.format == "json":
        print(json_text(ran.result.to_dict()))
    else:
        print(ran.result.render(precision=args.precision))
