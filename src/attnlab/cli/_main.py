"""The ``attnlab`` command: a thin layer over the library.

Every user error (the library's :class:`AttnlabError`, a file that cannot be read or
written) ends in one line on standard error and exit status 2, with the library's
argument names translated into the options that carry them. Anything else is a bug and
shows its traceback.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import NoReturn

import numpy as np

from .. import __version__
from .._validation import AttnlabError, output_path
from ..layers._multihead import MultiheadAttention
from ..layers._self_attention import SelfAttention
from ..reference import SelfAttention as ReferenceSelfAttention
from ..trace import ModelTrace
from ..trace._trace import LANGUAGES, Trace
from ._inputs import (
    InputError,
    as_sequence,
    embed_tokens,
    parse_tokens,
    read_json_or_matrix,
    source_name,
    split_text,
)

__all__ = ["build_parser", "main"]

# What a trace can hold: its (L, L) matrices are kept whole, several per head, so L²·H
# is capped before any work (2²⁴ float64 scores are 128 MiB an array); widths likewise.
MAX_SCORES = 2**24
MAX_WIDTH = 2**16
MAX_PAGE_SCORES = 2**21  # what the page computes and draws in a few seconds (a model's page: its bytes)
# --d-k's default: the input's width up to this. The weights are drawn in pure Python as
# the seed draws them, d_model·d_k numbers each, so a 2000-token one-hot text with
# d_k = 2000 would draw 12 million of them.
DEFAULT_MAX_D_K = 64

# The seed article's demonstration: four one-hot tokens of width 8, d_k = 6.
DEMO_D_MODEL, DEMO_D_K = 8, 6
DEMO_X = [[1.0 if j == i else 0.0 for j in range(DEMO_D_MODEL)] for i in range(4)]


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _scale(text: str) -> float | str:
    if text in ("sqrt", "none"):
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'sqrt', 'none' or a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            bounds = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
            raise argparse.ArgumentTypeError(f"expected an integer {bounds}, got {value}")
        return value

    return parse


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="text (default) or json (full precision)"
    )
    parser.add_argument("--precision", type=_at_least(0, 17), default=4, help="decimals in the text (default 4)")
    parser.add_argument("--lang", choices=LANGUAGES, default="zh", help="labels: zh (default, as the article) or en")


def _layer(text: str) -> int | str:
    if text == "all":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a layer index or 'all', got {text!r}") from None


def add_input_options(parser: argparse.ArgumentParser) -> None:
    """The options that say which sequence to run and how (shared with plot and view)."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "input", nargs="?", metavar="INPUT", help="a .json (list of rows), .csv or .npy file, or - for JSON on stdin"
    )
    source.add_argument("--text", help="a sentence: split on spaces, or into characters when it has none")
    parser.add_argument(
        "--embed",
        choices=("onehot", "random"),
        default="onehot",
        help="with --text: one-hot vectors (default) or seeded Gaussian vectors of --d-model width",
    )
    parser.add_argument(
        "--d-model", type=_at_least(1, MAX_WIDTH), default=16, help="width of --embed random vectors (default 16)"
    )
    parser.add_argument(
        "--d-k",
        type=_at_least(1, MAX_WIDTH),
        help=f"width of Q, K and V (default: the input's width, at most {DEFAULT_MAX_D_K})",
    )
    parser.add_argument(
        "--seed", type=_at_least(0, 2**63 - 1), default=42, help="seed of the weights (default 42, the article's)"
    )
    parser.add_argument(
        "--scale", type=_scale, default="sqrt", help="sqrt (1/√d_k, default), none (1) or a number multiplying Q·Kᵀ"
    )
    parser.add_argument("--causal", action="store_true", help="token i attends to tokens 0..i only")
    parser.add_argument("--tokens", help="labels of the rows, separated by spaces")
    parser.add_argument(
        "--num-heads",
        type=_at_least(1),
        default=1,
        help="1 (default): the seed's layer; more: a MultiheadAttention of that many heads "
        "(they must divide the input's width, and each head is width/N wide: no --d-k)",
    )
    model = parser.add_argument_group("a pretrained model (pip install 'attnlab[models]')")
    model.add_argument(
        "--model",
        metavar="NAME|DIR",
        help="run --text through a GPT-2, BERT, Llama or Qwen2 checkpoint: a Hugging Face hub id "
        "(the local cache first) or a directory",
    )
    model.add_argument(
        "--layer",
        type=_layer,
        help="with --model: a layer index (negative counts from the end) or 'all' "
        "(default: all for view, the last for trace and plot)",
    )


