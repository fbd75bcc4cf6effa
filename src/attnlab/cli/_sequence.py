"""The options that say which sequence to run and how (trace, plot and view), and the
trace they make: the seed's layer or a MultiheadAttention on a file or a text, a
pretrained model on a text, or a saved trace. What the trace or the page would hold is
checked before any work."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._validation import Array
from ..engine.variants import ALIGNMENTS, Rules
from ..layers._multihead import MultiheadAttention
from ..layers._self_attention import SelfAttention
from ..trace import ModelStatistics, ModelTrace
from ..trace._trace import Trace
from ..viz._page import PageShape, check_page_size
from ._inputs import (
    InputError,
    as_sequence,
    embed_tokens,
    parse_tokens,
    read_json_or_matrix,
    source_name,
    split_text,
)
from ._options import STATS_DEFAULTS, TextsAction, at_least, positive_number, window_sides
from ._transformers import (
    BACKENDS,
    checkpoint_of,
    in_cli_words,
    in_option_words,
    known_length,
    loaded,
    model_trace,
    say_backend,
)

if TYPE_CHECKING:
    from ..runner import Runner

__all__ = ["ShapeCheck", "add_input_options", "model_statistics", "model_traces", "trace_from_args"]

# What a trace can hold: its (L, L) matrices are kept whole, several per head, so L²·H
# is capped before any work (2²⁴ float64 scores are 128 MiB an array); widths likewise. A
# trace made for a page may hold more: the page's own byte limits (viz._page.PAGE_LIMITS)
# decide what it shows, and this cap only bounds the memory of its making (2²⁸ float32
# scores, 1 GiB an array: GPT-2 small's 12 × 12 heads over 1,024 tokens fit).
MAX_SCORES = 2**24
MAX_PAGE_SCORES = 2**28
FEWER_LAYERS = "--layer N or a list of layers (--layer 0,5,-1)"  # what a page too large for all layers takes
MAX_WIDTH = 2**16
# --d-k's default: the input's width up to this (and up to what MAX_WEIGHTS leaves). The
# weights are drawn in pure Python as the seed draws them, d_model·d_k numbers each, so a
# 2000-token one-hot text with d_k = 2000 would draw 12 million of them.
DEFAULT_MAX_D_K = 64
# The numbers of one weight matrix of the layer, checked before it is made: the seed's
# layer draws them in pure Python (about a million a second, ~48 bytes each while drawn),
# so its three d_model × d_k matrices at this bound (1024 × 1024) take ~3 s and ~200 MB;
# --num-heads' four are width × width. A page or a trace shows q, k and v (L × d_k), never
# the weights: a wider layer adds columns no one reads, at the cost of minutes and GBs
# (8000 × 8000 drew 192 million numbers in Python).
MAX_WEIGHTS = 2**20
# The numbers of --embed random's vectors (L × d_model), as many as a trace's scores (MAX_SCORES):
# 128 MiB of float64; the one-hot vectors (L × distinct tokens) are within it once L² is.
MAX_EMBEDDING = 2**24
ONE_LAYER = "--layer: expected --model or a saved model's trace with it; this input has one layer"
# A command's check of its options against a model's layers, heads and the text's tokens
# (plot's --heads, view's --rollout), run once the model is loaded and the text tokenized,
# before the model runs: an option the model or the text cannot take costs no work.
ShapeCheck = Callable[[int, int, int], None]


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


def _layer(text: str) -> int | list[int] | str:
    """--layer: 'all', an index, or a list of them (0,5,-1)."""
    if text == "all":
        return text
    try:
        indices = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a layer index, a list of them (0,5,-1) or 'all', got {text!r}"
        ) from None
    if len(set(indices)) != len(indices):
        raise argparse.ArgumentTypeError(f"expected each layer once, got {text!r}")
    return indices[0] if len(indices) == 1 else indices


def add_input_options(parser: argparse.ArgumentParser) -> None:
    """The options that say which sequence to run and how (shared by trace, plot and view)."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "input", nargs="?", metavar="INPUT", help="a .json (list of rows), .csv or .npy file, or - for JSON on stdin"
    )
    source.add_argument(
        "--text",
        action=TextsAction,
        help="a sentence: split on spaces, or into characters when it has none (view --model: twice, to compare two)",
    )
    source.add_argument("--image", metavar="FILE", help="with --model of a vision model (ViT): the picture it sees")
    parser.add_argument(
        "--embed",
        choices=("onehot", "random"),
        default="onehot",
        help="with --text: one-hot vectors (default) or seeded Gaussian vectors of --d-model width",
    )
    parser.add_argument(
        "--d-model", type=at_least(1, MAX_WIDTH), default=16, help="width of --embed random vectors (default 16)"
    )
    parser.add_argument(
        "--d-k",
        type=at_least(1, MAX_WIDTH),
        help=f"width of Q, K and V (default: the input's width, at most {DEFAULT_MAX_D_K}; d_model·d_k at most "
        f"{MAX_WEIGHTS:,}, the numbers of a weight matrix)",
    )
    parser.add_argument(
        "--seed",
        type=at_least(0, 2**63 - 1),
        default=42,
        help="seed of the weights, 0..2**63-1 (default 42, the article's)",
    )
    parser.add_argument(
        "--scale", type=_scale, default="sqrt", help="sqrt (1/√d_k, default), none (1) or a number multiplying Q·Kᵀ"
    )
    parser.add_argument("--causal", action="store_true", help="token i attends to tokens 0..i only")
    parser.add_argument(
        "--window",
        type=window_sides,
        metavar="L,R",
        help="a sliding window: token i attends to tokens i-L..i+R only; a side empty or 'none' is unbounded "
        "(2,0: itself and the two before)",
    )
    parser.add_argument(
        "--softcap", type=positive_number, metavar="C", help="cap the scaled scores z at ±C: z -> C·tanh(z/C)"
    )
    parser.add_argument(
        "--causal-alignment",
        choices=ALIGNMENTS,
        default="top_left",
        help="the diagonal of --causal and --window: top_left (default) or bottom_right (the same here: "
        "as many keys as queries)",
    )
    parser.add_argument("--tokens", help="labels of the rows, separated by spaces")
    parser.add_argument(
        "--num-heads",
        type=at_least(1),
        default=1,
        help="1 (default): the seed's layer; more: a MultiheadAttention of that many heads "
        "(they must divide the input's width, and each head is width/N wide: no --d-k)",
    )
    model = parser.add_argument_group("a pretrained model (pip install 'attnlab[models]')")
    model.add_argument(
        "--model",
        metavar="NAME|DIR",
        help="run --text (or --image) through a checkpoint of any architecture transformers loads: a Hugging "
        "Face hub id (the local cache first) or a directory",
    )
    model.add_argument(
        "--backend",
        choices=BACKENDS,
        help="numpy: attnlab's own model (GPT-2, BERT, Llama, Mistral, Qwen2); transformers: the model as "
        "transformers builds it, on attnlab's engine (pip install 'attnlab[hf]'). Default: numpy where it can",
    )
    model.add_argument(
        "--layer",
        type=_layer,
        help="with --model: a layer index (negative counts from the end; on the transformers backend, the "
        "index of an attention module in the order the forward runs them), a list of them (0,5,-1; one that "
        "starts with a negative index as --layer=-1,0) or 'all' "
        "(default: all for view, the last for trace and plot)",
    )
    model.add_argument(
        "--truncate",
        action="store_true",
        help="with --model: cut a --text longer than the model takes (its positions or its tokenizer's "
        "model_max_length) to its first tokens, and say so; without it such a text is refused",
    )
    model.add_argument(
        "--chat",
        action="store_true",
        help="with --model of a chat model: --text is a user's message in the model's chat template, followed "
        "by the prompt for the answer (the page marks the template's tokens)",
    )


