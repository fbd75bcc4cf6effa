"""A checkpoint on disk: where it is, its config.json, and its weights, memory-mapped.

A checkpoint is a directory holding ``config.json``, the weights as ``model.safetensors``
or shards listed in ``model.safetensors.index.json``, and a tokenizer. A hub id
(``gpt2``, ``Qwen/Qwen2.5-0.5B``) is looked up in the local Hugging Face cache first and
downloaded through ``huggingface_hub`` only when that is allowed (``HF_HUB_OFFLINE``).

safetensors is read here rather than through the ``safetensors`` package: its NumPy
reader copies every tensor and knows no bfloat16, and the format is small (an 8-byte
header length, a JSON header, the raw bytes). Every offset and size in the header is
checked against the file before a byte is used, so a truncated or corrupted file is an
error, never garbage. Pickle (``pytorch_model.bin``) is never read.
"""

from __future__ import annotations

import errno
import itertools
import json
import math
import os
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._exceptions import CheckpointError
from .._io import exists, file_kind, read_bounded
from .._validation import Array, MissingDependencyError, fail, non_finite_counts

__all__ = [
    "MAX_JSON",
    "MAX_TOKENIZER",
    "CheckpointError",
    "WeightSource",
    "Weights",
    "locate",
    "map_file",
    "non_finite",
    "read_config",
    "write_safetensors",
]

CONFIG = "config.json"
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
# The files a model needs, for a download: weights, config and every tokenizer format.
WANTED = [
    "config.json",
    "generation_config.json",
    "*.safetensors",
    INDEX,
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
]
MAX_HEADER = 100 * 2**20  # the format's own limit on the JSON header
# The most bytes read from a checkpoint's small files: config.json, generation_config.json,
# tokenizer_config.json, a shard index, a chat template (real ones are kilobytes) ...
MAX_JSON = 64 * 2**20
# ... and from its tokenizer.json and vocabulary files (the largest real ones, Gemma's and
# Llama 3's, are tens of MiB).
MAX_TOKENIZER = 1024 * 2**20
BUILTIN = "builtin:"  # the checkpoints that ship inside attnlab: builtin:coref
GGUF_MAGIC = b"GGUF"  # the first bytes of a GGUF file (llama.cpp's single-file checkpoints: _gguf)

# safetensors dtype names -> NumPy; BF16 is read as its raw 16 bits (see _as_float).
_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}


CONFIG = "config.json"


def config_error(text: str) -> CheckpointError:
    """A refusal of a setting of config.json, "config.json: key: expected …, got …", whose
    ``.argument`` is "config.json", so that a reader of settings from elsewhere (a GGUF
    file's metadata) renames its source by ``_exceptions.renamed``."""
    return CheckpointError(f"{CONFIG}: {text}", CONFIG)


# what names a checkpoint, as a refusal of one says
CHECKPOINT = "a checkpoint folder, a .gguf file, builtin:NAME or a hub id"


def locate(name_or_dir: str | os.PathLike[str]) -> Path:
    """The directory of a checkpoint: ``name_or_dir`` itself when it is a directory or a
    GGUF file, else a hub id found in the local cache or downloaded."""
    if not isinstance(name_or_dir, (str, os.PathLike)):
        raise fail("name_or_dir", f"{CHECKPOINT} (str)", type(name_or_dir).__name__, TypeError)
    if not str(name_or_dir).strip():  # Path("") is ".": the working directory, silently
        raise CheckpointError(f"name_or_dir: expected {CHECKPOINT}, got {str(name_or_dir)!r}")
    try:
        path = Path(name_or_dir).expanduser()
    except RuntimeError:  # ~nosuchuser: a home that cannot be found
        raise CheckpointError(
            f"name_or_dir: expected {CHECKPOINT}, got {str(name_or_dir)!r} (no such user's home directory)"
        ) from None
    if path.is_dir():
        return path
    if path.is_file():
        return _single_file(path)
    if exists(path) and path.resolve().exists():  # there, but neither: a FIFO, a device, a socket
        raise CheckpointError(
            f"name_or_dir: expected {CHECKPOINT}, got {str(path)!r} ({file_kind(path.resolve().stat().st_mode)})"
        )
    name = str(name_or_dir)
    if name.startswith(BUILTIN):
        return _builtin(name[len(BUILTIN) :])
    if path.suffix.lower() == ".gguf":  # a file's name, never a hub id: not one to download
        raise CheckpointError(f"name_or_dir: expected {CHECKPOINT}, got {name!r} (no such file)")
    if path.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1 or not name.strip():
        raise CheckpointError(f"name_or_dir: expected {CHECKPOINT}, got {name!r} (no such directory)")
    return _from_hub(name)


