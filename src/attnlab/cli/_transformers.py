"""--model on any architecture transformers loads, opened by the library's one opener
(:func:`attnlab.runner.open_checkpoint` and :meth:`~attnlab.runner.Checkpoint.load`): the
five that attnlab runs in NumPy take that path, the rest run in transformers with
attnlab's engine as their attention (``attnlab.hf``); ``--backend`` forces one, and the
command says which ran. What is left here is the command line's: its options, its own
refusals, and the library's errors named by its options (through ``.argument``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .._exceptions import AttnlabError, renamed
from ..runner import BACKENDS, Checkpoint, Runner
from ..trace import ModelTrace
from ._inputs import InputError

T = TypeVar("T")

__all__ = [
    "BACKENDS",
    "ModelRun",
    "add_model_options",
    "check_page_first",
    "checkpoint_of",
    "in_cli_words",
    "in_option_words",
    "known_length",
    "loaded",
    "model_trace",
    "open_model",
    "run_on_model",
    "say_backend",
]

# the opener's and the runner's argument names, as the options that carry them
_OPENER_OPTIONS = {"model": "--model", "backend": "--backend", "truncation": "--truncate", "chat": "--chat"}
# an analysis' names of its model and tokenizer (ablate's, head_types'), which --model gives
_MODEL_ARGUMENTS = {"model": "--model", "model_or_trace": "--model", "tokenizer": "--model"}


def in_cli_words(work: Callable[[], T], options: dict[str, str] = _OPENER_OPTIONS) -> T:
    """``work()``, its library errors about an argument of ``options`` named by that option."""
    try:
        return work()
    except AttnlabError as error:
        if (message := renamed(error, options)) is not None:
            raise InputError(message) from None
        raise


def checkpoint_of(args: argparse.Namespace) -> Checkpoint:
    """--model found and read once, its backend chosen (--backend, else numpy where attnlab
    implements it; transformers for --image); --chat and --truncate refused on transformers."""
    from ..runner import open_checkpoint
    from ..runner._runner import check_numpy_only

    image = getattr(args, "image", None) is not None
    checkpoint = in_cli_words(lambda: open_checkpoint(args.model, backend=args.backend, image=image))
    chat, truncation = getattr(args, "chat", False), getattr(args, "truncate", False)
    in_cli_words(lambda: check_numpy_only(checkpoint.backend, args.model, truncation, chat))  # before it loads
    return checkpoint


def loaded(checkpoint: Checkpoint, head: str = "any") -> Runner:
    """The checkpoint loaded (:meth:`~attnlab.runner.Checkpoint.load`), its errors named by the options."""
    return in_cli_words(lambda: checkpoint.load(head))


def open_model(args: argparse.Namespace, head: str = "any", one_stack: bool = False) -> Runner:
    """--model opened on its backend; ``one_stack``: an encoder-decoder model refused
    first, as its runner refuses it (named --model)."""
    checkpoint = checkpoint_of(args)
    if one_stack:
        in_cli_words(checkpoint.check_one_stack)
    return loaded(checkpoint, head)


def say_backend(args: argparse.Namespace, runner: Runner) -> None:
    """The line on stderr that says which path ran --model."""
    name = "attnlab's NumPy model" if runner.backend == "numpy" else "transformers, on attnlab's engine (attnlab.hf)"
    print(f"attnlab: --model {args.model} ({runner.description}) ran in {name}", file=sys.stderr)


def add_model_options(parser: argparse.ArgumentParser, page: str) -> None:
    """--backend, --format and -o: the options of a command that runs --model on either
    backend and prints a table or its JSON (ablate, heads); ``page`` is -o's help."""
    parser.add_argument(
        "--backend", choices=BACKENDS,
        help="numpy: attnlab's own model (GPT-2, BERT, Llama, Mistral, Qwen2); transformers: the model as "
        "transformers builds it, on attnlab's engine (pip install 'attnlab[hf]'). Default: numpy where it can",
    )  # fmt: skip
    parser.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json")
    parser.add_argument("-o", "--output", metavar="PAGE.html", help=page)
    parser.set_defaults(image=None)  # these commands read text only


@dataclass(frozen=True)
class ModelRun(Generic[T]):
    """What :func:`run_on_model` ran: the model's runner and the work's result."""

    runner: Runner
    result: T


