"""A GGUF file (llama.cpp's single-file checkpoint) read into what :func:`attnlab.models.load`
consumes: a Hugging Face config dict, weights by their Hugging Face names, and a tokenizer.

GGUF is a small header (magic, version, metadata key-values, one entry per tensor: name,
dimensions, type, offset) followed by the tensors' bytes, aligned. The header is read here,
every size checked against the file, so that a truncated or corrupted file is one
:class:`CheckpointError`, and a model too large for the machine is refused from its header
before a tensor is read. Tensors are memory-mapped and dequantized to float32 by ggml's own
``gguf`` package (``gguf.quants.dequantize``), one at a time when the architecture reader
asks for it. llama.cpp's converter permutes the rows of Llama's q and k projections (its
RoPE rotates adjacent pairs, Hugging Face's the two halves); the permutation is undone here.
"""

from __future__ import annotations

import itertools
import math
import re
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import Array, MissingDependencyError, is_integer, is_real
from ._checkpoint import GGUF_MAGIC as MAGIC
from ._checkpoint import CheckpointError, WeightSource, check_memory, map_file
from ._gguf_tokenizer import gguf_tokenizer
from ._tokenizer import Tokenizer

__all__ = ["GGUFWeights", "read_gguf", "read_gguf_model"]

VERSIONS = (2, 3)  # version 1 had 32-bit counts; llama.cpp writes 3
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_NESTING = 2  # arrays of arrays at most: llama.cpp writes (and reads) one level; merges' pairs are strings
# general.architecture -> config.json's model_type, for the architectures attnlab runs in NumPy
MODEL_TYPES = {"llama": "llama", "qwen2": "qwen2", "mistral": "mistral"}
# GGUF tensor names (after "blk.N.") -> Hugging Face names (after "model.layers.N.")
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# GGUF metadata value types: the scalars' struct formats (8: string, 9: array)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# general.architecture as llama.cpp names them (llama, qwen2, gpt-neox, ernie4_5-moe…)
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's header entry: its ggml type, its shape in NumPy's order (ggml lists
    the fastest dimension first), and where its bytes lie in the file."""

    name: str
    type_id: int
    shape: tuple[int, ...]
    offset: int  # from the start of the file
    nbytes: int

    @property
    def type_name(self) -> str:
        return _type_name(self.type_id)


@dataclass
class GGUFFile:
    """A GGUF file's header: its metadata and its tensors' entries."""

    path: Path
    metadata: dict[str, Any]
    tensors: dict[str, TensorInfo] = field(default_factory=dict)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture"))

    def quantization(self) -> str:
        """The most common type among the 2-D tensors (the weight matrices): Q4_1, Q8_0, F16…"""
        counts = Counter(t.type_name for t in self.tensors.values() if len(t.shape) == 2)
        return counts.most_common(1)[0][0] if counts else "no matrices"


def _gguf() -> Any:
    """The ``gguf`` package (ggml's reader and dequantizers)."""
    try:
        import gguf
        import gguf.quants
    except ImportError:
        raise MissingDependencyError(
            "name_or_dir: reading a GGUF file needs the gguf package: pip install 'attnlab[models]'"
        ) from None
    return gguf


def _type_name(type_id: int) -> str:
    gguf = _gguf()
    try:
        return str(gguf.GGMLQuantizationType(type_id).name)
    except ValueError:
        return f"type {type_id}"


class _Cursor:
    """Reads the header's little-endian values in order; reading past the end of the
    file is a :class:`CheckpointError` (a truncated file)."""

    def __init__(self, path: Path, data: memoryview) -> None:
        self.path, self.data, self.pos = path, data, 0

    def take(self, size: int, what: str) -> int:
        """The position of the next ``size`` bytes, which are then passed."""
        if size < 0 or self.pos + size > len(self.data):
            raise CheckpointError(
                f"{self.path}: the header's {what} runs past the end of the file's {len(self.data)} bytes "
                "(a truncated or corrupted GGUF file)"
            )
        start, self.pos = self.pos, self.pos + size
        return start

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack_from(fmt, self.data, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        size = self.scalar("<Q", what)
        raw = self.data[self.take(size, what) : self.pos]
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError:
            raise CheckpointError(f"{self.path}: the header's {what} is not UTF-8 (a corrupted GGUF file)") from None

    def value(self, type_id: int, what: str, depth: int = 0) -> Any:
        """A value of type ``type_id``; ``depth``: the arrays it is inside of."""
        if type_id in _SCALARS:
            return self.scalar(_SCALARS[type_id], what)
        if type_id == _STRING:
            return self.string(what)
        if type_id != _ARRAY:
            raise CheckpointError(f"{self.path}: {what} has the unknown value type {type_id} (a corrupted GGUF file)")
        item, count = self.scalar("<I", what), self.scalar("<Q", what)
        if item == _ARRAY and depth + 2 > MAX_NESTING:  # this array, at depth + 1, holds arrays at depth + 2
            raise CheckpointError(
                f"{self.path}: {what}: arrays nested deeper than {MAX_NESTING} (a corrupted GGUF file)"
            )
        if item in _SCALARS:  # numbers: one read
            dtype = np.dtype(_SCALARS[item])
            start = self.take(count * dtype.itemsize, what)
            return np.frombuffer(self.data, dtype, count, start).tolist()
        if count > len(self.data) - self.pos:  # every element takes a byte at least
            raise CheckpointError(f"{self.path}: {what} claims {count} elements, past the end of the file")
        return [self.value(item, what, depth + 1) for _ in range(count)]


def read_gguf(path: Path) -> GGUFFile:
    """The header of the GGUF file ``path``: its metadata and its tensors' entries, each
    entry's type known to ggml, at an offset that is a multiple of general.alignment.

    Raises:
        CheckpointError: not a GGUF file, a version other than 2 or 3, a header that is
            truncated or corrupted (arrays nested deeper than two, a key or a tensor named
            twice), no general.architecture string or one that is not a plain name (a
            newline in it), a tensor of an unknown type, one at an
            offset that is not a multiple of general.alignment, a file the system cannot map.
            Whether the tensors' bytes lie inside the file, each apart from the others, is
            :func:`check_extent`'s.
        MissingDependencyError: the gguf package is not installed.
    """
    gguf = _gguf()
    with path.open("rb") as file:
        head = file.read(4)
    if head != MAGIC:
        raise CheckpointError(
            f"{path}: expected a GGUF file (starting with the bytes 'GGUF'), got one starting with {head!r}"
        )
    with map_file(path).data as data:  # a memoryview; the header only is paged in
        return _read_header(gguf, path, _Cursor(path, data))


def _read_header(gguf: Any, path: Path, cursor: _Cursor) -> GGUFFile:
    """The header's metadata and tensor entries, read through ``cursor``; see :func:`read_gguf`."""
    data = cursor.data
    cursor.take(4, "magic")
    version = cursor.scalar("<I", "version")
    if version not in VERSIONS:
        raise CheckpointError(f"{path}: expected GGUF version 2 or 3, got {version}")
    tensor_count, kv_count = cursor.scalar("<Q", "tensor count"), cursor.scalar("<Q", "metadata count")
    if max(tensor_count, kv_count) > len(data):
        raise CheckpointError(f"{path}: the header claims {tensor_count} tensors and {kv_count} keys (corrupted)")
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = cursor.string("metadata key")
        if key in metadata:
            raise CheckpointError(f"{path}: metadata {key!r} is given twice (a corrupted GGUF file)")
        metadata[key] = cursor.value(cursor.scalar("<I", f"metadata {key!r}"), f"metadata {key!r}")
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        got = "nothing" if arch is None else repr(arch)
        expected = "expected a string naming the architecture (llama, qwen2…)"
        raise CheckpointError(f"{path}: metadata general.architecture: {expected}, got {got}")
    if not _PLAIN_NAME.fullmatch(arch):  # it names metadata keys ({arch}.block_count) and the backend's choice
        raise CheckpointError(
            f"{path}: metadata general.architecture: expected a plain name (letters, digits, '.', '_' and '-', "
            f"at most 64: llama, qwen2…), got {arch!r}"
        )
    entries = [_tensor_entry(cursor) for _ in range(tensor_count)]
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise CheckpointError(f"{path}: general.alignment: expected a power of two, got {alignment!r}")
    start = -(-cursor.pos // alignment) * alignment
    result = GGUFFile(path, metadata)
    for name, dims, type_id, offset in entries:
        try:
            qtype = gguf.GGMLQuantizationType(type_id)
        except ValueError:
            known = ", ".join(t.name for t in gguf.GGMLQuantizationType)
            raise CheckpointError(
                f"{path}: tensor {name!r} has the unknown ggml type {type_id}; expected one of {known}"
            ) from None
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        if dims[0] % block:
            raise CheckpointError(f"{path}: tensor {name!r}: rows of {dims[0]} do not split into {qtype.name} blocks")
        nbytes = int(np.prod(dims, dtype=object)) // block * size
        if name in result.tensors:
            raise CheckpointError(f"{path}: tensor {name!r} is listed twice (a corrupted GGUF file)")
        if offset % alignment:
            raise CheckpointError(
                f"{path}: tensor {name!r}: expected an offset that is a multiple of general.alignment "
                f"({alignment}), got {offset}"
            )
        result.tensors[name] = TensorInfo(name, type_id, tuple(reversed(dims)), start + offset, nbytes)
    return result


def _tensor_entry(cursor: _Cursor) -> tuple[str, list[int], int, int]:
    """One tensor's entry: its name, dimensions (ggml's order), type and offset."""
    name = cursor.string("tensor name")
    n_dims = cursor.scalar("<I", f"tensor {name!r}")
    if not 1 <= n_dims <= MAX_DIMS:
        raise CheckpointError(f"{cursor.path}: tensor {name!r}: expected 1 to {MAX_DIMS} dimensions, got {n_dims}")
    dims = [cursor.scalar("<Q", f"tensor {name!r}") for _ in range(n_dims)]
    type_id, offset = cursor.scalar("<I", f"tensor {name!r}"), cursor.scalar("<Q", f"tensor {name!r}")
    return name, dims, type_id, offset


def check_supported(file: GGUFFile, itemsize: int) -> None:
    """Refuse, from the header alone, what cannot be loaded: an architecture attnlab does
    not run, a tensor type the gguf package cannot dequantize, tensors larger (once
    dequantized to ``itemsize`` bytes a number) than the machine's memory, and tensors
    whose bytes lie past the end of the file or share bytes (:func:`check_extent`).

    Raises:
        CheckpointError: one of those, named with what is supported.
    """
    path, arch = file.path, file.metadata.get("general.architecture")
    if arch not in MODEL_TYPES:
        raise CheckpointError(
            f"{path}: a GGUF of the architecture {arch!r}; attnlab runs {', '.join(MODEL_TYPES)} GGUF files in NumPy"
        )
    for info in file.tensors.values():
        if not _can_dequantize(info.type_id):
            raise CheckpointError(
                f"{path}: tensor {info.name!r} is {info.type_name}, which the gguf package cannot dequantize; "
                f"expected one of {', '.join(supported_types())}"
            )
    check_memory(
        path, sum(int(np.prod(t.shape, dtype=object)) for t in file.tensors.values()), itemsize, "once dequantized"
    )
    check_extent(file)


def check_extent(file: GGUFFile) -> None:
    """Refuse a tensor whose bytes lie past the end of the file (a truncated GGUF file), and
    two tensors that share bytes (llama.cpp reads each where the one before it ends): one
    would be read as the other's numbers.

    Raises:
        CheckpointError: naming the tensor, its bytes and the file's size; or the two tensors
            and the bytes they share.
    """
    size = file.path.stat().st_size
    for info in file.tensors.values():
        if info.offset + info.nbytes > size:
            raise CheckpointError(
                f"{file.path}: tensor {info.name!r} lies at bytes {info.offset}..{info.offset + info.nbytes}, past "
                f"the file's {size} bytes (a truncated GGUF file)"
            )
    spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in file.tensors.values() if t.nbytes)
    for (_, end, first), (begin, _, second) in itertools.pairwise(spans):
        if begin < end:
            raise CheckpointError(
                f"{file.path}: tensors {first!r} and {second!r} share bytes {begin}..{end} (a corrupted GGUF file)"
            )


_DEQUANTIZABLE: dict[int, bool] = {}


def _can_dequantize(type_id: int) -> bool:
    """Whether ``gguf.quants.dequantize`` knows the type: tried once on one zero block."""
    if type_id not in _DEQUANTIZABLE:
        gguf = _gguf()
        qtype = gguf.GGMLQuantizationType(type_id)
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        try:
            out = gguf.quants.dequantize(np.zeros((1, size), np.uint8), qtype)
            _DEQUANTIZABLE[type_id] = np.asarray(out).dtype.kind == "f" and np.asarray(out).size == block
        except (NotImplementedError, ValueError, TypeError, KeyError):
            _DEQUANTIZABLE[type_id] = False
    return _DEQUANTIZABLE[type_id]


def supported_types() -> list[str]:
    """The ggml types the installed gguf package dequantizes."""
    return [t.name for t in _gguf().GGMLQuantizationType if _can_dequantize(int(t))]


def hf_name(name: str) -> str | None:
    """The Hugging Face name of a GGUF tensor (``blk.3.attn_q.weight`` →
    ``model.layers.3.self_attn.q_proj.weight``), None for one no reader asks for."""
    base, _, suffix = name.rpartition(".")
    if suffix not in ("weight", "bias"):
        return None
    if base in _TOP_NAMES:
        return f"{_TOP_NAMES[base]}.{suffix}"
    parts = base.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdecimal() and parts[2] in _BLOCK_NAMES:
        return f"model.layers.{int(parts[1])}.{_BLOCK_NAMES[parts[2]]}.{suffix}"
    return None


class GGUFWeights(WeightSource):
    """A GGUF file's tensors by their Hugging Face names, each dequantized to float32 when
    asked for (``weights[name]``, :meth:`get_as`), the interface of :class:`Weights`.

    Args:
        file: the header (:func:`read_gguf`), checked by :func:`check_supported`.
        heads: the query heads and the key-value heads, whose q and k rows llama.cpp
            permuted for a Llama (None: no permutation to undo).
    """

    def __init__(self, file: GGUFFile, heads: tuple[int, int] | None) -> None:
        self.directory = file.path  # what error messages name, as Weights' directory
        self._file, self._heads = file, heads
        self._names = {hf: info for name, info in file.tensors.items() if (hf := hf_name(name)) is not None}
        self._mapped = map_file(file.path) if file.tensors else np.zeros(0, np.uint8)
        self._read: set[str] = set()  # the file's names of the tensors read: check_all_read's

    def __getitem__(self, name: str) -> Array:
        info = self._names[name]
        self._read.add(info.name)
        gguf = _gguf()
        raw = self._mapped[info.offset : info.offset + info.nbytes]
        qtype = gguf.GGMLQuantizationType(info.type_id)
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        rows = raw.reshape(*info.shape[:-1], info.shape[-1] // block * size)
        tensor = np.asarray(gguf.quants.dequantize(rows, qtype), dtype=np.float32).reshape(info.shape)
        if self._heads is not None and (".q_proj." in name or ".k_proj." in name):
            tensor = _unpermute(tensor, self._heads[0] if ".q_proj." in name else self._heads[1])
        return tensor

    def __contains__(self, name: object) -> bool:
        return name in self._names  # without dequantizing, as Mapping's own would

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def check_all_read(self, config: dict[str, Any]) -> None:
        """Refuse a tensor of the file that the network (built from it, ``config``) did not
        read: one no part of the architecture uses (a bias a Llama has none of, a block past
        the block count, a name no reader knows) would be dropped without a word, as
        llama.cpp never does ("wrong number of tensors").

        Raises:
            CheckpointError: naming the first such tensor and how many there are.
        """
        unread = [name for name in self._file.tensors if name not in self._read]
        if unread:
            more = f" (and {len(unread) - 1} more)" if len(unread) > 1 else ""
            raise CheckpointError(
                f"{self.directory}: tensor {unread[0]!r}{more}: expected only tensors a {config['model_type']} of "
                f"{config['num_hidden_layers']} layers reads, got one it does not use (llama.cpp refuses such a "
                "file: wrong number of tensors)"
            )

    def label(self, name: str) -> str:
        """The file and the tensor's own name in it (``blk.0.attn_q.weight``)."""
        return f"{self.directory}: tensor {self._names[name].name!r}"

    def _read_as(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> Array:
        """Tensor ``name`` of the expected ``shape``, dequantized, as ``dtype``.

        Raises:
            CheckpointError: no such tensor, or one of another shape.
        """
        if name not in self._names:
            raise CheckpointError(f"{self.directory}: the weight {name!r} is missing")
        if self._names[name].shape != shape:
            raise CheckpointError(
                f"{self.directory}: the weight {name!r}: expected shape {shape}, got {self._names[name].shape}"
            )
        tensor = self[name]
        return tensor if tensor.dtype == dtype else tensor.astype(dtype)


def _unpermute(tensor: Array, heads: int) -> Array:
    """Undo llama.cpp's permutation of a q or k projection's rows (or bias): within each
    head, its converter interleaved the first and second halves of the rows (for RoPE on
    adjacent pairs); put them back as halves."""
    rows = tensor.shape[0]
    if rows % (2 * heads):
        raise CheckpointError(f"the q or k projection's {rows} rows do not split into {heads} heads of pairs")
    return tensor.reshape(heads, rows // heads // 2, 2, *tensor.shape[1:]).swapaxes(1, 2).reshape(tensor.shape)


def read_gguf_model(
    path: Path, dtype: np.dtype, file: GGUFFile | None = None
) -> tuple[dict[str, Any], GGUFWeights, Tokenizer, str]:
    """What :func:`attnlab.models.load` needs of a GGUF file: the config dict, the weights
    (dequantized when read), the tokenizer, and a note of what was read ("Q4_1,
    dequantized to float32"). No tensor is read before the header has been checked;
    ``file``: the header where already read (:func:`read_gguf`'s; None: read here).

    Raises:
        CheckpointError: see :func:`read_gguf`, :func:`check_supported`, :func:`gguf_config`
            and :func:`gguf_tokenizer`.
        MissingDependencyError: the gguf or the tokenizers package is not installed.
    """
    file = read_gguf(path) if file is None else file
    check_supported(file, np.dtype(dtype).itemsize)
    config = gguf_config(file)
    llama = file.architecture == "llama"  # llama.cpp permutes q and k for this architecture only
    heads = (config["num_attention_heads"], config["num_key_value_heads"]) if llama else None
    backend, settings = gguf_tokenizer(file.metadata, file.path)
    return config, GGUFWeights(file, heads), Tokenizer(backend, **settings), describe(file, dtype)


def describe(file: GGUFFile, dtype: np.dtype) -> str:
    """What a GGUF holds and how it is run: "Q4_1, dequantized to float32"."""
    return f"{file.quantization()}, dequantized to {np.dtype(dtype).name}"


def gguf_config(file: GGUFFile) -> dict[str, Any]:
    """The config.json that the file's metadata describes, with Hugging Face's names
    (``llama.block_count`` → ``num_hidden_layers``…), as transformers reads a GGUF.

    Raises:
        CheckpointError: a required metadata key that is missing or not a positive integer,
            a head count that does not divide the width (without a key length), a RoPE
            frequency base that is not a finite number > 0.
    """
    meta, arch = file.metadata, file.architecture

    def integer(key: str, required: bool = True) -> int | None:
        value = meta.get(f"{arch}.{key}")
        if value is None and not required:
            return None
        if not is_integer(value) or value < 1:
            raise CheckpointError(f"{file.path}: metadata {arch}.{key}: expected a positive integer, got {value!r}")
        return value

    heads = integer("attention.head_count")
    tokens = meta.get("tokenizer.ggml.tokens")
    embed = file.tensors.get("token_embd.weight")
    vocab = integer("vocab_size", False) or (len(tokens) if isinstance(tokens, list) else None)
    config: dict[str, Any] = {
        "model_type": MODEL_TYPES[arch],
        "hidden_size": integer("embedding_length"),
        "num_hidden_layers": integer("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": integer("attention.head_count_kv", False) or heads,
        "intermediate_size": integer("feed_forward_length"),
        "max_position_embeddings": integer("context_length"),
        "rms_norm_eps": meta.get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6),
        "rope_theta": meta.get(f"{arch}.rope.freq_base", 10000.0),
        "vocab_size": vocab or (embed.shape[0] if embed is not None else None),
        "tie_word_embeddings": "output.weight" not in file.tensors,
        "hidden_act": "silu",
    }
    head_dim = integer("attention.key_length", False)
    if head_dim is not None:
        config["head_dim"] = head_dim
    elif config["hidden_size"] % heads:  # llama.cpp's head width is the width / the heads: a whole number
        raise CheckpointError(
            f"{file.path}: metadata {arch}.attention.head_count: expected a divisor of {arch}.embedding_length "
            f"({config['hidden_size']}), without {arch}.attention.key_length, got {heads}"
        )
    theta = config["rope_theta"]
    if not is_real(theta) or not math.isfinite(theta) or theta <= 0:
        raise CheckpointError(
            f"{file.path}: metadata {arch}.rope.freq_base: expected a finite number > 0, got {theta!r}"
        )
    scaling = meta.get(f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        raise CheckpointError(f"{file.path}: metadata {arch}.rope.scaling.type: expected none, got {scaling!r}")
    if "rope_freqs.weight" in file.tensors:  # Llama 3.1's RoPE scaling, as llama.cpp stores it: factors, no metadata
        raise CheckpointError(
            f"{file.path}: the tensor rope_freqs.weight (Llama 3's RoPE frequency factors) is not read yet; "
            "refused rather than run with unscaled positions"
        )
    sliding_window = meta.get(f"{arch}.attention.sliding_window")
    if arch == "mistral":
        config["sliding_window"] = sliding_window
    for key in ("bos", "eos", "padding", "unknown"):
        value = meta.get(f"tokenizer.ggml.{key}_token_id")
        if isinstance(value, int):
            config[{"padding": "pad", "unknown": "unk"}.get(key, key) + "_token_id"] = value
    return config