def model_trace_from_args(args: argparse.Namespace, default_layer: int | str, page: bool = False) -> ModelTrace:
    """Run the --model on --text and trace --layer. What the trace (L²·heads·layers scores)
    or the page (``page``: q, k and v of every head and layer) would hold is checked after
    tokenizing, before the forward."""
    from ..models import load
    from ..viz._page import MAX_MODEL_PAGE_SCORES, MAX_PAGE_BYTES, page_bytes

    _refuse(args, f"--model {args.model} fixes the weights, the embedding and the scale")
    if args.input is not None or args.text is None:
        raise InputError("--model: expected --text with the sentence to run, got an input file")
    model = load(args.model)
    if model.tokenizer is None:
        raise InputError(f"--model: {args.model} has no tokenizer (tokenizer.json, vocab.txt or vocab.json)")
    ids = model.tokenizer.encode(args.text)
    if len(ids) == 0:
        raise InputError(f"--text: expected a text of at least one token, got {args.text!r}")
    layer = default_layer if args.layer is None else args.layer
    layers = None if layer == "all" else layer
    c = model.config
    count = c.num_layers if layers is None else 1
    fewer = "--layer N" if layers is None else ""
    _check_size(len(ids), c.num_heads * count, MAX_SCORES, "a trace", fewer)
    size = page_bytes(len(ids), c.num_heads, count, (c.head_dim, c.head_dim))  # its numbers rounded to fit
    scores = len(ids) ** 2 * c.num_heads * count
    if page and (size > MAX_PAGE_BYTES or scores > MAX_MODEL_PAGE_SCORES):
        what = (
            f"a page of about {size / 1e6:.1f} MB, at most {MAX_PAGE_BYTES / 1e6:g} MB"
            if size > MAX_PAGE_BYTES
            else f"{scores:,} scores for the page to compute, at most {MAX_MODEL_PAGE_SCORES:,}"
        )
        raise InputError(
            f"{len(ids)} tokens × {count} layer{'s' * (count > 1)} × {c.num_heads} heads: {what} (what a browser "
            "opens in a few seconds); " + ("use --layer N or fewer tokens" if fewer else "use fewer tokens")
        )
    return model.trace(ids, layers=layers)


def _refuse(args: argparse.Namespace, reason: str) -> None:
    """Options that cannot change a trace whose numbers are fixed already."""
    fixed = {
        "--causal": args.causal,
        "--num-heads": args.num_heads != 1,
        "--d-k": args.d_k is not None,
        "--scale": args.scale != "sqrt",
        "--seed": args.seed != 42,
        "--embed": args.embed != "onehot",
        "--d-model": args.d_model != 16,
        "--tokens": args.model is not None and args.tokens is not None,
    }
    for option, given in fixed.items():
        if given:
            raise InputError(f"{option}: {reason}; {option} cannot change it")


