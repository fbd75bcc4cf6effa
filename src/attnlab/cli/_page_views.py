"""attnlab view's views beyond one trace: two texts through one model (``--text`` given
twice) and a generation's tokens (``--generate N``), each checked before any work."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..trace import GenerationTrace, ModelTrace
from ..viz._page import PageShape, check_page_size
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
    the whole sequence (prompt and generated) for the main views; the page's size is
    checked for L + N tokens before the model runs."""
    from ._transformers import checkpoint_of, in_cli_words, loaded, say_backend

    if args.model is None:
        raise InputError("--generate: expected --model with it (the model that generates)")
    if args.text is None:
        raise InputError("--generate: expected --text with the prompt")
    checkpoint = checkpoint_of(args)
    in_cli_words(checkpoint.check_one_stack)  # a generation's trace is of one sequence
    layer = "all" if args.layer is None else args.layer
    layers = None if layer == "all" else layer
    if checkpoint.backend == "transformers":
        runner = loaded(checkpoint, "causal")
        full, generation = _transformers_generation(args, runner, layers)
    else:
        runner = loaded(checkpoint)
        full, generation = _numpy_generation(args, runner.model, layers)
    say_backend(args, runner)
    print(f"generated {generation.generated} token{'s' * (generation.generated != 1)}: {generation.text!r}")
    return full, generation


def _numpy_generation(args: argparse.Namespace, model: Any, layers: Any) -> tuple[ModelTrace, GenerationTrace]:
    from ..models._checks import sequence_ids

    if model.tokenizer is None:
        raise InputError(f"--model: {args.model} has no tokenizer (tokenizer.json, vocab.txt or vocab.json)")
    if not model.config.causal:
        raise InputError(f"--generate: {args.model} is a {model.config.model_type} model, which does not generate")
    marked = sequence_ids(model.config, model.tokenizer, args.text, truncation=args.truncate, chat=args.chat)
    prompt = marked.ids
    c, length = model.config, len(prompt) + args.generate
    if length > c.max_position_embeddings:
        raise InputError(
            f"--generate: {len(prompt)} prompt tokens + {args.generate} new ones is past the model's "
            f"{c.max_position_embeddings} positions; generate at most {max(c.max_position_embeddings - len(prompt), 0)}"
        )
    count = c.num_hidden_layers if layers is None else len(layers) if isinstance(layers, list) else 1
    shape = PageShape(length, c.num_attention_heads, count, (c.head_dim, c.head_dim), model=True)
    check_page_size(shape, "--text and --generate", "--layer N")
    generation = model.trace_generation(prompt, args.generate, layers=layers, progress=sys.stderr.isatty())
    full = model.trace(generation.ids, layers=layers)
    full.template = (marked.template or [False] * len(prompt)) + [False] * generation.generated
    full.notes = [*full.notes, *marked.notes]
    return full, generation


def _transformers_generation(args: argparse.Namespace, runner: Any, layers: Any) -> tuple[ModelTrace, GenerationTrace]:
    from .. import hf
    from ._transformers import check_page_first

    count = None if layers is None else len(layers) if isinstance(layers, list) else 1
    check_page_first(runner, args.text, "--text and --generate", args.generate, count)
    generation = hf.trace_generation(
        runner.model, args.text, args.generate, tokenizer=runner.processor, layers=layers, progress=sys.stderr.isatty()
    )
    full = runner.trace(generation.ids, layers)
    check_page_size(full, "--text and --generate", "--layer N")
    return full, generation