def trace_from_args(
    args: argparse.Namespace, page: bool = False, check: ShapeCheck | None = None
) -> Trace | ModelTrace:
    """The trace the options name: the --model run on --text, the layer run on the
    sequence, or a saved trace (a JSON object from ``attnlab trace --format json``). What
    it would hold (L²·heads·layers scores), and for a ``page`` what the page would
    (:func:`~attnlab.viz._page.check_page_size`), is checked before the work; so is
    ``check(layers, heads, tokens)``, the command's own options against the model's: attnlab's
    model is checked before it runs, a transformers model once its one forward has found
    its attention entries."""
    texts = getattr(args, "texts", None) or []
    if len(texts) > 1:
        raise InputError(f"--text: given {len(texts)} times; only 'attnlab view --model …' takes two texts")
    if args.model is not None:
        return model_traces(args, [args.text], page, check)[0]
    for option, given in (("--image", args.image), ("--backend", args.backend)):
        if given is not None:
            raise InputError(f"{option}: expected --model with it (the checkpoint that reads it)")
    if args.text is not None:
        if args.layer is not None:
            raise InputError(ONE_LAYER)
        words = split_text(args.text)
        _check_layer_size(args, len(words), len(set(words)) if args.embed == "onehot" else args.d_model, page)
        X = embed_tokens(words, args.embed, args.d_model, args.seed)
        return _run_layer(X, parse_tokens(args.tokens, len(words)) or words, args)
    data = read_json_or_matrix(args.input)
    if isinstance(data, dict):
        return _saved_trace(data, args, page)
    if args.layer is not None:
        raise InputError(ONE_LAYER)
    X, names = as_sequence(data, args.input)  # (L, d_model)
    _check_layer_size(args, len(X), X.shape[1], page)
    return _run_layer(X, parse_tokens(args.tokens, len(X)) or names, args)


