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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._json import json_text
from ._options import at_least
from ._transformers import (
    _quiet,
    add_model_options,
    check_page_first,
    load_on_attnlab,
    run_on_model,
    say_backend,
    tokenizer_of,
    transformers_for,
)

if TYPE_CHECKING:
    from ..analysis import HeadTypes

__all__ = ["OPTIONS", "add_options", "run"]

# head_types' argument names, as the options that carry them
_OPTION_OF = {
    "text": "--text", "repeat": "--repeat", "seed": "--seed", "threshold": "--threshold", "k": "--top",
    "tokenizer": "--model", "model_or_trace": "--model",
}  # fmt: skip


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

    def work(model: Any, tokenizer: Any) -> HeadTypes:
        if args.output is not None and args.text is not None:
            check_page_first(model, tokenizer, args.text, "--text")  # before the scores' forwards
        return head_types(model, args.text, repeat=args.repeat, seed=args.seed, tokenizer=tokenizer)

    ran = run_on_model(args, _transformers_model, work, _OPTION_OF)
    if args.output is not None:
        _write_page(args, ran.model, ran.tokenizer, ran.result.to_dict(top=args.top, threshold=args.threshold))
    say_backend(args, ran.backend, ran.model_type)
    if args.format == "json":
        print(json_text(ran.result.to_dict(top=args.top, threshold=args.threshold)))
    else:
        print(ran.result.render(top=args.top, threshold=args.threshold))


def _write_page(args: argparse.Namespace, model: Any, tokenizer: Any, types: dict[str, Any]) -> None:
    """--output: the page of the text the scores were read on (every layer), with the head types."""
    from ..viz._page import check_page_size, opening, write_page
    from ..viz._views import Views

    if tokenizer is None:
        trace = model.trace(types["ids"])
    else:
        from .. import hf
        from ..hf._torch import torch

        trace = hf.trace(model, {"input_ids": torch.tensor([types["ids"]])}, tokenizer=tokenizer)
    check_page_size(trace, "--text")
    write_page(trace, args.output, opening(trace), Views(head_types=types))


def _transformers_model(args: argparse.Namespace, directory: Path) -> tuple[Any, Any]:
    """The checkpoint's base model on attnlab's backend, and its tokenizer."""
    transformers = transformers_for(args, directory, "heads scores")
    with _quiet(transformers):
        model = load_on_attnlab(transformers.AutoModel, directory, f"--model: transformers cannot load {args.model}")
        tokenizer = tokenizer_of(transformers, args, directory)
    return model, tokenizer
