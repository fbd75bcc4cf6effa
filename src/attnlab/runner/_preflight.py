"""A checkpoint checked before transformers reads it, and its loading errors in one line:
what transformers would read is bounded and sane before it builds anything from it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .._exceptions import ArgumentError

__all__ = ["key_groups", "loading_error", "preflight"]

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


def key_groups(keys: list[str]) -> str:
    """The missing weights by their module ("cls.predictions.*"), or their names where few."""
    groups = sorted({key.rsplit(".", 1)[0] if "." in key else key for key in keys})
    prefixes = sorted({".".join(key.split(".")[:2]) + ".*" if key.count(".") >= 2 else key for key in keys})
    chosen = prefixes if len(prefixes) < len(groups) or len(groups) > 4 else keys
    shown = ", ".join(chosen[:6])
    return shown + (f" and {len(chosen) - 6} more" if len(chosen) > 6 else "")


def loading_error(error: BaseException, directory: Path) -> str:
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


def preflight(directory: Path, config: dict[str, Any] | None = None, header: Any = None) -> None:
    """What transformers would read of a checkpoint (a folder, or a GGUF file), checked before it reads it, so that a
    hostile folder is refused in one line and nothing unbounded is built: each file it
    reads a regular file under a limit (no FIFO, no /dev/zero); config.json a JSON object
    whose sizes are positive whole numbers and whose sliding_window is one; the weights'
    headers readable and their tensors within this machine's memory; and no more layers
    than the weights hold (10⁹ layers would take transformers hours to build). A GGUF file:
    its block count against its blocks. ``config`` and ``header``: config.json or the GGUF
    header where already read (None: read here).

    Raises:
        CheckpointError, ArgumentError: naming the file or the field (``model``).
    """
    from .._io import check_file, exists
    from ..models import _checkpoint
    from ..models._checkpoint import read_config

    if directory.is_file():
        _check_gguf_blocks(directory, header)
        return
    limits = [(name, _checkpoint.MAX_JSON) for name in _SETTINGS_FILES]
    for name, limit in limits + [(name, _checkpoint.MAX_TOKENIZER) for name in _VOCABULARY_FILES]:
        if exists(directory / name):
            check_file(directory / name, limit)
    config = read_config(directory) if config is None else config
    if "model_type" in config and not isinstance(config["model_type"], str):
        raise ArgumentError(
            f"model {directory}: config.json's model_type: expected a text, got {config['model_type']!r}",
            "model",
        )
    sections = [
        (config, ""),
        *([(config["text_config"], "text_config.")] if isinstance(config.get("text_config"), dict) else []),
    ]
    for section, prefix in sections:
        for key in (*_SIZES, "sliding_window"):
            value = section.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ArgumentError(
                    f"model {directory}: config.json's {prefix}{key}: expected a positive whole number"
                    f"{' (or null)' if key == 'sliding_window' else ''}, got {value!r}",
                    "model",
                )
    if not (exists(directory / _checkpoint.SINGLE) or exists(directory / _checkpoint.INDEX)):
        return  # pickle weights: transformers reads them with torch's weights_only load, or names why not
    weights = _checkpoint.Weights(directory)
    held = 1 + max((int(m.group(1)) for name in weights if (m := _LAYER_INDEX.search(name))), default=-1)
    for section, prefix in sections:
        layers = section.get("num_hidden_layers")
        if held and layers is not None and layers > held:
            raise ArgumentError(
                f"model {directory}: config.json's {prefix}num_hidden_layers: expected at most {held}, the layers "
                f"its weights hold, got {layers}",
                "model",
            )


def _check_gguf_blocks(path: Path, header: Any = None) -> None:
    """A GGUF file's tensors within the file, and its block count at most the blocks they
    hold (blk.N.…)."""
    from ..models._gguf import check_extent, read_gguf

    header = read_gguf(path) if header is None else header
    check_extent(header)
    key = f"{header.architecture}.block_count"
    count = header.metadata.get(key)
    held = 1 + max((int(name.split(".")[1]) for name in header.tensors if re.match(r"blk\.\d+\.", name)), default=-1)
    if held and (not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= held):
        raise ArgumentError(
            f"model {path}: its {key}: expected a whole number in 1..{held}, the blocks its tensors hold, "
            f"got {count!r}",
            "model",
        )