def model_traces(
    args: argparse.Namespace,
    texts: list[str | None],
    page: bool = False,
    check: ShapeCheck | None = None,
    one_stack: bool = False,
) -> list[ModelTrace]:
    """Open the --model once and trace each of ``texts`` (None: --image's picture) at
    --layer (default: all for a ``page``, else the last), each once its L²·heads·layers
    scores, for a ``page`` the page, and ``check`` fit; ``one_stack``: an encoder-decoder
    model refused before it loads (two texts compared pair one sequence each)."""
    import copy

    _refuse(args, f"--model {args.model} fixes the weights, the embedding and the scale")
    _refuse_variants(args, f"--model {args.model} attends as its config says (its causal mask, its own window)")
    if args.input is not None:
        raise InputError("--model: expected --text with the sentence to run (or --image), got an input file")
    checkpoint = checkpoint_of(args)
    if one_stack:
        in_cli_words(checkpoint.check_one_stack)
    if checkpoint.backend == "numpy" and args.text is None:
        raise InputError(f"--image: {args.model} runs in attnlab's NumPy models, which read text (--text)")
    runner = loaded(checkpoint, "bare")  # a transformers model's attention, or attnlab's model
    traces = []
    for text in texts:
        one = copy.copy(args)
        one.text = text
        traces.append(_model_trace(one, runner, page, check))
    say_backend(args, runner)
    return traces


def model_statistics(args: argparse.Namespace) -> ModelStatistics:
    """The statistics of every layer's and head's weights of --text through the --model
    (``attnlab trace --stats``): refused without --model and --text, and with what cannot
    change them (the layer's options, --layer: every layer is kept)."""
    if args.model is None or args.text is None:
        raise InputError("--stats: expected --model and --text (the statistics of a model's weights on a text)")
    texts = getattr(args, "texts", None) or []
    if len(texts) > 1:
        raise InputError(f"--text: given {len(texts)} times; --stats reads one text")
    if args.layer is not None:
        raise InputError("--layer: --stats keeps every layer's statistics; --layer cannot choose them")
    _refuse(args, f"--model {args.model} fixes the weights, the embedding and the scale")
    _refuse_variants(args, f"--model {args.model} attends as its config says (its causal mask, its own window)")
    sizes: dict[str, Any] = {name: getattr(args, name) or default for name, default in STATS_DEFAULTS.items()}
    runner = loaded(checkpoint_of(args), "bare")

    def computed() -> ModelStatistics:
        return runner.statistics(args.text, **sizes, truncation=args.truncate, chat=args.chat)

    stats = in_option_words(args, computed, runner.backend == "transformers")
    say_backend(args, runner)
    return stats


