"""attnlab view of a text past the page of weights: with --model and one --text whose tokens
pass the page's cap (a head of at most PAGE_LIMITS["head_cells"] cells: 4,096 tokens), the
page shows the model's statistics (:meth:`attnlab.runner.Runner.statistics`, exact from the
tiles, no (L, L) matrix) instead of refusing, and says so in one line."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..runner import Runner

__all__ = ["opened_for_statistics", "statistics_page_if_long"]


def _takes_statistics(args: argparse.Namespace) -> bool:
    """Whether view's options are those of a statistics page: --model and one --text, every layer, nothing
    beside it (two texts, --generate, --rollout and --image are pages of weights)."""
    texts = getattr(args, "texts", None) or []
    return (
        args.model is not None and args.text is not None and len(texts) <= 1 and args.image is None
        and args.layer in (None, "all") and args.generate is None and not args.rollout
    )  # fmt: skip


def opened_for_statistics(args: argparse.Namespace) -> Runner | None:
    """The --model opened, where view's options are those of a statistics page (the page of
    weights then runs on it too); else None."""
    from ._sequence import refuse_for_model
    from ._transformers import checkpoint_of, loaded

    if not _takes_statistics(args):
        return None
    refuse_for_model(args)
    return loaded(checkpoint_of(args), "bare")


def statistics_page_if_long(args: argparse.Namespace, runner: Runner) -> bool:
    """Where --text through ``runner`` passes the page's cap: the model's statistics written
    to -o as the statistics page (its size checked before the model runs), a line on stderr
    saying so, and True; else False (nothing run)."""
    from ..engine._statistics import TOP_K
    from ..viz._statistics_data import page_top_k
    from ..viz._statistics_page import page_cap, past_the_page, write_statistics_page
    from ._transformers import in_cli_words, known_length, say_backend

    length, cap = known_length(runner, args.text, args.truncate), page_cap()
    if length is None or length <= cap:
        return False
    if runner.layers is not None and runner.heads is not None:
        page_top_k(runner.layers * runner.heads, length, TOP_K)  # the page's size, before the model runs
    stats = in_cli_words(lambda: runner.statistics(args.text, truncation=args.truncate, chat=args.chat))
    say_backend(args, runner)
    write_statistics_page(stats, args.output, lang=args.lang, cap=cap)
    print(f"attnlab view: {past_the_page(len(stats.tokens), cap)}: wrote {args.output}", file=sys.stderr)
    return True
