"""attnlab view: write one self-contained interactive HTML page.

Write an HTML page (no network needed) with the heatmap, a head view, a step-by-step
table for one query, a live scale slider and PNG/SVG export. With --model, --text given
twice shows both texts under the same layer and head, side by side, and their difference
where the tokens align; --generate N shows each generated token's attention over
everything before it, as the decode steps with the KV cache computed it; --rollout adds
attention rollout and flow (attnlab.analysis); --lang zh writes the page's interface in Chinese;
--in-browser puts a BERT encoder's weights and tokenizer in the page, which runs it on what the
reader types (no server: ``attnlab serve`` is the live page that a Python process computes).
With --model, a --text past the page's 4,096 tokens opens on the statistics views instead
(every head's received attention, entropy, sink share, distance profile and role, a query's
top keys; exact from the tiles, no L×L matrix), and says so.

Examples::

  attnlab view --text "小明是个运动达人，他平时很爱打篮球" -o attention.html
  attnlab view --text "小明是个运动达人，他平时很爱打篮球" --lang zh -o zh.html
  attnlab view --text 'the cat sat on the mat' --embed random --num-heads 4 -o heads.html
  attnlab view --model builtin:coref --text "小明是个运动达人，小红是个音乐迷，他平时很爱打篮球" \\
      --text "小明是个运动达人，小红是个音乐迷，她平时很爱弹钢琴" -o two.html
  attnlab view --model gpt2 --text "The cat sat on the" --generate 8 -o generated.html
  attnlab view --model builtin:coref --text "小明喜欢打球，小红喜欢唱歌，她" --in-browser -o typed.html
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..trace import ModelTrace
from ..trace._trace import Trace
from ._inputs import InputError
from ._options import add_lang_option, at_least
from ._page_views import MAX_GENERATE, check_texts, generation_page, pair_of_traces
from ._sequence import add_input_options, trace_from_args

__all__ = ["OPTIONS", "add_options", "run"]


def add_options(parser: argparse.ArgumentParser) -> None:
    """view's own options."""
    parser.add_argument("-o", "--output", required=True, help="the page to write (.html)")
    parser.add_argument(
        "--generate",
        type=at_least(1, MAX_GENERATE),
        metavar="N",
        help=f"with --model of a causal model: generate N tokens (1..{MAX_GENERATE}, greedy, with the KV cache) after "
        "--text and show each one's attention over everything before it",
    )
    parser.add_argument(
        "--rollout",
        action="store_true",
        help="with --model: add attention rollout and flow (Abnar & Zuidema 2020) over every layer",
    )
    parser.add_argument(
        "--in-browser",
        action="store_true",
        help="with --model of a BERT encoder (builtin:coref, all-MiniLM-L6-v2): the page carries the model and runs "
        "it, so that a reader types a sentence and every view is recomputed in the browser, offline, with no server",
    )
    add_lang_option(parser, "en", "the page's interface (headings, labels, notes): en (default) or zh")


OPTIONS = (add_input_options, add_options)  # the option groups, in --help's order


def run(args: argparse.Namespace) -> None:
    """Write the page of the trace the input options name (a model's: every layer unless
    --layer) to -o, once the page's size is known to fit; with two --text, both texts'
    traces; with --generate, the generation's and the whole sequence's. Say on stderr that
    it wrote the file (and its size), and where --truncate cut the text, how."""
    from ..viz._page import check_path, opening, write_page
    from ..viz._views import Views

    check_path(args.output)
    if args.in_browser:
        from ._in_browser import write_in_browser_page

        write_in_browser_page(args)
        return
    check_texts(args, two_allowed=True)
    if args.rollout:
        from ._rollout import require_analysis

        if args.model is None:
            raise InputError("--rollout: expected --model (rollout runs over a model's layers)")
        if args.layer not in (None, "all"):  # before the model loads, generates or runs
            chosen = ",".join(map(str, args.layer)) if isinstance(args.layer, list) else args.layer
            raise InputError(f"--rollout: expected every layer traced (drop --layer), got --layer {chosen}")
        require_analysis("--rollout")
    trace: Trace | ModelTrace
    if args.generate is not None:
        trace, generation = generation_page(args)
        views = Views(generation=generation)
    elif len(getattr(args, "texts", None) or []) == 2:
        trace, second = pair_of_traces(args)
        views = Views(second=second)
    else:
        from ._rollout import check_rollout_size
        from ._statistics_view import opened_for_statistics, statistics_page_if_long

        runner = opened_for_statistics(args)  # --model and one --text: past the page's cap, its statistics
        if runner is not None and statistics_page_if_long(args, runner):
            return

        def rollout_fits(layers: int, _heads: int, tokens: int) -> None:
            check_rollout_size(layers, tokens, "--rollout")

        check = rollout_fits if args.rollout else None
        trace, views = trace_from_args(args, page=True, check=check, runner=runner), Views()
    if args.rollout:
        from ._rollout import rollout_and_flow

        rollout, flow = rollout_and_flow(trace)
        views = Views(views.second, views.generation, rollout, flow)
    write_page(trace, args.output, opening(trace), views, lang=args.lang)
    for note in trace.notes if isinstance(trace, ModelTrace) else []:
        if note.startswith("cut to"):  # --truncate's cut, said where the reader is, not only on the page
            print(f"attnlab view: the text was {note}", file=sys.stderr)
    size = Path(args.output).stat().st_size
    print(f"attnlab view: wrote {args.output} ({size / 1e6:.1f} MB)", file=sys.stderr)
