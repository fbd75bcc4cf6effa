"""--model on any architecture transformers loads: the five that attnlab runs in NumPy
take that path, the rest run in transformers with attnlab's engine as their attention
(``attnlab.hf``); ``--backend`` forces one, and the command says which ran."""

from __future__ import annotations

import argparse
import contextlib
import functools
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from .._exceptions import AttnlabError, CheckpointError, renamed
from ..trace import ModelTrace
from ..trace._display import shown_name
from ._inputs import InputError

T = TypeVar("T")

__all__ = [
    "BACKENDS",
    "ModelRun",
    "add_model_options",
    "backend_for",
    "check_page_first",
    "in_option_words",
    "is_encoder_decoder",
    "load_on_attnlab",
    "named",
    "run_on_model",
    "say_backend",
    "tokenizer_of",
    "transformers_for",
    "transformers_trace",
]

BACKENDS = ("numpy", "transformers")


def backend_for(args: argparse.Namespace, directory: Path) -> tuple[str, str]:
    """The backend --model runs on, and the model type: --backend, else numpy for the
    architectures attnlab re-implements (their config's model_type) and transformers for
    the rest."""
    from ..models._architectures import ARCHITECTURES

    if directory.is_file():
        return _gguf_backend(args, directory)
    model_type = _model_type(directory)
    native = model_type in ARCHITECTURES
    unread = model_type is None  # attnlab's loader names what is missing
    backend = args.backend or ("numpy" if (native or unread) and args.image is None else "transformers")
    if backend == "numpy" and not native and not unread:
        raise InputError(
            f"--backend numpy: {args.model} is a {model_type!r} model; attnlab runs {', '.join(ARCHITECTURES)} "
            "in NumPy (use --backend transformers)"
        )
    asked = [option for option in ("--chat", "--truncate") if getattr(args, option[2:], False)]
    if backend == "transformers" and asked:
        raise InputError(
            f"{asked[0]}: on attnlab's NumPy models (GPT-2, BERT, Llama, Qwen2, Mistral, GGUF files); "
            f"{args.model} runs in transformers"
        )
    return backend, str(model_type)


def _gguf_backend(args: argparse.Namespace, path: Path) -> tuple[str, str]:
    """The backend of a GGUF --model, and what it holds ("llama, Q4_1, dequantized to
    float32"): numpy for the architectures attnlab reads from GGUF, transformers (which
    dequantizes it itself) for the others, read from its header alone."""
    from ..models._gguf import MODEL_TYPES, read_gguf

    header = read_gguf(path)
    arch = header.architecture
    backend = args.backend or ("numpy" if arch in MODEL_TYPES and args.image is None else "transformers")
    if backend == "numpy" and arch not in MODEL_TYPES:
        raise InputError(
            f"--backend numpy: {args.model} is a GGUF of the architecture {arch!r}; attnlab reads "
            f"{', '.join(MODEL_TYPES)} GGUF files in NumPy (use --backend transformers)"
        )
    how = "dequantized to float32" if backend == "numpy" else "dequantized by transformers"
    return backend, f"{arch}, {header.quantization()}, {how}"


def say_backend(args: argparse.Namespace, backend: str, model_type: str) -> None:
    """The line on stderr that says which path ran --model."""
    name = "attnlab's NumPy model" if backend == "numpy" else "transformers, on attnlab's engine (attnlab.hf)"
    print(f"attnlab: --model {args.model} ({model_type}) ran in {name}", file=sys.stderr)


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
    parser.set_defaults(image=None)  # backend_for's: these commands read text only


@dataclass(frozen=True)
class ModelRun(Generic[T]):
    """What :func:`run_on_model` ran: the model and its tokenizer (None for attnlab's own
    model), the work's result, and the backend and model type for :func:`say_backend`."""

    model: Any
    tokenizer: Any
    result: T
    backend: str
    model_type: str


