"""attnlab view --in-browser: the page that carries --model and runs it on what its reader types
(attnlab.viz._inpage). The options it cannot honour are refused first, a model the page cannot run
before its weights load (from its config), and the written file is named with its size."""

from __future__ import annotations

import argparse
import os
import sys

from ._inputs import InputError
from ._transformers import checkpoint_of, in_cli_words, loaded

__all__ = ["write_in_browser_page"]

# what --in-browser cannot do: each option given, and why
_NOT_WITH = {
    "--generate": "the page runs an encoder, which generates nothing",
    "--rollout": "the page draws the views of one forward",
    "--layer": "the page runs every layer",
    "--chat": "the page runs an encoder, which has no chat template",
    "--truncate": "the page cuts a text to the model's positions itself, and says so",
}


def write_in_browser_page(args: argparse.Namespace) -> None:
    """Write the page of --model that runs it, opening on --text, to -o, and say so on stdout.

    Raises:
        InputError: no --model or --text, two texts, an option of :data:`_NOT_WITH`, --backend
            transformers, or a model the page cannot run (one line naming it and why).
    """
    from ..trace._display import shown_name
    from ..viz._inpage import check_model_type
    from ..viz._page import view

    if args.model is None or args.text is None:
        raise InputError("--in-browser: expected --model and --text (the model the page runs, the text it opens on)")
    if len(getattr(args, "texts", None) or []) > 1:
        raise InputError("--in-browser: expected one --text (the reader types the others)")
    given = {"--generate": args.generate is not None, "--rollout": args.rollout, "--layer": args.layer is not None,
             "--chat": args.chat, "--truncate": args.truncate}  # fmt: skip
    for option, on in given.items():
        if on:
            raise InputError(f"{option}: not with --in-browser: {_NOT_WITH[option]}")
    if args.backend == "transformers":
        raise InputError("--backend transformers: not with --in-browser: the page runs attnlab's own forward (numpy)")
    checkpoint = checkpoint_of(args)
    config = checkpoint.config or {}  # None: a GGUF file's (a causal decoder)
    options = {"model": "--model", "text": "--text"}
    causal = checkpoint.config is None or bool(config.get("is_decoder"))
    in_cli_words(lambda: check_model_type(args.model, config.get("model_type"), causal), options)
    runner = loaded(checkpoint)
    in_cli_words(lambda: view(runner, args.output, text=args.text, lang=args.lang, in_browser=True), options)
    size = os.path.getsize(args.output)
    name = shown_name(args.model)
    print(
        f"attnlab view: wrote {args.output} ({size / 1e6:.1f} MB): {name} runs in the page; open it in a browser, "
        "no server",
        file=sys.stderr,
    )