def _single_file(path: Path) -> Path:
    """A GGUF file (named ``*.gguf`` or starting with its magic bytes) as itself; any
    other file is refused, saying what it is."""
    try:
        with path.open("rb") as file:
            head = file.read(8)
    except OSError as error:
        raise CheckpointError(f"name_or_dir: {path} cannot be read ({error.strerror or error})") from None
    if path.suffix.lower() == ".gguf" or head[:4] == GGUF_MAGIC:
        return path
    if path.suffix == ".safetensors" or path.name == CONFIG:
        what = f"a file of a checkpoint; pass its directory, {path.parent}"
    else:
        what = "a file that is not GGUF"
    raise CheckpointError(f"name_or_dir: expected {CHECKPOINT}, got {str(path)!r} ({what})")


def _builtin(name: str) -> Path:
    """A checkpoint shipped in the package (attnlab/builtin/NAME)."""
    from importlib.resources import files

    root = Path(str(files("attnlab").joinpath("builtin")))
    known = sorted(p.name for p in root.iterdir() if (p / CONFIG).is_file()) if root.is_dir() else []
    if name not in known:
        raise CheckpointError(
            f"name_or_dir: expected one of {', '.join(BUILTIN + k for k in known) or 'no built-in model'}, "
            f"got {BUILTIN + name!r}"
        )
    return root / name


def _from_hub(repo_id: str) -> Path:
    try:
        import huggingface_hub
        from huggingface_hub import constants
    except ImportError:
        raise MissingDependencyError(
            f"name_or_dir: {repo_id!r} is not a directory; loading a hub id needs huggingface_hub: "
            "pip install 'attnlab[models]'"
        ) from None
    try:  # the cache first: no network at all when the files are there
        return Path(huggingface_hub.snapshot_download(repo_id, allow_patterns=WANTED, local_files_only=True))
    except Exception as cached_error:  # any miss falls through to the download
        if constants.HF_HUB_OFFLINE:
            raise CheckpointError(
                f"name_or_dir: {repo_id!r} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
                f"HF_HUB_OFFLINE is set; {_what_works_offline(repo_id)}"
            ) from cached_error
    try:
        return Path(huggingface_hub.snapshot_download(repo_id, allow_patterns=WANTED, etag_timeout=5))
    except Exception as error:  # network, authentication, unknown repository
        reason = (str(error).strip().splitlines() or [""])[0]
        raise CheckpointError(
            f"name_or_dir: {repo_id!r} is neither a directory nor in the Hugging Face cache "
            f"({constants.HF_HUB_CACHE}), and downloading it failed ({type(error).__name__}: {reason}); "
            f"{_what_works_offline(repo_id)}"
        ) from error


def _what_works_offline(repo_id: str) -> str:
    """The end of a missed hub id's error: what loads without a network, and how to get
    ``repo_id`` into the cache."""
    return (
        f"without a network, builtin:coref loads (it ships with attnlab); to get {repo_id} into the cache, run "
        f"`hf download {repo_id}` (or `huggingface-cli download {repo_id}`) on a machine with a network and copy "
        "the cache here, or pass the checkpoint's local directory"
    )