def run_on_model(
    args: argparse.Namespace,
    load_transformers: Callable[[argparse.Namespace, Path], tuple[Any, Any]],
    work: Callable[[Any, Any], T],
    option_of: dict[str, str],
) -> ModelRun[T]:
    """-o's path checked first, --model loaded on its backend (attnlab's NumPy model, or
    ``load_transformers(args, directory)``: a model and its tokenizer), and ``work(model,
    tokenizer)``, its errors about an argument of ``option_of`` renamed to that option."""
    from ..models import load
    from ..models._checkpoint import locate

    if args.output is not None:
        from ..viz._page import check_path

        check_path(args.output)
    directory = locate(args.model)
    backend, model_type = backend_for(args, directory)
    model, tokenizer = (load(args.model), None) if backend == "numpy" else load_transformers(args, directory)
    named(model, args.model)
    try:
        result = work(model, tokenizer)
    except AttnlabError as error:
        if (message := renamed(error, option_of)) is not None:
            raise InputError(message) from None
        raise
    return ModelRun(model, tokenizer, result, backend, model_type)


def named(model: Any, given: str) -> None:
    """Name ``model`` (attnlab's, or a transformers model) as attnlab shows --model ``given``
    (:func:`~attnlab.trace._display.shown_name`: a hub id, or a checkpoint's folder or file
    without its path), the name its traces, tables and pages carry. A transformers model's
    own is the folder it was read from: a GGUF file's parent, a hub id's cache snapshot."""
    from ..models._model import Model

    if isinstance(model, Model):
        model.name = shown_name(given)
    else:
        model.config.name_or_path = shown_name(given)  # what attnlab.hf names a model by


def check_page_first(
    model: Any, tokenizer: Any, text: str, source: str, added: int = 0, layers: int | None = None
) -> None:
    """The page of ``text`` (and ``added`` tokens after it) through ``model`` (attnlab's, or
    a transformers model and its ``tokenizer``), ``layers`` of its layers (None: every
    one), checked to fit before the work that comes before the page (an ablation of every
    head, the heads' scores, a generation): its shape from the text's tokens and the
    model's config. The page's own check, of the trace after the work, still decides;
    where the tokenizer or the config's sizes are missing, only that check is made."""
    from ..models._model import Model
    from ..viz._page import PageShape, check_page_size

    tokenizer = model.tokenizer if isinstance(model, Model) else getattr(tokenizer, "tokenizer", tokenizer)
    if tokenizer is None:
        return  # the work refuses a text without a tokenizer
    if isinstance(model, Model):
        config, length = model.config, len(tokenizer.encode(text))
    else:
        config = getattr(model.config, "text_config", None) or model.config
        length = len(tokenizer(text)["input_ids"])
    heads, total = getattr(config, "num_attention_heads", None), getattr(config, "num_hidden_layers", None)
    if not isinstance(heads, int) or not isinstance(total, int) or heads < 1:
        return
    width = getattr(config, "head_dim", None) or getattr(config, "hidden_size", 0) // heads
    fewer = "--layer N" if layers is None else ""
    check_page_size(PageShape(length + added, heads, layers or total, (width, width), model=True), source, fewer)


def _model_type(directory: Path) -> str | None:
    """config.json's model_type (read as attnlab's loader reads it), None without a readable one."""
    from ..models._checkpoint import read_config

    try:
        model_type = read_config(directory).get("model_type")
    except (OSError, CheckpointError):
        return None
    # a list or a number is no type: attnlab's loader refuses it by name ("expected one of …")
    return None if model_type is not None and not isinstance(model_type, str) else str(model_type)