def run_on_model(
    args: argparse.Namespace, head: str, work: Callable[[Runner], T], option_of: dict[str, str]
) -> ModelRun[T]:
    """-o's path checked first, --model opened on its backend (a transformers model with
    ``head``, an encoder-decoder refused before it loads: the work reads one stack), and
    ``work(runner)``, its errors about an argument of ``option_of`` (or the model's)
    renamed to that option."""
    if args.output is not None:
        from ..viz._page import check_path

        check_path(args.output)
    runner = open_model(args, head, one_stack=True)
    return ModelRun(runner, in_cli_words(lambda: work(runner), {**_MODEL_ARGUMENTS, **option_of}))


def check_page_first(
    runner: Runner, text: str, source: str, added: int = 0, layers: int | None = None, cut: bool = False
) -> None:
    """The page of ``text`` (``cut``: to the model's positions; and ``added`` tokens after
    it) through ``layers`` of the model's layers (None: every one), checked to fit before
    the work that comes before the page (an ablation of every head, the heads' scores, a
    generation): its shape from the text's tokens and the model's config. The page's own
    check, of the trace after the work, still decides; where the tokenizer or the config's
    sizes are missing, or the text is one the work refuses, only that check is made."""
    from ..viz._page import check_page_size

    length = known_length(runner, text, cut)
    if length is None:
        return
    shape = runner.page_shape(length + added, layers)
    if shape is not None:
        check_page_size(shape, source, "--layer N" if layers is None else "")


def known_length(runner: Runner, text: str | None, cut: bool = False) -> int | None:
    """The tokens of ``text`` (``cut`` to the model's positions) before the model runs;
    None where they are not known without it (a picture, no tokenizer, a text the model
    refuses: its trace says why)."""
    if text is None:
        return None
    try:
        return len(runner.ids(text, "text", cut=cut))
    except AttnlabError:
        return None


def model_trace(args: argparse.Namespace, runner: Runner, page: bool) -> ModelTrace:
    """The trace of --text (or --image) through the runner, either backend: --layer's
    entry, or every one (the default for a ``page``; else the last), --truncate and --chat
    passed on (the transformers backend refuses them, :meth:`Runner.trace`)."""
    reads = getattr(runner.model, "main_input_name", "input_ids")  # attnlab's models read ids
    inputs: Any = args.text
    if args.image is not None:
        if reads != "pixel_values":
            raise InputError(f"--image: {args.model} is not a vision model; give it a text with --text")
        inputs = _image(args.image)
    elif reads == "pixel_values":
        raise InputError(f"--model: {args.model} is a vision model; give it a picture with --image FILE")
    layer = ("all" if page else -1) if args.layer is None else args.layer
    truncation, chat = getattr(args, "truncate", False), getattr(args, "chat", False)
    layers = None if layer == "all" else layer

    def traced() -> ModelTrace:
        return runner.trace(inputs, layers, truncation=truncation, chat=chat)

    return in_option_words(args, traced, runner.backend == "transformers")  # a raw error of attnlab's is a bug


def in_option_words(args: argparse.Namespace, work: Callable[[], T], transformers: bool = True) -> T:
    """``work()``, its errors as the command's one line: an input's (``text_or_inputs``)
    named by --text or --image, and (``transformers``) a transformers model's own refusal
    of its inputs (a checkpoint whose parts do not fit) named by --model."""
    try:
        option = "--image" if args.image is not None else "--text"
        return in_cli_words(work, {"text_or_inputs": option})
    except (ValueError, RuntimeError, IndexError) as error:
        if isinstance(error, AttnlabError) or not transformers:
            raise
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InputError(f"--model: transformers refused {args.model}'s inputs: {first}") from None


def _image(path: str) -> Any:
    """The picture of --image, read with Pillow (an RGB image)."""
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise InputError("--image: reading a picture needs Pillow: pip install 'attnlab[hf]'") from None
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except FileNotFoundError:
        raise InputError(f"--image: no such file: {path}") from None
    except Image.DecompressionBombError as error:
        raise InputError(f"--image: {path} is too large a picture for Pillow to open safely ({error})") from None
    except (UnidentifiedImageError, OSError) as error:
        raise InputError(f"--image: {path} is not a picture Pillow can read ({error})") from None