def available_memory() -> int | None:
    """The machine's physical memory in bytes, or None where the system does not say
    (a module-level function, so that tests can lower it)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def check_memory(path: Path, numbers: int, itemsize: int, how: str) -> None:
    """Refuse, from a header alone, weights that would not fit in this machine's memory:
    ``numbers`` of them at ``itemsize`` bytes each (``how``: "once dequantized", "as float32").

    Raises:
        CheckpointError: naming the file, the size it needs and the memory there is.
    """
    needed, memory = numbers * itemsize, available_memory()
    if memory is not None and needed > memory:
        raise CheckpointError(
            f"{path}: its tensors take {needed / 2**30:.1f} GiB {how}, more than this machine's "
            f"{memory / 2**30:.1f} GiB of memory; expected a smaller model"
        )


def map_file(path: Path, offset: int = 0, size: int | None = None) -> Array:
    """``size`` bytes of ``path`` from ``offset`` (None: to the end), memory-mapped read-only
    as uint8: the system reads a page when it is used. Every file attnlab reads tensors
    from (safetensors, GGUF) is mapped here.

    Raises:
        CheckpointError: the system refuses the mapping (a file larger than the address
            space a memory limit leaves the process: ENOMEM), naming the file.
    """
    try:
        return np.memmap(path, dtype=np.uint8, mode="r", offset=offset, shape=None if size is None else (size,))
    except OSError as error:
        length = path.stat().st_size - offset if size is None else size
        why = error.strerror or str(error)
        if error.errno == errno.ENOMEM:
            why += "; under a limit on this process's memory, such as ulimit -v, no file larger than it maps"
        raise CheckpointError(f"{path}: mapping its {length:,} bytes into memory failed ({why})") from None


def non_finite(tensor: Array) -> str | None:
    """What in ``tensor`` is not a finite number ("3 NaN and 1 +Inf of its 1,024 numbers"),
    or None when every number is finite (or it holds no floats): the one check of every
    weight attnlab loads (safetensors, GGUF, a transformers model's parameters), by
    :func:`~attnlab._validation.non_finite_counts`."""
    counts = non_finite_counts(tensor)
    if not counts:
        return None
    return " and ".join(f"{count:,} {kind}" for kind, count in counts.items()) + f" of its {tensor.size:,} numbers"


def read_config(directory: Path, name: str = CONFIG) -> dict[str, Any]:
    """config.json (or another JSON file of the checkpoint) as a dict."""
    path = directory / name
    if not exists(path):
        raise CheckpointError(f"name_or_dir: {directory} has no {name}; expected a Hugging Face checkpoint directory")
    data = read_bounded(path, MAX_JSON)
    try:
        config = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise CheckpointError(f"{path}: expected a JSON object, got unreadable JSON ({error})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(config).__name__}")
    return config


class WeightSource(Mapping[str, Array]):
    """What the architectures read weights from: tensors by their Hugging Face names,
    ``directory`` (the checkpoint's directory, or its GGUF file, as errors name it) and
    :meth:`get_as`. :class:`Weights` reads safetensors; ``_gguf.GGUFWeights`` a GGUF file."""

    directory: Path

    def get_as(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> Array:
        """Tensor ``name`` of the expected ``shape`` as ``dtype``, once every number in it
        is finite (checked as ``dtype``: a float64 weight beyond float32's range is +Inf
        or -Inf as float32).

        Raises:
            CheckpointError: no such tensor, one of another shape or kind, or one holding a
                NaN or an infinity (naming it, and how many numbers).
        """
        tensor = self._read_as(name, shape, dtype)
        found = non_finite(tensor)
        if found is not None:
            raise CheckpointError(f"{self.label(name)}: expected finite numbers as {tensor.dtype}, got {found}")
        return tensor

    def label(self, name: str) -> str:
        """Tensor ``name`` as the messages name it: the file's (or directory's) path and
        the tensor's name in it."""
        return f"{self.directory}: the weight {name!r}"

    def _read_as(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> Array:
        """:meth:`get_as` without the check of its numbers."""
        raise NotImplementedError


class Weights(WeightSource):
    """A checkpoint's tensors by name, each a read-only view of a memory-mapped file
    (bfloat16 as its raw uint16 bits: :meth:`get` converts)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._tensors: dict[str, Array] = {}
        self._bf16: set[str] = set()
        for file in _weight_files(directory):
            for name, (tensor, is_bf16) in _read_safetensors(file).items():
                self._tensors[name] = tensor
                if is_bf16:
                    self._bf16.add(name)
        # every weight is read as float32 at least (float16 and bfloat16 widened): refused from the headers
        # alone where that cannot fit, before any is converted
        check_memory(directory, sum(t.size for t in self._tensors.values()), 4, "as float32")

    def __getitem__(self, name: str) -> Array:
        return self._tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def _read_as(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> Array:
        """Tensor ``name`` of the expected ``shape`` as ``dtype``: the mapped bytes
        themselves when the dtypes agree, else a converted copy."""
        if name not in self._tensors:
            raise CheckpointError(f"{self.directory}: the weight {name!r} is missing")
        tensor = self._tensors[name]
        if tensor.shape != shape:
            raise CheckpointError(f"{self.directory}: the weight {name!r}: expected shape {shape}, got {tensor.shape}")
        if name not in self._bf16 and tensor.dtype.kind != "f":  # I32 or BOOL numbers are no weights (as in torch)
            kind = next(k for k, d in _DTYPES.items() if d == tensor.dtype)
            raise CheckpointError(f"{self.directory}: the weight {name!r}: expected F64, F32, F16 or BF16, got {kind}")
        if name in self._bf16:  # bfloat16 is the top half of a float32: widen the bits
            tensor = (tensor.astype(np.uint32) << 16).view(np.float32)
        if tensor.dtype == dtype:
            return tensor
        with np.errstate(over="ignore"):  # a float64 beyond float32's range: ±Inf, which get_as refuses by name
            return tensor.astype(dtype)


def _weight_files(directory: Path) -> list[Path]:
    index = directory / INDEX
    if exists(index):
        data = read_bounded(index, MAX_JSON)
        try:
            weight_map = json.loads(data.decode("utf-8"))["weight_map"]
            files = sorted(set(weight_map.values()))
            if not all(isinstance(f, str) for f in files):
                raise TypeError
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, KeyError, TypeError, AttributeError):
            raise CheckpointError(f"{index}: expected a JSON object with a 'weight_map' of names to files") from None
        outside = [f for f in files if Path(f).name != f]
        if outside:
            raise CheckpointError(f"{index}: expected shard files in {directory}, got paths: {', '.join(outside)}")
        missing = [f for f in files if not (directory / f).is_file()]
        if missing:
            raise CheckpointError(f"{index} lists shards that are not in {directory}: {', '.join(missing)}")
        return [directory / f for f in files]
    if (directory / SINGLE).is_file():
        return [directory / SINGLE]
    if any((directory / name).is_file() for name in ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        raise CheckpointError(
            f"{directory}: only pytorch_model.bin (pickle), which attnlab never loads; convert it to safetensors "
            f"once with: {conversion_command(directory)}"
        )
    raise CheckpointError(f"{directory}: no {SINGLE} and no {INDEX}")


def conversion_command(directory: Path) -> str:
    """The shell command that converts a pickle checkpoint to safetensors, safe to paste
    whatever the directory's name holds: the paths are arguments, each quoted by
    ``shlex.quote`` (a ``$(…)`` or a quote in a name stays a character of it)."""
    script = "import sys, transformers as t; t.AutoModel.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2])"
    paths = (str(directory), f"{directory}-safetensors")
    return " ".join(["python", "-c", shlex.quote(script), *(shlex.quote(p) for p in paths)])


def _read_safetensors(path: Path) -> dict[str, tuple[Array, bool]]:
    """Every tensor of one safetensors file, as read-only views of one memory map."""
    size = path.stat().st_size
    with path.open("rb") as file:
        head = file.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: expected a safetensors file, got {size} bytes (truncated)")
        header_size = int.from_bytes(head, "little")
        if header_size > min(MAX_HEADER, size - 8):
            raise CheckpointError(
                f"{path}: expected a header of at most {min(MAX_HEADER, size - 8)} bytes, got a length of "
                f"{header_size} (a truncated or corrupted file)"
            )
        try:
            header = json.loads(file.read(header_size))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise CheckpointError(f"{path}: the header is not JSON (a corrupted file)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: the header is not a JSON object (a corrupted file)")
    header.pop("__metadata__", None)
    data_size = size - 8 - header_size
    mapped = map_file(path, 8 + header_size, data_size) if data_size else None
    tensors = {}
    spans = []
    for name, entry in header.items():
        dtype, shape, (begin, end) = _entry(path, name, entry)
        spans.append((begin, end, name))
        if not 0 <= begin <= end <= data_size:
            raise CheckpointError(
                f"{path}: tensor {name!r} lies at bytes {begin}..{end}, past the data's {data_size} bytes (truncated)"
            )
        if end - begin != math.prod(shape) * dtype.itemsize:
            raise CheckpointError(
                f"{path}: tensor {name!r} of shape {shape} needs {math.prod(shape) * dtype.itemsize} bytes, "
                f"its header gives {end - begin} (a corrupted file)"
            )
        raw = mapped[begin:end] if mapped is not None else np.zeros(0, np.uint8)
        tensors[name] = (raw.view(dtype).reshape(shape), entry["dtype"] == "BF16")
    spans.sort()
    for (_, end, first), (begin, _, second) in itertools.pairwise(spans):
        if begin < end:  # the format forbids it, and it would make two weights one
            raise CheckpointError(f"{path}: tensors {first!r} and {second!r} share bytes (a corrupted file)")
    return tensors


def write_safetensors(path: Path, tensors: dict[str, Array]) -> None:
    """``tensors`` as one safetensors file: the header (names, dtypes, shapes, offsets), then
    the bytes, little-endian, in the header's order."""
    names = {dtype: name for name, dtype in _DTYPES.items() if name != "BF16"}
    header: dict[str, Any] = {}
    offset = 0
    for name, tensor in tensors.items():
        dtype = np.dtype(tensor.dtype).newbyteorder("<") if tensor.dtype.itemsize > 1 else tensor.dtype
        header[name] = {
            "dtype": names[dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + tensor.nbytes],
        }
        offset += tensor.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the format advises
    with path.open("wb") as file:
        file.write(len(text).to_bytes(8, "little") + text)
        for tensor in tensors.values():
            file.write(np.ascontiguousarray(tensor, dtype=tensor.dtype.newbyteorder("<")).tobytes())


def _entry(path: Path, name: str, entry: Any) -> tuple[np.dtype, tuple[int, ...], tuple[int, int]]:
    try:
        dtype = _DTYPES[entry["dtype"]]
        shape: tuple[int, ...] = tuple(entry["shape"])
        begin, end = (n if type(n) is int else -1 for n in entry["data_offsets"])
        if not all(type(n) is int and n >= 0 for n in (*shape, begin, end)):
            raise ValueError
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(
            f"{path}: tensor {name!r}: expected a dtype among {', '.join(_DTYPES)}, a shape and two data offsets, "
            f"got {str(entry)[:200]}"
        ) from None
    return dtype, shape, (begin, end)