def transformers_trace(args: argparse.Namespace, directory: Path, page: bool) -> ModelTrace:
    """The trace of --text (or --image) through the model as transformers builds it:
    --layer's entry, or every one (the default for a ``page``; else the last)."""
    try:
        from .. import hf
        from ..hf._torch import transformers
    except ImportError as error:
        raise InputError(f"--backend transformers: {error}") from None
    with _quiet(transformers):
        model = load_on_attnlab(transformers.AutoModel, directory, f"--model: transformers cannot load {args.model}")
        processor = _processor(transformers, directory)
    hf.check_model(model)
    named(model, args.model)
    inputs: Any = args.text
    if args.image is not None:
        if model.main_input_name != "pixel_values":
            raise InputError(f"--image: {args.model} is not a vision model; give it a text with --text")
        inputs = _image(args.image)
    elif model.main_input_name == "pixel_values":
        raise InputError(f"--model: {args.model} is a vision model; give it a picture with --image FILE")
    layer = ("all" if page else -1) if args.layer is None else args.layer
    return in_option_words(
        args, lambda: hf.trace(model, inputs, tokenizer=processor, layers=None if layer == "all" else layer)
    )


def in_option_words(args: argparse.Namespace, work: Callable[[], T]) -> T:
    """``work()``, its errors as the command's one line: an input's (``text_or_inputs``)
    named by --text or --image, and a transformers model's own refusal of its inputs (a
    checkpoint whose parts do not fit) named by --model."""
    try:
        return work()
    except AttnlabError as error:
        option = "--image" if args.image is not None else "--text"
        if (message := renamed(error, {"text_or_inputs": option})) is not None:
            raise InputError(message) from None
        raise
    except (ValueError, RuntimeError, IndexError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InputError(f"--model: transformers refused {args.model}'s inputs: {first}") from None


def is_encoder_decoder(directory: Path) -> bool:
    """Whether config.json says an encoder-decoder model (T5, BART, Whisper); a GGUF file's
    are read as decoders."""
    if directory.is_file():
        return False
    from ..models._checkpoint import read_config

    try:
        return bool(read_config(directory).get("is_encoder_decoder"))
    except (OSError, CheckpointError):
        return False


def load_on_attnlab(auto_class: Any, directory: Path, failure: str) -> Any:
    """``auto_class.from_pretrained(directory)`` on the attnlab backend (a GGUF file: by its
    folder and ``gguf_file``), its warnings silenced; a checkpoint that transformers cannot
    load is one line, ``failure`` and its error naming the file or field, and one whose
    weights transformers would initialise at random (``missing_keys``: a head the checkpoint
    lacks) is refused by their names; a bare model's (``AutoModel``'s) pooler excepted, which
    reads the last layer's output and nothing attnlab shows reads it."""
    import warnings

    from .. import hf

    _preflight(directory)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if directory.is_file():  # a GGUF file, which transformers reads by its folder and name
                model, info = auto_class.from_pretrained(
                    directory.parent, gguf_file=directory.name, attn_implementation=hf.NAME, output_loading_info=True
                )
            else:
                model, info = auto_class.from_pretrained(
                    directory, attn_implementation=hf.NAME, output_loading_info=True
                )
    except InputError:
        raise
    except Exception as error:  # transformers, huggingface_hub, safetensors and torch raise their own kinds
        raise InputError(f"{failure}: {_loading_error(error, directory)}") from error
    fresh = sorted(set(info.get("missing_keys") or ()) | {str(key[0]) for key in info.get("mismatched_keys") or ()})
    if auto_class.__name__ == "AutoModel":  # the trace and the heads read the attention, never the pooler after it
        fresh = [key for key in fresh if "pooler" not in key.split(".")]
    if fresh:
        raise InputError(
            f"--model {directory}: transformers would initialise {_key_groups(fresh)} at random (not in the "
            "checkpoint); attnlab refuses to show numbers from them"
        )
    return model


def _key_groups(keys: list[str]) -> str:
    """The missing weights by their module ("cls.predictions.*"), or their names where few."""
    groups = sorted({key.rsplit(".", 1)[0] if "." in key else key for key in keys})
    prefixes = sorted({".".join(key.split(".")[:2]) + ".*" if key.count(".") >= 2 else key for key in keys})
    chosen = prefixes if len(prefixes) < len(groups) or len(groups) > 4 else keys
    shown = ", ".join(chosen[:6])
    return shown + (f" and {len(chosen) - 6} more" if len(chosen) > 6 else "")


def _loading_error(error: BaseException, directory: Path) -> str:
    """A loading error in one line naming the file (safetensors, pickle) or field (config)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = " ".join(lines[:2]) if lines and lines[0].endswith(":") else (lines[0] if lines else type(error).__name__)
    kind = type(error).__name__
    if kind == "SafetensorError":
        files = sorted(path.name for path in directory.glob("*.safetensors")) if directory.is_dir() else []
        where = files[0] if len(files) == 1 else "its .safetensors files"
        return f"{where} is not a readable safetensors file ({text})"
    if kind == "UnpicklingError":
        files = sorted(path.name for path in directory.glob("*.bin")) if directory.is_dir() else []
        where = files[0] if len(files) == 1 else "its .bin files"
        return f"{where}: torch's weights_only load refuses it ({text.split('. ')[0]})"
    if "ignore_mismatched_sizes" in text:  # its report of which shapes differ is logged, not raised
        return "config.json's sizes (hidden_size, vocab_size, head_dim and the like) do not fit the weights' shapes"
    if "config" not in text.lower() and "field" not in text.lower():
        text = f"{text} (config.json or its weights)"
    return text


# the files transformers reads from a checkpoint folder besides the weights: settings (at most
# _checkpoint.MAX_JSON bytes each) and vocabularies (at most MAX_TOKENIZER)
_SETTINGS_FILES = (
    "config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
    "preprocessor_config.json", "processor_config.json",
)  # fmt: skip
_VOCABULARY_FILES = ("tokenizer.json", "vocab.json", "vocab.txt", "merges.txt")
# the sizes transformers builds a model from: each, where a config (or its text_config) has it, a positive whole number
_SIZES = (
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
    "vocab_size", "max_position_embeddings", "head_dim",
)  # fmt: skip
# a layer's index in a weight's name: model.layers.3.…, encoder.layer.3.…, h.3.…, blocks.3.…
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)\.")


def _preflight(directory: Path) -> None:
    """What transformers would read of --model, checked before it reads it, so that a
    hostile folder is refused in one line and nothing unbounded is built: each file it
    reads a regular file under a limit (no FIFO, no /dev/zero); config.json a JSON object
    whose sizes are positive whole numbers and whose sliding_window is one; the weights'
    headers readable and their tensors within this machine's memory; and no more layers
    than the weights hold (10⁹ layers would take transformers hours to build). A GGUF file:
    its block count against its blocks.

    Raises:
        CheckpointError, InputError: naming the file or the field.
    """
    from ..models import _checkpoint
    from ..models._checkpoint import exists, read_config

    if directory.is_file():
        _check_gguf_blocks(directory)
        return
    limits = [(name, _checkpoint.MAX_JSON) for name in _SETTINGS_FILES]
    for name, limit in limits + [(name, _checkpoint.MAX_TOKENIZER) for name in _VOCABULARY_FILES]:
        if exists(directory / name):
            _checkpoint.check_file(directory / name, limit)
    config = read_config(directory)
    if "model_type" in config and not isinstance(config["model_type"], str):
        raise InputError(
            f"--model {directory}: config.json's model_type: expected a text, got {config['model_type']!r}"
        )
    sections = [
        (config, ""),
        *([(config["text_config"], "text_config.")] if isinstance(config.get("text_config"), dict) else []),
    ]
    for section, prefix in sections:
        for key in (*_SIZES, "sliding_window"):
            value = section.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise InputError(
                    f"--model {directory}: config.json's {prefix}{key}: expected a positive whole number"
                    f"{' (or null)' if key == 'sliding_window' else ''}, got {value!r}"
                )
    if not (exists(directory / _checkpoint.SINGLE) or exists(directory / _checkpoint.INDEX)):
        return  # pickle weights: transformers reads them with torch's weights_only load, or names why not
    weights = _checkpoint.Weights(directory)
    held = 1 + max((int(m.group(1)) for name in weights if (m := _LAYER_INDEX.search(name))), default=-1)
    for section, prefix in sections:
        layers = section.get("num_hidden_layers")
        if held and layers is not None and layers > held:
            raise InputError(
                f"--model {directory}: config.json's {prefix}num_hidden_layers: expected at most {held}, the layers "
                f"its weights hold, got {layers}"
            )


def _check_gguf_blocks(path: Path) -> None:
    """A GGUF file's tensors within the file, and its block count at most the blocks they
    hold (blk.N.…)."""
    from ..models._gguf import check_extent, read_gguf

    header = read_gguf(path)
    check_extent(header)
    key = f"{header.architecture}.block_count"
    count = header.metadata.get(key)
    held = 1 + max((int(name.split(".")[1]) for name in header.tensors if re.match(r"blk\.\d+\.", name)), default=-1)
    if held and (not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= held):
        raise InputError(
            f"--model {path}: its {key}: expected a whole number in 1..{held}, the blocks its tensors hold, "
            f"got {count!r}"
        )


@contextlib.contextmanager
def _quiet(transformers: Any) -> Iterator[None]:
    """Loading without transformers' progress bars and notices (a command's output is its
    own); its errors still raise. Its GGUF reader draws its own bar ("Converting and
    de-quantizing GGUF tensors…", tqdm.auto's, which ``disable_progress_bar`` does not
    reach): that module's ``tqdm`` is made a disabled one while the model loads."""
    logging = transformers.utils.logging
    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    gguf_reader = _gguf_reader()
    bar = getattr(gguf_reader, "tqdm", None)
    if bar is not None:
        gguf_reader.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        if bar is not None:
            gguf_reader.tqdm = bar
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def _gguf_reader() -> Any:
    """transformers' GGUF reader (the module that dequantizes a GGUF file's tensors), or None."""
    try:
        import transformers.modeling_gguf_pytorch_utils as reader
    except ImportError:  # pragma: no cover - a transformers without GGUF support
        return None
    return reader


