"""What every command shares: the one-line usage error, option types, a command's
help layout, and the output options of demo and trace."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from types import ModuleType
from typing import NoReturn

from ..trace import ModelTrace
from ..trace._trace import LANGUAGES, Trace

__all__ = ["Parser", "add_command", "add_output_options", "at_least", "print_trace"]


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An option type: an integer ≥ ``minimum`` (and ≤ ``maximum`` when given); argparse
    reports anything else as a usage error."""

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


def add_command(commands: argparse._SubParsersAction, command: ModuleType) -> None:
    """Add the command that module ``command`` is (``cli._plot`` is ``plot``): its help
    from the module's docstring, whose first line reads ``attnlab NAME: summary.``, then a
    paragraph of description (one line in --help) and the examples after ``Examples::``;
    then the option groups of its ``OPTIONS`` and its ``run``."""
    name = command.__name__.rpartition("._")[2]
    heading, description, examples = (command.__doc__ or "").strip().split("\n\n", 2)
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=heading.removeprefix(f"attnlab {name}: ").removesuffix("."),
        description=" ".join(description.split("\n")),
        epilog="examples:\n" + examples.removeprefix("Examples::\n\n"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for add_options in command.OPTIONS:
        add_options(parser)
    parser.set_defaults(run=command.run)


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """--format, --precision and --lang: how demo and trace print a trace."""
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="text (default) or json (full precision)"
    )
    parser.add_argument("--precision", type=at_least(0, 17), default=4, help="decimals in the text (default 4)")
    parser.add_argument("--lang", choices=LANGUAGES, default="zh", help="labels: zh (default, as the article) or en")


def print_trace(trace: Trace | ModelTrace, args: argparse.Namespace, title: str | None = None) -> None:
    """Print ``trace`` as the output options ask: JSON, or text in --lang with --precision decimals."""
    if args.format == "json":
        print(trace.to_json())
    elif isinstance(trace, ModelTrace):
        print(trace.render(lang=args.lang, precision=args.precision))
    else:
        print(trace.render(lang=args.lang, precision=args.precision, title=title))
