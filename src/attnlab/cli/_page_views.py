"""attnlab view's views beyond one trace: two texts through one model (``--text`` given
twice) and a generation's tokens (``--generate N``), each checked before any work."""

from __future__ import annotations

import argparse
import sys

from ..trace import GenerationTrace, ModelTrace
from ..viz._page import check_page_size
from ._inputs import InputError
from ._sequence import model_traces

__all__ = ["MAX_GENERATE", "check_texts", "generation_page", "pair_of_traces"]

MAX_GENERATE = 256  # --generate's most new tokens: the page carries N × (L + N) weights per head and layer


def check_texts(args: argparse.Namespace, two_allowed: bool) -> None:
    """Refuse --text given more than twice, or twice where the command or the input cannot compare texts."""
    texts = getattr(args, "texts", None) or []
    if len(texts) <= 1:
        return
    if not two_allowed:
        raise InputError(f"--text: given {len(texts)} times; only 'attnlab view --model …' takes two texts")
    if len(texts) > 2:
        raise InputError(f"--text: expected one text or two to compare, got {len(texts)}")
    if args.model is None:
        raise InputError("--text twice: expected --model with it (both texts go through the same model)")
    if getattr(args, "generate", None) is not None:
        raise InputError("--generate: expected one --text (the prompt), got two")


def pair_of_traces(args: argparse.Namespace) -> tuple[ModelTrace, ModelTrace]:
    """The traces of the two --text through the --model, the same layers, each page's size checked first."""
    first, second = model_traces(args, list(args.texts), page=True, one_stack=True)  # the model opened once
    return first, second


def generation_page(args: argparse.Namespace) -> tuple[ModelTrace, GenerationTrace]:
    """The --generate N tokens after --text, recorded with the KV cache, and the trace of
    the whole sequence (prompt and generated) for the main views (the runner's
    :meth:`~attnlab.runner.Runner.generate`, either backend); the page's size is checked
    for L + N tokens before the model runs, and from the trace after."""
    from ._transformers import check_page_first, checkpoint_of, in_cli_words, known_length, loaded, say_backend

    if args.model is None:
        raise InputError("--generate: expected --model with it (the model that generates)")
    if args.text is None:
        raise InputError("--generate: expected --text with the prompt")
    checkpoint = checkpoint_of(args)
    in_cli_words(checkpoint.check_one_stack)  # a generation's trace is of one sequence
    layer = "all" if args.layer is None else args.layer
    layers = None if layer == "all" else layer
    runner = loaded(checkpoint, "causal")
    length, positions = known_length(runner, args.text, args.truncate), runner.positions
    if length is not None and positions is not None and length + args.generate > positions:
        raise InputError(
            f"--generate: {length} prompt tokens + {args.generate} new ones is past the model's {positions} "
            f"positions; generate at most {max(positions - length, 0)}"
        )
    count = None if layers is None else len(layers) if isinstance(layers, list) else 1
    check_page_first(runner, args.text, "--text and --generate", args.generate, count, cut=args.truncate)
    progress = sys.stderr.isatty()
    options = {"truncation": args.truncate, "chat": args.chat, "progress": progress}
    full, generation = in_cli_words(lambda: runner.generate(args.text, args.generate, layers=layers, **options))
    check_page_size(full, "--text and --generate", "--layer N")
    say_backend(args, runner)
    print(f"generated {generation.generated} token{'s' * (generation.generated != 1)}: {generation.text!r}")
    return full, generation