def trace_from_args(
    args: argparse.Namespace, max_scores: int = MAX_SCORES, holder: str = "a trace"
) -> Trace | ModelTrace:
    """Run the layer on the sequence the options name, or load a saved trace (a JSON
    object from ``attnlab trace --format json``). ``holder`` keeps the L×L matrices and
    takes at most ``max_scores`` (L²·heads): checked before any work."""
    tokens: list[str] | None
    if args.text is not None:
        if args.layer is not None:
            raise InputError("--layer: expected --model or a saved model's trace with it; this input has one layer")
        words = split_text(args.text)
        _check_size(len(words), args.num_heads, max_scores, holder)
        X = embed_tokens(words, args.embed, args.d_model, args.seed)
        tokens = parse_tokens(args.tokens, len(words)) or words
    else:
        data = read_json_or_matrix(args.input)
        if isinstance(data, dict):
            saved = _saved_trace(data, args)
            if isinstance(saved, ModelTrace):
                layers = len(saved.layers)
                # held already; a page of it is checked by its size in bytes (write_page)
                _check_size(len(saved.tokens), saved.num_heads * layers, MAX_SCORES, "a trace", "--layer N")
            else:
                _check_size(len(saved.inputs), saved.num_heads, max_scores, holder)
            return saved
        if args.layer is not None:
            raise InputError("--layer: expected --model or a saved model's trace with it; this input has one layer")
        X, names = as_sequence(data, args.input)
        _check_size(len(X), args.num_heads, max_scores, holder)
        tokens = parse_tokens(args.tokens, len(X)) or names
    if X.shape[1] > MAX_WIDTH:
        raise InputError(f"the input's width: expected at most {MAX_WIDTH}, got {X.shape[1]}")
    scale = {"sqrt": None, "none": 1.0}.get(args.scale, args.scale)
    if args.num_heads > 1:
        if args.d_k is not None:
            raise InputError(
                f"--d-k: with --num-heads {args.num_heads} each head is the input's width / {args.num_heads} wide; "
                "drop --d-k, or use one head"
            )
        if X.shape[1] % args.num_heads:
            raise InputError(f"--num-heads: expected a divisor of the input's width {X.shape[1]}, got {args.num_heads}")
        heads = MultiheadAttention(X.shape[1], args.num_heads, seed=args.seed, dtype=np.float64)
        return heads.trace(X, is_causal=args.causal, scale=scale, tokens=tokens)
    layer = SelfAttention(X.shape[1], args.d_k or min(X.shape[1], DEFAULT_MAX_D_K), seed=args.seed)
    return layer.trace(X, is_causal=args.causal, scale=scale, tokens=tokens)


def _check_size(length: int, heads: int, max_scores: int, holder: str, fewer: str = "") -> None:
    if length**2 * heads > max_scores:
        raise InputError(
            f"{length} tokens × {heads} heads: {holder} keeps L×L matrices per head, at most "
            f"{max_scores:,} scores (L²·heads); use fewer tokens or heads" + (f", or {fewer}" if fewer else "")
        )


def _saved_trace(data: dict[str, object], args: argparse.Namespace) -> Trace | ModelTrace:
    """A trace saved by ``attnlab trace --format json``: a layer's or a model's. Only --tokens
    (a layer's) and --layer (a model's) can change what is shown."""
    _refuse(args, f"{args.input} is a saved trace, already computed")
    source = source_name(args.input)
    if "layers" in data:
        if args.tokens is not None:
            raise InputError(f"--tokens: {args.input} is a saved model's trace; its tokens are the model's")
        saved = ModelTrace.from_dict(data, source)
        if args.layer not in (None, "all"):
            wanted = args.layer % saved.num_layers if -saved.num_layers <= args.layer < saved.num_layers else None
            if wanted not in saved.layers:
                raise InputError(f"--layer: expected one of the saved layers {sorted(saved.layers)}, got {args.layer}")
            saved.layers = {wanted: saved.layers[wanted]}
        return saved
    if args.layer is not None:
        raise InputError(f"--layer: {args.input} is the trace of one layer; --layer needs a model's trace")
    trace = Trace.from_dict(data, source)
    trace.tokens = parse_tokens(args.tokens, len(trace.inputs)) or trace.tokens
    return trace


