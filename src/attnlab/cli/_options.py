"""What every command shares: the one-line usage error, option types, a command's
help layout, and the output options of demo and trace."""

from __future__ import annotations

import argparse
import difflib
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any, NoReturn

from .._validation import fail
from ..engine._statistics import LOCAL_KEYS, SINK_KEYS, TOP_K
from ..trace import ModelTrace
from ..trace._labels import LANGUAGES
from ..trace._trace import Trace

__all__ = [
    "STATS_DEFAULTS",
    "Parser",
    "TextsAction",
    "add_command",
    "add_lang_option",
    "add_output_options",
    "add_stats_options",
    "at_least",
    "nearest",
    "positive_number",
    "print_output",
    "print_trace",
    "window_sides",
]


def nearest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``word`` (difflib's ratio, at least 0.6), or None."""
    matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line (exit status 2) and names the
    nearest choice or option to a mistyped one ("did you mean --causal?"), as Python
    3.14's ``suggest_on_error`` does, on every Python we support."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """argparse's check of a choice (a command, --format's value), with the nearest one."""
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as e:
            choices = [str(choice) for choice in action.choices or ()]
            match = nearest(str(value), choices) if choices else None
            if match is None:
                raise
            raise argparse.ArgumentError(action, f"{e.message}; did you mean {match!r}?") from None

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        """argparse's, but an unrecognized argument is an error here, in the parser that
        knows the options (a command's), with the nearest of them when one is close."""
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            options = [option for action in self._actions for option in action.option_strings]
            unknown = next((word for word in extras if word.startswith("-") and len(word) > 1), None)
            match = nearest(unknown.partition("=")[0], options) if unknown else None
            hint = f"; did you mean {match}?" if match else ""
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return namespace, extras


class TextsAction(argparse.Action):
    """--text, which ``attnlab view --model`` takes twice (two texts compared): ``text``
    is the first, ``texts`` every one given."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        texts = [*(getattr(namespace, "texts", None) or []), values]
        namespace.texts, namespace.text = texts, texts[0]


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


def positive_number(text: str) -> float:
    """An option type: a finite number > 0 (argparse reports anything else as a usage error)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def window_sides(text: str) -> tuple[int | None, int | None]:
    """An option type: ``L,R``, the keys a query sees on each side of itself, each an
    integer >= 0, or empty or ``none`` for unbounded (``2,0``: itself and the two before)."""
    expected = "L,R, each an integer >= 0 or empty or 'none' (unbounded), such as 2,0"
    parts = text.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    sides: list[int | None] = []
    for part in (p.strip() for p in parts):
        if part.lower() in ("", "none"):
            sides.append(None)
        elif part.isdecimal() and part.isascii():
            sides.append(int(part))
        else:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return sides[0], sides[1]


class HelpFormatter(argparse.HelpFormatter):
    """A command's --help: its description wrapped to the terminal's width, its examples
    (the epilog, "examples:" and one command a line) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


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
        formatter_class=HelpFormatter,
    )
    for add_options in command.OPTIONS:
        add_options(parser)
    parser.set_defaults(run=command.run)


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """--format, --precision and --lang: how demo and trace print a trace."""
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="text (default) or json (full precision)"
    )
    parser.add_argument("--precision", type=at_least(0, 17), default=4, help="decimals in the text, 0..17 (default 4)")
    add_lang_option(parser, "zh", "labels: zh (default, as the article) or en")


def add_stats_options(parser: argparse.ArgumentParser) -> None:
    """--stats and its options: trace's statistics of every layer's and head's weights (JSON)."""
    group = parser.add_argument_group("statistics at any length (with --model and --text)")
    group.add_argument(
        "--stats",
        action="store_true",
        help="instead of the weights, the statistics of every layer's and head's weights as JSON (per query: "
        "entropy, largest weight, top keys, sink and local shares; per key: the attention it receives; per "
        "head: the weight by distance), exact and without any L×L matrix: at any length the model takes",
    )
    for name, metavar, what in (
        ("top_k", "K", "the keys of largest weight each query keeps"),
        ("sink_keys", "S", "the first keys, whose weight is the sink share"),
        ("local_keys", "W", "the last keys a query sees, whose weight is the local share"),
    ):
        group.add_argument(
            f"--{name.replace('_', '-')}", type=at_least(1), metavar=metavar,
            help=f"with --stats: {what} (default {STATS_DEFAULTS[name]})",
        )  # fmt: skip
    group.add_argument(
        "--out", metavar="FILE.json", help="with --stats: write the JSON there (default: standard output)"
    )


STATS_DEFAULTS = {
    "top_k": TOP_K,
    "sink_keys": SINK_KEYS,
    "local_keys": LOCAL_KEYS,
}  # --stats' sizes: the engine's defaults


def add_lang_option(parser: argparse.ArgumentParser, default: str, help_text: str) -> None:
    """--lang, zh or en: the language of what a command prints (demo, trace) or writes (view's page)."""
    parser.add_argument("--lang", choices=LANGUAGES, default=default, help=help_text)


TERMINAL_LIMIT = 10**6  # bytes: more than this on a terminal is refused (see print_trace)


def print_trace(trace: Trace | ModelTrace, args: argparse.Namespace, title: str | None = None) -> None:
    """Print ``trace`` as the output options ask: JSON, or text in --lang with --precision decimals.

    More than :data:`TERMINAL_LIMIT` bytes onto a terminal is refused, nothing printed:
    megabytes of numbers scroll past unread, and a note beside them would scroll away with
    them; the error says how to keep the output instead (a file, a pager). A pipe or a
    file gets everything.

    Raises:
        ArgumentError: the output is over the limit and standard output is a terminal.
    """
    if args.format == "json":
        text = trace.to_json()
    elif isinstance(trace, ModelTrace):
        text = trace.render(lang=args.lang, precision=args.precision)
    else:
        text = trace.render(lang=args.lang, precision=args.precision, title=title)
    print_output(text, "json" if args.format == "json" else "txt")


def print_output(text: str, what: str) -> None:
    """Print ``text`` (``what``: "json" or "txt", for the advice), but more than
    :data:`TERMINAL_LIMIT` bytes onto a terminal is refused, nothing printed (see
    :func:`print_trace`).

    Raises:
        ArgumentError: the output is over the limit and standard output is a terminal.
    """
    size = len(text.encode("utf-8", "backslashreplace"))
    if size > TERMINAL_LIMIT and sys.stdout.isatty():
        raise fail(
            "output",
            f"at most 1 MB on a terminal: write it to a file (add `> trace.{what}`"
            + ("" if what == "json" else ", or `--format json > trace.json`")
            + ") or page it (`| less`)",
            f"{size / 1e6:.1f} MB",
        )
    print(text)