def _model_trace(args: argparse.Namespace, runner: Runner, page: bool, check: ShapeCheck | None) -> ModelTrace:
    """--text (or --image) through the opened --model, as :func:`model_traces` says: its
    tokens, where known before the model runs (:func:`known_length`), checked first
    against ``check``, a trace's most scores and the page; the trace's own after."""
    layer = ("all" if page else -1) if args.layer is None else args.layer
    count = runner.layers if layer == "all" else len(layer) if isinstance(layer, list) else 1
    length = known_length(runner, args.text, args.truncate)
    if length is not None and runner.layers is not None and runner.heads is not None and count is not None:
        if check is not None:
            check(runner.layers, runner.heads, length)
        _check_trace_size(length, runner.heads * count, "--layer N" if layer == "all" else "", page)
        shape = runner.page_shape(length, count)
        if page and shape is not None:
            check_page_size(shape, "--text", FEWER_LAYERS)
    trace = model_trace(args, runner, page)
    if check is not None:
        check(trace.num_layers, trace.num_heads, len(trace.tokens))
    _check_trace_size(len(trace.tokens), trace.num_heads * len(trace.layers), "--layer N", page)
    if page:
        check_page_size(trace, "--text", FEWER_LAYERS)
    return trace


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


def _refuse_variants(args: argparse.Namespace, reason: str) -> None:
    """The variants' options, which cannot change a trace whose attention is fixed already."""
    given = {
        "--window": args.window is not None,
        "--softcap": args.softcap is not None,
        "--causal-alignment": args.causal_alignment != "top_left",
    }
    for option, changed in given.items():
        if changed:
            raise InputError(f"{option}: {reason}; {option} cannot change it")