def _print_trace(trace: Trace | ModelTrace, args: argparse.Namespace, title: str | None = None) -> None:
    if args.format == "json":
        print(trace.to_json())
    elif isinstance(trace, ModelTrace):
        print(trace.render(lang=args.lang, precision=args.precision))
    else:
        print(trace.render(lang=args.lang, precision=args.precision, title=title))


def _demo(args: argparse.Namespace) -> None:
    steps = ReferenceSelfAttention(DEMO_D_MODEL, DEMO_D_K).trace(DEMO_X)
    _print_trace(Trace.from_reference(DEMO_X, steps), args)


def _trace(args: argparse.Namespace) -> None:
    title = {"zh": "自注意力追踪", "en": "Self-attention trace"}[args.lang]
    _print_trace(model_trace_from_args(args, -1) if args.model else trace_from_args(args), args, title)


def _plot(args: argparse.Namespace) -> None:
    from ..viz._plot import MissingFontWarning, check_path, plot

    check_path(args.output)
    trace = model_trace_from_args(args, -1) if args.model else trace_from_args(args)
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


def _view(args: argparse.Namespace) -> None:
    from ..viz._page import check_path, write_page

    check_path(args.output)
    if args.model:
        write_page(model_trace_from_args(args, "all", page=True), args.output)
    else:
        write_page(trace_from_args(args, MAX_PAGE_SCORES, "a page"), args.output)


def _bench(args: argparse.Namespace) -> None:
    from ..bench._engines import main as bench

    for option, path in (("--json", args.json), ("--engine-table", args.engine_table)):  # before minutes of work
        if path is not None:
            output_path(path, (".json",), option)
    if args.models:
        from ..bench._models import format_models, run_models

        results = run_models(repeat=args.repeat or 3)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as file:
                json.dump(results, file, indent=1)
        print(format_models(results))
        return
    if args.engine_table:
        from ..bench._engines import engine_report

        print(engine_report(args.engine_table, repeat=args.repeat or 3))
        return
    print(bench(quick=args.quick, json_path=args.json, repeat=args.repeat))


def _ring(args: argparse.Namespace) -> None:
    from ..bench._ring_launch import format_ring, launch_ring

    print(format_ring(launch_ring(args.nproc, args.length, heads=args.heads, dim=args.dim, causal=args.causal,
                                  backward=args.backward, layout=args.layout, float64=args.float64,
                                  check=args.check)))  # fmt: skip


def _experiment(args: argparse.Namespace) -> None:
    from pathlib import Path

    from ..experiments._run import EXPERIMENTS, run

    if args.action == "list":
        for name, experiment in EXPERIMENTS.items():
            print(f"{name:14} {experiment.summary}")
        return
    if args.name is None:
        raise InputError(f"NAME: expected one of {', '.join(EXPERIMENTS)} after 'run', got nothing")
    out = Path(args.out or f"experiments/{args.name}")
    results = run(args.name, quick=args.quick, seed=args.seed, out=out)
    print(f"{args.name}: wrote {out / 'report.md'}, {out / 'results.json'} and {', '.join(results['figures'])} "
          f"in {results['seconds']:.0f} s")  # fmt: skip
    print("| metric | value |\n|---|---|")

    def rows(prefix: str, value: object) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                rows(f"{prefix}{key} · ", inner)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            print(f"| {prefix.rstrip(' ·')} | {value:.4g} |")

    rows("", results["metrics"])


