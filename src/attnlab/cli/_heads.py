"""attnlab heads: what kind of head each attention head is.

Run --model on --text (default: a short English text) and on n random tokens repeated
(--repeat, drawn with --seed), and print each kind's strongest heads (previous-token,
induction, first-token sink, self; in an encoder [CLS], [SEP], punctuation) and the
layers × heads table of each head's dominant kind, or all the scores as JSON. With -o,
also write the page of --text whose model view outlines and labels each head by its kind.

Examples::

  attnlab heads --model gpt2
  attnlab heads --model gpt2 --text "The cat sat on the mat." --top 5
  attnlab heads --model sentence-transformers/all-MiniLM-L6-v2 --format json
  attnlab heads --model gpt2 --repeat 0 --threshold 0.3
  attnlab heads --model gpt2 --text "The cat sat on the mat." -o heads.html
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .._json import json_text
from ._options import at_least
from ._transformers import add_model_options, check_page_first, run_on_model, say_backend

if TYPE_CHECKING:
    from ..analysis import HeadTypes
    from ..runner import Runner

__all__ = ["OPTIONS", "add_options", "run"]

# head_types' argument names, as the options that carry them
_OPTION_OF = {"text": "--text", "repeat": "--repeat", "seed": "--seed", "threshold": "--threshold", "k": "--top"}


def _fraction(text: str) -> float:
    """An option type: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def add_options(parser: argparse.ArgumentParser) -> None:
    """heads' options."""
    parser.add_argument("--model", required=True, metavar="NAME|DIR", help="a checkpoint directory or hub id")
    parser.add_argument("--text", help="the text the scores but induction are read on (default: a short English text)")
    parser.add_argument(
        "--repeat", type=at_least(0, 4096), metavar="N",
        help="induction: N random tokens, twice, after the first token (default: 50, or the most the model's "
        "positions and vocabulary take, such as 31 for builtin:coref's 64 positions; 0: no induction score)",
    )  # fmt: skip
    parser.add_argument("--seed", type=at_least(0, 2**63 - 1), default=0, help="the random tokens' seed (default 0)")
    parser.add_argument("--top", type=at_least(1, 1000), default=3, metavar="K", help="heads listed per kind (3)")
    parser.add_argument(
        "--threshold", type=_fraction, default=0.5,
        help="a head whose every score is below it has no dominant kind (default 0.5)",
    )  # fmt: skip
    add_model_options(
        parser, "also write the page of --text (every layer), its model view's heads labelled by their kind"
    )


OPTIONS = (add_options,)


def run(args: argparse.Namespace) -> None:
    """Load --model on its backend, score every head and print the table (or its JSON)."""
    from ..analysis import head_types

    def work(runner: Runner) -> HeadTypes:
        if args.output is not None and args.text is not None:
            check_page_first(runner, args.text, "--text")  # before the scores' forwards
        return head_types(runner, args.text, repeat=args.repeat, seed=args.seed)

    ran = run_on_model(args, "bare", work, _OPTION_OF)
    types = ran.result.to_dict(top=args.top, threshold=args.threshold)
    if args.output is not None:
        from ..viz._page import check_page_size, opening, write_page
        from ..viz._views import Views

        trace = ran.runner.trace(types["ids"])  # the text the scores were read on, every layer
        check_page_size(trace, "--text")
        write_page(trace, args.output, opening(trace), Views(head_types=types))
    say_backend(args, ran.runner)
    if args.format == "json":
        print(json_text(types))
    else:
        print(ran.result.render(top=args.top, threshold=args.threshold))
