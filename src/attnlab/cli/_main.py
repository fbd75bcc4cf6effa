"""The ``attnlab`` command: a thin layer over the library, one module per command.

Every user error (the library's :class:`AttnlabError`, a file that cannot be read or
written) ends in one line on standard error and exit status 2, with the library's
argument names translated into the options that carry them, and control characters (a
newline in a path) escaped. Anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import unicodedata
from collections.abc import Sequence

from .. import __version__
from .._exceptions import renamed
from .._validation import AttnlabError
from . import _ablate, _bench, _demo, _evict, _experiment, _heads, _plot, _ring, _serve, _trace, _view
from ._options import Parser, add_command

__all__ = ["build_parser", "main"]

COMMANDS = (
    _demo,
    _trace,
    _plot,
    _view,
    _serve,
    _ablate,
    _heads,
    _evict,
    _bench,
    _experiment,
    _ring,
)  # in the order --help lists them


def build_parser() -> argparse.ArgumentParser:
    """The ``attnlab`` parser: --version, and each command of COMMANDS with its options."""
    parser = Parser(
        prog="attnlab",
        description="Self-attention, step by step: the seed article's layer and more.",
        epilog='examples:\n  attnlab demo\n  attnlab trace --text "小明是个运动达人，他平时很爱打篮球" --lang en\n'
        "  attnlab COMMAND --help",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS:
        add_command(commands, command)
    return parser


# The library's argument names, as the options that carry them on the command line.
_OPTIONS = {
    "path": "-o",
    "heads": "--heads",
    "stage": "--stage",
    "tokens": "--tokens",
    "seed": "--seed",
    "name_or_dir": "--model",
    "truncation=True": "--truncate",  # a mention: the option that cuts a text to the model's positions
    "input_ids": "--text",
    "text_or_ids": "--text",
    "layers": "--layer",
    "max_new_tokens": "--generate",
    "chat": "--chat",
}


# ... and those that mean an option only where the command was given it: a tokenizer's ``text``
# is --text's (trace, view, plot, ablate, heads), never an experiment's own sentence.
_GIVEN_OPTIONS = {"text": ("text", "--text")}  # argument: (the option's dest, the option)


def _in_cli_words(error: AttnlabError, args: argparse.Namespace) -> str:
    """The error's message, starting with the option instead of the library's argument."""
    options = dict(_OPTIONS)
    options.update(
        {name: option for name, (dest, option) in _GIVEN_OPTIONS.items() if getattr(args, dest, None) is not None}
    )
    return renamed(error, options) or str(error)


def _one_line(message: str) -> str:
    """``message`` with its control characters and line or paragraph separators escaped as
    Python's repr shows them (a newline as \\n), without repr's quotes: one line whatever
    paths or texts it holds."""
    breaking = ("Cc", "Zl", "Zp")
    return "".join(repr(c)[1:-1] if unicodedata.category(c) in breaking else c for c in message)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``attnlab`` on ``argv`` (default: the process's arguments) and return its exit
    status: 0, 2 for a user error (one line on standard error), 130 when interrupted.
    A bare ``attnlab`` prints the help."""
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
        print(f"attnlab {args.command}: error: {_one_line(_in_cli_words(e, args))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (| head): not an error; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError as e:  # a write that failed half way (a full disk) names no file: the output is the one
        name = e.filename or getattr(args, "output", None) or getattr(args, "json", None) or args.command
        print(f"attnlab {args.command}: error: {_one_line(f'{name}: {e.strerror or e}')}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
