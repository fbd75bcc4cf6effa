"""attnlab plot --stage profiles|received|positions: pictures of a model's statistics at any
length (:func:`attnlab.viz._plot_statistics.plot_statistics`), of --text through --model
(:meth:`attnlab.runner.Runner.statistics`) or of a saved statistics JSON
(``ModelStatistics.to_json``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..trace import ModelStatistics
from ._inputs import InputError, read_json_or_matrix, source_name

__all__ = ["plot_statistics_from_args", "statistics_from_args"]


def statistics_from_args(args: argparse.Namespace, check: Callable[[int, int], None] | None = None) -> ModelStatistics:
    """--text's statistics through the --model (every layer and head), ``check(layers, heads)``
    called first where the model's counts are known before it runs; or the statistics JSON
    file INPUT.

    Raises:
        InputError: neither, or options that the model's fixed weights rule out; a file
            that is not a model's statistics (named).
    """
    from ._sequence import refuse_for_model
    from ._transformers import checkpoint_of, in_cli_words, loaded, say_backend

    if args.model is not None:
        refuse_for_model(args)
        if args.text is None:
            raise InputError(f"--stage {args.stage}: expected --text with --model (the text to run)")
        runner = loaded(checkpoint_of(args), "bare")
        if check is not None and runner.layers is not None and runner.heads is not None:
            check(runner.layers, runner.heads)
        stats = in_cli_words(lambda: runner.statistics(args.text, truncation=args.truncate, chat=args.chat))
        say_backend(args, runner)
        return stats
    if args.input is None:
        raise InputError(f"--stage {args.stage}: expected --model and --text, or a statistics JSON file")
    data = read_json_or_matrix(args.input)
    return in_cli_words(lambda: ModelStatistics.from_dict(data, source_name(args.input)))


def plot_statistics_from_args(args: argparse.Namespace) -> None:
    """Draw --stage's view of the statistics to -o: --layer's layers (an index or a list;
    default every layer, the first for positions), --heads' heads (named so when refused)."""
    from ..viz._plot import select_heads
    from ..viz._plot_statistics import chosen_layers, plot_statistics
    from ._transformers import in_cli_words

    layers = None if args.layer in (None, "all") else args.layer
    options = {"layers": "--layer", "heads": "--heads"}

    def chosen(count: int, heads: int) -> None:  # --layer and --heads among the model's, before it runs
        in_cli_words(lambda: (chosen_layers(layers, count, None), select_heads(args.heads, heads)), options)

    stats = statistics_from_args(args, chosen)
    in_cli_words(lambda: plot_statistics(stats, args.output, view=args.stage, layers=layers, heads=args.heads), options)