def _command(
    commands: argparse._SubParsersAction,
    name: str,
    run: Callable[[argparse.Namespace], None],
    summary: str,
    description: str,
    examples: str,
    options: Sequence[Callable[[argparse.ArgumentParser], None]] = (),
) -> argparse.ArgumentParser:
    """Add subcommand ``name``: its help, its examples below the options, the shared option groups."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=description,
        epilog=f"examples:\n{examples}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for add_options in options:
        add_options(parser)
    parser.set_defaults(run=run)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="attnlab",
        description="Self-attention, step by step: the seed article's layer and more.",
        epilog='examples:\n  attnlab demo\n  attnlab trace --text "小明是个运动达人，他平时很爱打篮球" --lang en\n'
        "  attnlab COMMAND --help",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    _command(
        commands,
        "demo",
        _demo,
        "the article's demonstration, every step",
        "Print the seed article's demo: 4 one-hot tokens, d_model=8, d_k=6, seed 42.",
        "  attnlab demo --lang en",
        [_add_output_options],
    )
    _command(
        commands,
        "trace",
        _trace,
        "every step of attention on your own sequence",
        "Run the seed's layer on your sequence and print every intermediate.",
        "  attnlab trace x.json --d-k 4 --causal\n"
        '  attnlab trace --text "小明是个运动达人，他平时很爱打篮球"\n'
        "  echo '[[1, 0], [0, 1]]' | attnlab trace - --tokens 'a b' --format json",
        [add_input_options, _add_output_options],
    )
    plot = _command(
        commands,
        "plot",
        _plot,
        "draw the attention weights as a heatmap (PNG, SVG or PDF)",
        "Draw a heatmap of a trace: token labels on both axes, one panel per head. "
        "INPUT is what 'attnlab trace' takes, or a trace saved with 'attnlab trace --format json'.",
        '  attnlab plot --text "小明是个运动达人，他平时很爱打篮球" -o weights.png\n'
        "  attnlab plot trace.json --stage scaled --heads 0,2 -o scaled.svg",
        [add_input_options],
    )
    plot.add_argument("-o", "--output", required=True, help="the picture to write: .png, .svg or .pdf")
    plot.add_argument("--stage", choices=("weights", "scaled", "scores"), default="weights", help="what to draw")
    plot.add_argument("--heads", default="all", help="'all' (default) or head indices such as 0,2,5")
    plot.add_argument("--relative", action="store_true", help="colour weights from 0 to the largest, not from 0 to 1")
    view = _command(
        commands,
        "view",
        _view,
        "write one self-contained interactive HTML page",
        "Write an HTML page (no network needed) with the heatmap, a head view, a step-by-step "
        "table for one query, a live scale slider and PNG/SVG export.",
        '  attnlab view --text "小明是个运动达人，他平时很爱打篮球" -o attention.html\n'
        "  attnlab view --text 'the cat sat on the mat' --embed random --num-heads 4 -o heads.html",
        [add_input_options],
    )
    view.add_argument("-o", "--output", required=True, help="the page to write (.html)")
    bench = _command(
        commands,
        "bench",
        _bench,
        "time attnlab's engines against NumPy and torch, side by side",
        "Time attnlab's engines against torch's SDPA in one run: shape classes from many short heads to "
        "decoding one token against 65,536 keys, forward and forward+backward; then a length sweep "
        "(float32, B=1, H=8, E=64, L = S from 256 to 4096) with textbook NumPy attention too.",
        "  attnlab bench --quick\n  attnlab bench --json bench.json\n"
        "  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE attnlab bench   # let OpenBLAS pick its fastest kernels\n"
        "  OPENBLAS_CORETYPE=Haswell NPY_DISABLE_CPU_FEATURES='X86_V4 AVX512_ICL AVX512_SPR' \\\n"
        "  NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=+avx2,+fma ATEN_CPU_CAPABILITY=avx2 \\\n"
        "  MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 attnlab bench   # AVX2 kernels only",
    )
    bench.add_argument(
        "--quick", action="store_true", help="the shape classes only, attnlab's choice against torch: under a minute"
    )
    bench.add_argument("--json", metavar="PATH", help="also write every figure to this JSON file")
    bench.add_argument("--repeat", type=_at_least(1), help="timed runs per figure, best kept (default 3, quick 1)")
    experiment = _command(
        commands,
        "experiment",
        _experiment,
        "rerun the experiments that answer the article's questions",
        "List the experiments, or run one: it writes report.md, results.json and PNG figures to --out.",
        "  attnlab experiment list\n  attnlab experiment run coref --quick\n  attnlab experiment run coref --seed 1",
    )
    experiment.add_argument("action", choices=("list", "run"), help="list the experiments, or run one")
    experiment.add_argument("name", nargs="?", metavar="NAME", help="the experiment to run")
    experiment.add_argument("--quick", action="store_true", help="a short run (under a minute on 2 cores)")
    experiment.add_argument("--seed", type=_at_least(0, 2**32 - 1), default=0, help="the seed (default 0)")
    experiment.add_argument("--out", metavar="DIR", help="where to write (default experiments/NAME)")
    ring = _command(
        commands,
        "ring",
        _ring,
        "ring attention over N local processes (torchrun, gloo)",
        "Split one sequence over N processes on this machine (torchrun, the gloo backend) and run ring "
        "attention on it: time, each rank's extra memory and the bytes it sent, and the error against the "
        "single-process engine (--check). Across machines, see README.",
        "  attnlab ring --nproc 4 --length 65536 --causal\n  attnlab ring --nproc 2 --length 8192 --backward --check",
    )
    ring.add_argument("--nproc", type=_at_least(1, 64), required=True, help="processes (ranks) on this machine")
    ring.add_argument("--length", type=_at_least(1, 2**24), required=True, help="tokens of the whole sequence")
    ring.add_argument("--heads", type=_at_least(1, 1024), default=1, help="heads (default 1)")
    ring.add_argument("--dim", type=_at_least(1, 4096), default=64, help="width of each head (default 64)")
    ring.add_argument("--causal", action="store_true", help="token i attends to tokens 0..i only")
    ring.add_argument("--backward", action="store_true", help="also run and time the backward")
    ring.add_argument("--layout", choices=("zigzag", "contiguous"), default="zigzag", help="how the rows are shared")
    ring.add_argument("--float64", action="store_true", help="float64 instead of float32")
    ring.add_argument("--check", action="store_true", help="compare with the single-process engine (slow)")
    bench.add_argument(
        "--models",
        action="store_true",
        help="instead: a model with Qwen2.5-0.5B's shapes (random weights) against transformers' eager and sdpa "
        "attention: forward over 32 and 512 tokens, 64 generated tokens, attnlab's peak memory (needs "
        "attnlab[test]; a few minutes and 2 GiB of disk)",
    )
    bench.add_argument(
        "--engine-table",
        metavar="PATH",
        help="instead: time every engine on shapes from many tiny heads to one long one, causal ones and "
        "decoding, and write the table engine=None is fitted to (docs/engine-choice.json) to PATH",
    )
    return parser


# The library's argument names, as the options that carry them on the command line.
_OPTIONS = {
    "path": "-o",
    "heads": "--heads",
    "stage": "--stage",
    "tokens": "--tokens",
    "seed": "--seed",
    "name_or_dir": "--model",
    "input_ids": "--text",
    "text_or_ids": "--text",
    "layers": "--layer",
}


def _in_cli_words(error: AttnlabError) -> str:
    """The error's message, starting with the option instead of the library's argument."""
    message, argument = str(error), getattr(error, "argument", "")
    if argument in _OPTIONS and message.startswith(f"{argument}:"):
        return _OPTIONS[argument] + message[len(argument) :]
    return message


def main(argv: Sequence[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a terminal that cannot show Chinese gets escapes, not a crash
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):  # bare `attnlab`: what it can do
        parser.print_help()
        return 0
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except KeyboardInterrupt:
        print(f"attnlab {args.command}: interrupted", file=sys.stderr)
        return 130
    except AttnlabError as e:
        print(f"attnlab {args.command}: error: {_in_cli_words(e)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (| head): not an error; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError as e:  # a write that failed half way (a full disk) names no file: the output is the one
        name = e.filename or getattr(args, "output", None) or getattr(args, "json", None) or args.command
        print(f"attnlab {args.command}: error: {name}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
