"""attnlab evict: what a KV cache may drop, replayed.

Generate --generate tokens greedily after a long prompt (--text or --text-file) with the
whole cache, then replay the generation with each policy (StreamingLLM's sinks and recent
window, H2O's heavy hitters and recent keys, SnapKV's pooled window vote) keeping each
budget of the prompt's keys, and print, per policy and budget, the mean and largest
KL(full ‖ evicted) of the next-token distribution and the top-1 agreement. With --out, also
write there the table (eviction.md, eviction.json), what each policy kept per layer and
key/value head along the text (kept-BUDGET.png) and the error against the budget
(error.png). Runs on attnlab's NumPy models.

Examples::

  attnlab evict --model SmolLM2-135M-Instruct-Q4_1.gguf --text-file prompt.txt
  attnlab evict --model M.gguf --text-file "$(python -c 'import textwrap as t; print(t.__file__)')" --tokens 2048
  attnlab evict --model M.gguf --text-file prompt.txt --policies h2o,snapkv --budgets 10,25,50 --out eviction
  attnlab evict --model gpt2 --text "The cat sat on the mat. The dog sat on the log." --budgets 50 --window 4
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._json import json_text
from ..analysis._kv_policies import POLICIES
from ._inputs import InputError, _bounded
from ._options import at_least
from ._transformers import checkpoint_of, in_cli_words, loaded

if TYPE_CHECKING:
    from ..analysis import Eviction

__all__ = ["OPTIONS", "add_options", "run"]


# evict's argument names, as the options that carry them ("text" is --text or --text-file)
_OPTION_OF = {
    "model": "--model", "policies": "--policies", "budgets": "--budgets", "budget": "--budgets",
    "generate": "--generate", "sinks": "--sinks", "window": "--window", "kernel": "--kernel", "pool": "--pool",
}  # fmt: skip


def _policies(text: str) -> list[str]:
    """An option type: policies separated by commas."""
    names = [name.strip() for name in text.split(",")]
    if not all(name in POLICIES for name in names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected distinct names among {','.join(POLICIES)}, got {text!r}")
    return names


def _budgets(text: str) -> list[float]:
    """An option type: percents in (0, 100] separated by commas."""
    try:
        values = [float(value) for value in text.split(",")]
    except ValueError:
        values = []
    if not values or not all(0 < value <= 100 for value in values):
        raise argparse.ArgumentTypeError(f"expected percents in (0, 100] separated by commas, got {text!r}")
    return [value / 100 for value in values]


def add_options(parser: argparse.ArgumentParser) -> None:
    """evict's options."""
    parser.add_argument("--model", required=True, metavar="NAME|DIR|GGUF", help="a checkpoint attnlab runs in NumPy")
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--text", help="the prompt")
    given.add_argument("--text-file", metavar="FILE", help="the prompt, read from a UTF-8 file")
    parser.add_argument(
        "--policies", type=_policies, default=list(POLICIES), metavar="P,…",
        help=f"among {','.join(POLICIES)} (default: all three)",
    )  # fmt: skip
    parser.add_argument(
        "--budgets", type=_budgets, default=[0.1, 0.25, 0.5], metavar="PERCENTS",
        help="the keys kept, percents of the prompt's (default 10,25,50)",
    )  # fmt: skip
    parser.add_argument(
        "--tokens", type=at_least(2), metavar="N", help="only the prompt's first N tokens (default: all of them)"
    )
    parser.add_argument("--generate", type=at_least(1, 4096), default=32, metavar="N", help="tokens generated (32)")
    parser.add_argument("--sinks", type=at_least(0, 4096), default=4, help="StreamingLLM's first keys kept (4)")
    parser.add_argument("--window", type=at_least(1, 4096), default=32, help="SnapKV's observation window (32)")
    parser.add_argument("--kernel", type=at_least(1, 4097), default=5, help="SnapKV's pooling kernel, odd (5)")
    parser.add_argument("--pool", choices=("avg", "max"), default="avg", help="SnapKV's pooling (avg)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json")
    parser.add_argument("--out", metavar="DIR", help="also write the table and the figures in this folder")
    parser.set_defaults(backend=None, image=None)


OPTIONS = (add_options,)


def run(args: argparse.Namespace) -> None:
    """Read the prompt, load --model in NumPy, replay and print the table (or its JSON)."""
    from ..analysis import evict

    source = "--text" if args.text is not None else "--text-file"
    text = args.text if args.text is not None else _read_text(args.text_file)
    out = None if args.out is None else _folder(args.out)
    checkpoint = checkpoint_of(args)
    if checkpoint.backend != "numpy":
        raise InputError(f"--model: {args.model} runs in transformers; the replay runs on attnlab's NumPy models")
    runner = loaded(checkpoint)
    prompt: Any = text
    if args.tokens is not None:  # the text's first tokens: a text longer than the positions is cut first
        prompt = in_cli_words(lambda: runner.ids(text, cut=True), {"text": source})[: args.tokens]
    settings = {"sinks": args.sinks, "window": args.window, "kernel": args.kernel, "pool": args.pool}
    work = partial(evict, runner, prompt, policies=args.policies, budgets=args.budgets, generate=args.generate)
    result = in_cli_words(partial(work, **settings), {**_OPTION_OF, "text": source})
    if out is not None:
        _write(result, out, args.model)
    print(json_text(result.to_dict()) if args.format == "json" else result.render())


def _read_text(path: str) -> str:
    """The text of --text-file, UTF-8."""
    try:
        return _bounded(Path(path), path).decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"--text-file: {path}: expected UTF-8 text, got a byte 0x{e.object[e.start]:02x}") from None


def _folder(path: str) -> Path:
    """--out, made where missing (its parent must exist)."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--out: {path}: expected a folder, got a file")
    folder.mkdir(exist_ok=True)
    return folder


def _write(result: Eviction, out: Path, model: str) -> None:
    """The table (markdown, JSON) and the figures, in ``out``; their names on stderr."""
    from ..viz._plot_eviction import plot_error, plot_kept

    (out / "eviction.md").write_text(result.render() + "\n", encoding="utf-8")
    (out / "eviction.json").write_text(json_text(result.to_dict()) + "\n", encoding="utf-8")
    about = f"{Path(model).name}: {result.prompt} prompt tokens, {result.kl.shape[-1]} generated"
    mean_kl, top1 = result.kl.mean(axis=-1), result.agree.mean(axis=-1)  # (P, B, T) -> (P, B)
    plot_error(result.budgets, mean_kl, top1, result.policies, out / "error.png", about)
    written = ["eviction.md", "eviction.json", "error.png"]
    for b, budget in enumerate(result.budgets):
        name = f"kept-{budget * 100:g}.png"
        title = f"{about}; budget {budget:.0%} ({result.keys[b]} keys): the cache at the last generated token"
        plot_kept(result.kept[:, b], result.policies, result.prompt, out / name, title)
        written.append(name)
    print(f"attnlab: wrote {', '.join(written)} in {out}", file=sys.stderr)