def _default_d_k(width: int) -> int:
    """--d-k's default for an input of ``width``: the width, at most DEFAULT_MAX_D_K, and at
    most what keeps a weight matrix (width × d_k) within MAX_WEIGHTS."""
    return max(1, min(width, DEFAULT_MAX_D_K, MAX_WEIGHTS // width))


def _check_layer_size(args: argparse.Namespace, length: int, width: int, page: bool) -> None:
    """Before the layer runs on ``length`` tokens of ``width``: the trace's scores, or the
    page's size, the width, the weights (MAX_WEIGHTS) and --embed random's vectors (MAX_EMBEDDING)."""
    if page:
        head_width = width // args.num_heads if args.num_heads > 1 else args.d_k or _default_d_k(width)
        source = "--text" if args.text is not None else source_name(args.input)
        check_page_size(PageShape(length, args.num_heads, 1, (head_width, head_width), model=False), source)
    else:
        _check_trace_size(length, args.num_heads)
    if width > MAX_WIDTH:
        raise InputError(f"the input's width: expected at most {MAX_WIDTH}, got {width}")
    random = args.text is not None and args.embed == "random"  # the width is --d-model's
    given = f"--d-model {width}" if random else f"the input's width {width}"
    if args.num_heads == 1 and args.d_k is not None and width * args.d_k > MAX_WEIGHTS:
        raise InputError(
            f"--d-k: expected d_model × d_k at most {MAX_WEIGHTS:,}, the numbers of a weight matrix the seed's layer "
            f"draws in pure Python (about a million a second), got {width:,} × {args.d_k:,} = "
            f"{width * args.d_k:,} ({given}); use a smaller --d-k" + (" or --d-model" if random else "")
        )
    if args.num_heads > 1 and width * width > MAX_WEIGHTS:
        raise InputError(
            f"{'--d-model' if random else '--num-heads'}: expected a width of at most {math.isqrt(MAX_WEIGHTS):,} "
            f"with --num-heads (four width × width weight matrices, at most {MAX_WEIGHTS:,} numbers each), "
            f"got {given}"
        )
    if random and length * width > MAX_EMBEDDING:
        raise InputError(
            f"--d-model: expected tokens × d_model at most {MAX_EMBEDDING:,} numbers (--embed random's vectors), "
            f"got {length:,} × {width:,} = {length * width:,}; use a smaller --d-model or fewer tokens"
        )


def _check_trace_size(length: int, heads: int, fewer: str = "", page: bool = False) -> None:
    most = MAX_PAGE_SCORES if page else MAX_SCORES
    if length**2 * heads > most:
        raise InputError(
            f"{length} tokens × {heads} heads: a trace keeps L×L matrices per head, at most "
            f"{most:,} scores (L²·heads); use fewer tokens or heads" + (f", or {fewer}" if fewer else "")
        )


def _run_layer(X: Array, tokens: list[str] | None, args: argparse.Namespace) -> Trace:
    """The trace of the seed's layer (one head) or a MultiheadAttention on X (L, d_model):
    random weights drawn from --seed, which the trace carries (pages and plots say so)."""
    scale = {"sqrt": None, "none": 1.0}.get(args.scale, args.scale)
    layer: SelfAttention | MultiheadAttention
    if args.num_heads == 1:
        layer = SelfAttention(X.shape[1], args.d_k or _default_d_k(X.shape[1]), seed=args.seed)
    elif args.d_k is not None:
        raise InputError(
            f"--d-k: with --num-heads {args.num_heads} each head is the input's width / {args.num_heads} wide; "
            "drop --d-k, or use one head"
        )
    elif X.shape[1] % args.num_heads:
        raise InputError(f"--num-heads: expected a divisor of the input's width {X.shape[1]}, got {args.num_heads}")
    else:
        layer = MultiheadAttention(X.shape[1], args.num_heads, seed=args.seed, dtype=np.float64)
    rules = Rules(  # the variants' options, whole
        is_causal=args.causal, causal_alignment=args.causal_alignment, window=args.window, softcap=args.softcap
    )
    trace = layer.trace(X, scale=scale, tokens=tokens, rules=rules)
    trace.random_seed = args.seed
    return trace


def _saved_trace(data: dict[str, object], args: argparse.Namespace, page: bool) -> Trace | ModelTrace:
    """A trace saved by ``attnlab trace --format json``: a layer's or a model's, checked
    as held already (and for a ``page``, the page's size). Only --tokens (a layer's) and
    --layer (a model's) can change what is shown."""
    _refuse(args, f"{args.input} is a saved trace, already computed")
    _refuse_variants(args, f"{args.input} is a saved trace, already computed")
    source = source_name(args.input)
    if "layers" not in data:
        if args.layer is not None:
            raise InputError(f"--layer: {args.input} is the trace of one layer; --layer needs a model's trace")
        trace = Trace.from_dict(data, source)
        trace.tokens = parse_tokens(args.tokens, len(trace.inputs)) or trace.tokens
        saved: Trace | ModelTrace = trace
    else:
        if args.tokens is not None:
            raise InputError(f"--tokens: {args.input} is a saved model's trace; its tokens are the model's")
        saved = ModelTrace.from_dict(data, source)
        if args.layer not in (None, "all"):
            saved.layers = _saved_layers(saved, args.layer)
        _check_trace_size(len(saved.tokens), saved.num_heads * len(saved.layers), "--layer N", page)
    if page:
        check_page_size(saved, source, FEWER_LAYERS)
    elif isinstance(saved, Trace):
        _check_trace_size(len(saved.inputs), saved.num_heads)
    return saved


def _saved_layers(saved: ModelTrace, layer: int | list[int]) -> dict[int, Trace]:
    """The saved layers --layer names (negative: from the model's last layer), each one saved."""
    chosen = {}
    for index in [layer] if isinstance(layer, int) else layer:
        wanted = index % saved.num_layers if -saved.num_layers <= index < saved.num_layers else None
        if wanted not in saved.layers:
            raise InputError(f"--layer: expected one of the saved layers {sorted(saved.layers)}, got {index}")
        chosen[wanted] = saved.layers[wanted]
    return chosen
