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

from ..live._server import DEFAULT_TEXT
from ._inputs import InputError
from ._options import at_least
from ._transformers import BACKENDS, open_model, say_backend

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
    parser.set_defaults(image=None)  # serve reads text


OPTIONS = (add_options,)


def run(args: argparse.Namespace) -> None:
    """Load --model once (on its backend) and serve its live page until Ctrl-C."""
    from ..live import serve

    runner = None
    if args.model is not None:
        # with its language-modelling head where it has one: ablation and generation
        runner = open_model(args, "any", one_stack=True)
        say_backend(args, runner)
    elif args.backend is not None:
        raise InputError("--backend: expected --model with it (the checkpoint it runs)")
    try:
        serve(runner, text=args.text, host=args.host, port=args.port, block=True)
    except OSError as error:
        raise InputError(
            f"--host {args.host} --port {args.port}: cannot listen there ({error.strerror or error})"
        ) from None
    print("attnlab serve: stopped")
