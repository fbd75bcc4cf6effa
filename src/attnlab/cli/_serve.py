"""attnlab serve: a local page that recomputes attention as you type.

Start a local server and print its address, with its token: type a text in the page and
press Enter, and the model traces it and the page redraws in place, on the same layer, head
and query. A second text compares under the same head, "generate" adds tokens, a click on a
head in the model view ablates it. Without --model: the article's SelfAttention on the typed
tokens, as view draws it. It listens on 127.0.0.1 only, unless --host says otherwise; Ctrl-C
stops it.

Examples::

  attnlab serve
  attnlab serve --model builtin:coref
  attnlab serve --model gpt2 --text "The cat sat on the"
  attnlab serve --model path/to/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..live._server import DEFAULT_TEXT
from ._inputs import InputError
from ._options import at_least
from ._transformers import BACKENDS, _quiet, load_on_attnlab, run_on_model, say_backend

__all__ = ["OPTIONS", "run"]


def add_options(parser: argparse.ArgumentParser) -> None:
    """serve's options."""
    parser.add_argument(
        "--model",
        metavar="NAME|DIR",
        help="a checkpoint (a directory, a GGUF file, builtin:coref or a hub id in the local cache); "
        "default: the article's SelfAttention on the typed tokens",
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        help="numpy: attnlab's own model; transformers: the model as transformers builds it, on attnlab's "
        "engine (pip install 'attnlab[hf]'). Default: numpy where it can",
    )
    parser.add_argument("--text", default=DEFAULT_TEXT, help="the text the page opens on (default: the article's)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1: this machine only; another serves the network, "
        "and a warning says so)",
    )
    parser.add_argument("--port", type=at_least(0, 65535), default=0, help="the port (default 0: a free one)")
    parser.set_defaults(image=None, output=None)  # run_on_model's: serve reads text and writes no file


OPTIONS = (add_options,)


def run(args: argparse.Namespace) -> None:
    """Load --model once (on its backend) and serve its live page until Ctrl-C."""
    from ..live import serve

    model = tokenizer = None
    if args.model is not None:
        ran = run_on_model(args, _transformers_model, lambda model, tokenizer: None, {})
        model, tokenizer = ran.model, ran.tokenizer
        say_backend(args, ran.backend, ran.model_type)
    elif args.backend is not None:
        raise InputError("--backend: expected --model with it (the checkpoint it runs)")
    try:
        serve(model, tokenizer=tokenizer, text=args.text, host=args.host, port=args.port, block=True)
    except OSError as error:
        raise InputError(
            f"--host {args.host} --port {args.port}: cannot listen there ({error.strerror or error})"
        ) from None
    print("attnlab serve: stopped")


def _transformers_model(args: argparse.Namespace, directory: Path) -> tuple[Any, Any]:
    """The checkpoint with its language-modelling head (ablation and generation need it),
    else as a bare model (its attention only)."""
    from ._ablate import model_with_head
    from ._transformers import tokenizer_of, transformers_for

    try:
        return model_with_head(args, directory)
    except InputError as error:
        if "at random" not in str(error):
            raise
    transformers = transformers_for(args, directory, "serve runs")
    with _quiet(transformers):
        model = load_on_attnlab(transformers.AutoModel, directory, f"--model: transformers cannot load {args.model}")
    return model, tokenizer_of(transformers, args, directory)