def _processor(transformers: Any, directory: Path) -> Any:
    """The directory's processor (an image processor, a speech processor) or tokenizer; a
    GGUF file's tokenizer."""
    if directory.is_file():  # a GGUF file: its tokenizer, from its metadata
        try:
            return transformers.AutoTokenizer.from_pretrained(directory.parent, gguf_file=directory.name)
        except (OSError, ValueError, KeyError, TypeError):
            return None
    for auto in (transformers.AutoProcessor, transformers.AutoTokenizer):
        try:
            return auto.from_pretrained(directory)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


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


def transformers_for(args: argparse.Namespace, directory: Path, runs: str) -> Any:
    """The transformers module, for --model on the transformers backend of a command that
    ``runs`` decoder-only and encoder-only models ("ablate runs")."""
    try:
        from ..hf._torch import transformers
    except ImportError as error:
        raise InputError(f"--backend transformers: {error}") from None
    if is_encoder_decoder(directory):
        raise InputError(
            f"--model: {args.model} is an encoder-decoder model; {runs} decoder-only and encoder-only models"
        )
    return transformers


def tokenizer_of(transformers: Any, args: argparse.Namespace, directory: Path) -> Any:
    """The checkpoint's tokenizer as transformers loads it (a GGUF file's by its folder)."""
    where = {"gguf_file": directory.name} if directory.is_file() else {}
    try:
        return transformers.AutoTokenizer.from_pretrained(directory.parent if where else directory, **where)
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError(f"--model: {args.model} has no tokenizer transformers can load") from None
