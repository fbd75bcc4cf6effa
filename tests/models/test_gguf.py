"""attnlab.models.load on GGUF files, against transformers reading the same file (the
oracle): the real SmolLM2-135M-Instruct Q4_1, a tiny random Llama written here with
gguf.GGUFWriter, and the files that must be refused."""

from __future__ import annotations

import errno
import os
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from attnlab import models  # noqa: E402
from attnlab._validation import MissingDependencyError  # noqa: E402
from attnlab.cli import main  # noqa: E402
from attnlab.models import _checkpoint, _gguf  # noqa: E402
from checkpoints import smollm2_gguf  # noqa: E402

TEXTS = ["The quick brown fox jumps over the lazy dog.", "小明是个运动达人，他平时很爱打篮球", "🙂 👍🏽 ok", ""]
PROMPT = "The capital of France is"


# ---- the real checkpoint -------------------------------------------------------------------


@pytest.fixture(scope="module")
def ours(smollm2):  # conftest.py's, loaded once
    return smollm2


@pytest.fixture(scope="module")
def theirs(smollm2_transformers):
    return smollm2_transformers


def test_smollm2_logits_and_attention_equal_transformers(ours, theirs):
    model = ours
    reference, tokenizer = theirs
    ids = np.asarray(tokenizer(PROMPT)["input_ids"])
    out = model(ids, output_attentions=True)
    with torch.no_grad():
        expected = reference(torch.tensor(ids[None]), output_attentions=True)
    logits = expected.logits[0].numpy()
    scale = np.abs(logits).max()
    difference = np.abs(out.logits - logits).max()
    print(f"\nlogits max |diff| {difference:.3g}, scale {scale:.3g}")
    assert difference / scale < 1e-4
    for layer in (0, 17, -1):
        np.testing.assert_allclose(out.attentions[layer], expected.attentions[layer][0].numpy(), atol=1e-5)
    assert model.weights_note == "Q4_1, dequantized to float32"
    assert "Q4_1" in repr(model)


@pytest.mark.slow
def test_smollm2_greedy_tokens_equal_transformers(ours, theirs):
    model = ours
    reference, tokenizer = theirs
    ids = np.asarray(tokenizer(PROMPT)["input_ids"])
    with torch.no_grad():
        expected = reference.generate(torch.tensor(ids[None]), do_sample=False, max_new_tokens=32)[0].numpy()
    got = model.generate(ids, 32)
    assert got.tolist() == expected.tolist()


@pytest.mark.slow
@pytest.mark.parametrize("special", [True, False])
def test_smollm2_token_ids_equal_transformers(ours, theirs, special):
    model = ours
    _, tokenizer = theirs
    for text in TEXTS:
        expected = tokenizer(text, add_special_tokens=special)["input_ids"]
        assert model.tokenizer.encode(text, add_special_tokens=special).tolist() == expected, text
    assert model.tokenizer.chat_template == tokenizer.chat_template
    assert (model.tokenizer.bos_token, model.tokenizer.eos_token) == (tokenizer.bos_token, tokenizer.eos_token)


@pytest.mark.slow
def test_smollm2_at_its_positions_is_taken_and_one_more_token_refused(ours, theirs):
    """8192 positions: a text of exactly that many tokens (transformers' count) has
    transformers' ids; one more is refused naming both numbers, and truncation cuts it to
    transformers' ``truncation=True, max_length=8192``."""
    from attnlab import ArgumentError
    from attnlab.models._checks import sequence_ids

    model = ours
    _, tokenizer = theirs
    limit = model.config.max_position_embeddings
    assert limit == 8192
    word = " attention"
    assert len(tokenizer(word, add_special_tokens=False)["input_ids"]) == 1
    at_limit, over = word * limit, word * (limit + 1)
    assert len(tokenizer(at_limit)["input_ids"]) == limit
    assert sequence_ids(model.config, model.tokenizer, at_limit).ids.tolist() == tokenizer(at_limit)["input_ids"]
    with pytest.raises(ArgumentError, match=f"at most {limit} tokens, the model's positions .*got {limit + 1}"):
        sequence_ids(model.config, model.tokenizer, over)
    cut = sequence_ids(model.config, model.tokenizer, over, truncation=True)
    assert cut.ids.tolist() == tokenizer(over, truncation=True, max_length=limit)["input_ids"]
    assert cut.notes == [f"cut to its first {limit} of {limit + 1} tokens (the model's positions)"]


@pytest.mark.slow
def test_cli_trace_of_a_gguf_names_its_quantization(capsys):
    assert main(["trace", "--model", str(smollm2_gguf()), "--text", "Hello there", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert '"tokens"' in captured.out
    assert "Q4_1, dequantized to float32" in captured.err
    assert "attnlab's NumPy model" in captured.err


# ---- a tiny random Llama, written here ------------------------------------------------------

D, H, HK, LAYERS, INNER, POSITIONS = 32, 4, 2, 2, 64, 64
ALPHABET = [chr(c) for c in range(33, 127)]  # printable ASCII: tokens in GPT-2's byte alphabet
TOKENS = [*ALPHABET, "Ġ", "ab", "Ġab", "<s>", "</s>"]


def _permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's row order for q and k (RoPE on adjacent pairs)."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


def _gguf_names(name: str) -> str:
    top = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
    parts = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}  # fmt: skip
    base, suffix = name.rsplit(".", 1)
    if base in top:
        return f"{top[base]}.{suffix}"
    _, _, layer, rest = base.split(".", 3)
    return f"blk.{layer}.{parts[rest]}.{suffix}"


def write_tiny_llama(
    path: Path, quant: Any = None, arch: str = "llama", tied: bool = False, rope_freqs: bool = False,
    add_bos: bool = False, **changes: Any,
) -> None:  # fmt: skip
    """A random LlamaForCausalLM (or Qwen2ForCausalLM) written as llama.cpp's converter
    would: a Llama's q and k permuted, its matrices in ``quant`` (default F32), a byte-level
    vocabulary of ASCII (with ``add_bos``, tokenizer.ggml.add_bos_token true). ``changes``
    replace what is written: ``head_count``, ``freq_base``, ``token_types``, ``merges``, and
    ``extra`` tensors (name -> array) written before the model's."""
    torch.manual_seed(0)
    qwen2 = arch == "qwen2"  # q, k and v with biases, and no permutation (llama.cpp's Qwen2 RoPE rotates halves)
    config = (transformers.Qwen2Config if qwen2 else transformers.LlamaConfig)(
        vocab_size=len(TOKENS), hidden_size=D, intermediate_size=INNER, num_hidden_layers=LAYERS,
        num_attention_heads=H, num_key_value_heads=HK, max_position_embeddings=POSITIONS,
        tie_word_embeddings=tied, rms_norm_eps=1e-5,
    )  # fmt: skip
    state = (transformers.Qwen2ForCausalLM if qwen2 else transformers.LlamaForCausalLM)(config).state_dict()
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("tiny")
    writer.add_block_count(LAYERS)
    writer.add_context_length(POSITIONS)
    writer.add_embedding_length(D)
    writer.add_feed_forward_length(INNER)
    writer.add_head_count(changes.get("head_count", H))
    writer.add_head_count_kv(HK)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(changes.get("freq_base", 10000.0))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(TOKENS)
    writer.add_token_types(changes.get("token_types", [1] * (len(TOKENS) - 2) + [3, 3]))
    writer.add_token_merges(changes.get("merges", ["a b", "Ġ ab"]))
    writer.add_bos_token_id(len(TOKENS) - 2)
    writer.add_eos_token_id(len(TOKENS) - 1)
    if add_bos:
        writer.add_add_bos_token(True)
    if rope_freqs:  # Llama 3.1's RoPE scaling as llama.cpp writes it: a tensor of factors, no metadata
        writer.add_tensor("rope_freqs.weight", np.ones(D // H // 2, dtype=np.float32))
    for name, tensor in changes.get("extra", {}).items():
        writer.add_tensor(name, tensor)
    for name, tensor in state.items():
        if tied and name == "lm_head.weight":
            continue
        weight = tensor.numpy().astype(np.float32)
        if not qwen2 and (".q_proj." in name or ".k_proj." in name):
            weight = _permute(weight, H if ".q_proj." in name else HK)
        if quant is not None and weight.ndim == 2:
            writer.add_tensor(_gguf_names(name), gguf.quants.quantize(weight, quant), raw_dtype=quant)
        else:
            writer.add_tensor(_gguf_names(name), weight)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_llama(path)
    return path


@pytest.mark.parametrize(
    ("arch", "quant", "tied"), [("llama", None, False), ("llama", "Q8_0", True), ("qwen2", "Q8_0", False)]
)
def test_tiny_model_equals_transformers_reading_the_same_file(tmp_path, arch, quant, tied):
    path = tmp_path / "tiny.gguf"
    write_tiny_llama(path, quant and gguf.GGMLQuantizationType[quant], arch=arch, tied=tied)
    model = models.load(path)
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    ids = np.array([3, 17, 40, 94, 2, 60, 61, 8])
    out = model(ids, output_attentions=True)
    with torch.no_grad():
        expected = reference(torch.tensor(ids[None]), output_attentions=True)
    np.testing.assert_allclose(out.logits, expected.logits[0].numpy(), atol=2e-5)
    for ours, theirs in zip(out.attentions, expected.attentions, strict=True):
        np.testing.assert_allclose(ours, theirs[0].numpy(), atol=2e-6)
    assert model.weights_note == f"{quant or 'F32'}, dequantized to float32"
    assert model.config.model_type == arch


def test_tiny_llama_token_ids_equal_transformers(tiny):
    model = models.load(tiny)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny.parent, gguf_file=tiny.name)
    for text in ("ab cab", "<s>ab</s>", ""):
        for special in (True, False):
            expected = tokenizer(text, add_special_tokens=special)["input_ids"]
            assert model.tokenizer.encode(text, add_special_tokens=special).tolist() == expected


def test_cli_runs_a_gguf_on_the_transformers_backend(tiny, capsys):
    assert main(["trace", "--model", str(tiny), "--text", "ab cab", "--backend", "transformers"]) == 0
    assert "(llama, F32, dequantized by transformers) ran in transformers" in capsys.readouterr().err


def test_tiny_llama_in_float64(tiny):
    model = models.load(tiny, dtype=np.float64)
    assert model.dtype == np.float64 and model.weights_note == "F32, dequantized to float64"


# ---- refusals -------------------------------------------------------------------------------


def _entry(data: bytes, name: str) -> int:
    """Where tensor ``name``'s entry (after its name) starts in the header."""
    key = struct.pack("<Q", len(name)) + name.encode()
    return data.index(key) + len(key)


def _patched(tiny: Path, tmp_path: Path, name: str, dims: list[int] | None = None, type_id: int | None = None) -> Path:
    data = bytearray(tiny.read_bytes())
    at = _entry(bytes(data), name)
    n_dims = struct.unpack_from("<I", data, at)[0]
    if dims is not None:
        assert len(dims) == n_dims
        struct.pack_into(f"<{n_dims}Q", data, at + 4, *dims)
    if type_id is not None:
        struct.pack_into("<I", data, at + 4 + 8 * n_dims, type_id)
    path = tmp_path / "patched.gguf"
    path.write_bytes(bytes(data))
    return path


def test_a_truncated_header_is_refused(tiny, tmp_path):
    path = tmp_path / "cut.gguf"
    path.write_bytes(tiny.read_bytes()[:300])
    with pytest.raises(models.CheckpointError, match="truncated"):
        models.load(path)


def test_tensor_data_past_the_end_is_refused(tiny, tmp_path):
    path = tmp_path / "cut.gguf"
    path.write_bytes(tiny.read_bytes()[:-64])
    with pytest.raises(models.CheckpointError, match=r"past the file's \d+ bytes \(a truncated GGUF file\)"):
        models.load(path)


def test_not_a_gguf_file_is_refused(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04 not gguf at all")
    with pytest.raises(models.CheckpointError, match="expected a GGUF file"):
        models.load(path)
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    with pytest.raises(
        models.CheckpointError,
        match=r"a \.gguf file, builtin:NAME or a hub id, got .*notes\.txt.* \(a file that is not GGUF\)",
    ):
        models.load(other)


def test_an_unknown_architecture_is_refused(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_llama(path, arch="gemma9")
    with pytest.raises(models.CheckpointError, match=r"'gemma9'; attnlab runs llama, qwen2, mistral"):
        models.load(path)


def test_an_unknown_quantization_type_is_refused(tiny, tmp_path):
    path = _patched(tiny, tmp_path, "blk.0.attn_q.weight", type_id=250)
    with pytest.raises(models.CheckpointError, match="unknown ggml type 250"):
        models.load(path)


def test_a_type_gguf_cannot_dequantize_is_refused(tiny, tmp_path):
    unsupported = [t for t in gguf.GGMLQuantizationType if not _gguf._can_dequantize(int(t))]
    fits = [t for t in unsupported if D % gguf.GGML_QUANT_SIZES[t][0] == 0]
    if not fits:
        pytest.skip("this gguf dequantizes every type")
    path = _patched(tiny, tmp_path, "blk.0.attn_q.weight", type_id=int(fits[0]))
    with pytest.raises(models.CheckpointError, match=f"is {fits[0].name}, which the gguf package cannot dequantize"):
        models.load(path)


def test_a_model_larger_than_memory_is_refused_from_its_header(tiny, tmp_path, monkeypatch):
    path = _patched(tiny, tmp_path, "token_embd.weight", dims=[D, 2**40])  # 128 TiB of float32, and no bytes
    with pytest.raises(models.CheckpointError, match="GiB once dequantized, more than this machine's"):
        models.load(path)
    monkeypatch.setattr(_checkpoint, "available_memory", lambda: 10_000)
    with pytest.raises(models.CheckpointError, match="more than this machine's"):
        models.load(tiny)


def test_without_gguf_the_extra_is_named(tiny, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "gguf", None)
    with pytest.raises(MissingDependencyError, match=r"attnlab\[models\]"):
        models.load(tiny)


def test_cli_refuses_a_truncated_gguf_in_one_line(tiny, tmp_path, capsys):
    path = tmp_path / "cut.gguf"
    path.write_bytes(tiny.read_bytes()[:-64])
    assert main(["trace", "--model", str(path), "--text", "hi"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "truncated" in err and "Traceback" not in err


def _header(*entries: bytes, tensors: int = 0) -> bytes:
    """A GGUF version 3 header of raw metadata ``entries`` (each key and value as bytes)."""
    return b"GGUF" + struct.pack("<IQQ", 3, tensors, len(entries)) + b"".join(entries)


def _key(name: str) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode()


def test_arrays_nested_past_what_llama_cpp_writes_are_refused_from_the_header(tmp_path):
    """200,000 nested arrays of 12 bytes each: refused, not a RecursionError."""
    nested = struct.pack("<I", 9) + (struct.pack("<I", 9) + struct.pack("<Q", 1)) * 200_000 + struct.pack("<IQ", 0, 0)
    path = tmp_path / "deep.gguf"
    path.write_bytes(_header(_key("k") + nested))
    with pytest.raises(models.CheckpointError, match="arrays nested deeper than 2") as error:
        models.load(path)
    assert "\n" not in str(error.value)


def test_a_key_given_twice_is_refused(tmp_path):
    entry = _key("general.architecture") + struct.pack("<I", 8) + _key("llama")
    path = tmp_path / "twice.gguf"
    path.write_bytes(_header(entry, entry))
    with pytest.raises(models.CheckpointError, match=r"'general\.architecture' is given twice"):
        models.load(path)


def test_llama3_rope_frequency_factors_are_refused_not_dropped(tmp_path):
    """llama.cpp stores Llama 3.1's RoPE scaling as rope_freqs.weight: running without it
    would give other logits than the model's, without a word."""
    path = tmp_path / "rope.gguf"
    write_tiny_llama(path, rope_freqs=True)
    with pytest.raises(models.CheckpointError, match=r"rope_freqs\.weight .* not read yet"):
        models.load(path)


def _with_metadata(tiny: Path, tmp_path: Path, key: str, value: int) -> Path:
    """The tiny file with the uint32 metadata ``key`` set to ``value`` (its bytes: the key,
    the type id 4, then the value)."""
    data = bytearray(tiny.read_bytes())
    at = data.index(key.encode()) + len(key)
    assert int.from_bytes(data[at : at + 4], "little") == 4  # GGUF's UINT32
    data[at + 4 : at + 8] = value.to_bytes(4, "little")
    path = tmp_path / f"{key}.gguf"
    path.write_bytes(bytes(data))
    return path


def test_a_block_count_past_the_files_blocks_is_refused_on_either_backend(tiny, tmp_path, capsys):
    path = _with_metadata(tiny, tmp_path, "llama.block_count", 10**9)  # transformers would build 10⁹ layers
    for backend in ("numpy", "transformers"):
        code = main(["trace", "--model", str(path), "--text", "ab", "--backend", backend])
        err = capsys.readouterr().err
        held = "the weights hold 2" if backend == "numpy" else "in 1..2, the blocks its tensors hold"
        assert code == 2 and len(err.strip().splitlines()) == 1 and held in err, (backend, err)


def test_a_gguf_settings_error_names_the_file_not_a_config_json(tiny, tmp_path):
    path = _with_metadata(tiny, tmp_path, "llama.attention.head_count_kv", 3)  # not a divisor of the heads
    with pytest.raises(models.CheckpointError) as caught:
        models.load(path)
    assert str(caught.value).startswith(f"{path}: its metadata (config.json's names): num_key_value_heads: expected")


def test_a_fifo_or_a_device_given_as_the_model_says_what_it_is(tmp_path):
    import os

    os.mkfifo(tmp_path / "pipe.gguf")  # opening it to read its magic bytes would block
    for path, what in ((tmp_path / "pipe.gguf", "a FIFO"), (Path("/dev/zero"), "a character device")):
        with pytest.raises(models.CheckpointError, match=f"got '{path}' \\({what}\\)"):
            models.load(path)


# ---- issue 44: non-finite weights, messages that say what is wrong, files llama.cpp refuses --


def _data_offset(path: Path, name: str) -> int:
    """Where tensor ``name``'s bytes start in the file, as ggml's own reader finds them."""
    return int(next(t for t in gguf.GGUFReader(path).tensors if t.name == name).data_offset)


@pytest.mark.parametrize(("value", "kind"), [(np.nan, "NaN"), (np.inf, "+Inf")])
def test_a_nan_or_infinite_weight_is_refused_naming_the_tensor(tiny, tmp_path, value, kind):
    """attn_q of layer 0 is 32 × 32 float32 numbers; two of them poisoned."""
    data = bytearray(tiny.read_bytes())
    at = _data_offset(tiny, "blk.0.attn_q.weight")
    struct.pack_into("<2f", data, at + 4 * 100, value, value)
    path = tmp_path / "bad.gguf"
    path.write_bytes(bytes(data))
    with pytest.raises(models.CheckpointError) as caught:
        models.load(path)
    assert str(caught.value) == (
        f"{path}: tensor 'blk.0.attn_q.weight': expected finite numbers as float32, got 2 {kind} of its 1,024 numbers"
    )


def test_cli_refuses_a_nan_weight_in_one_line_on_either_backend(tiny, tmp_path, capsys):
    data = bytearray(tiny.read_bytes())
    struct.pack_into("<f", data, _data_offset(tiny, "blk.1.attn_q.weight"), np.nan)
    path = tmp_path / "bad.gguf"
    path.write_bytes(bytes(data))
    named = {"numpy": "tensor 'blk.1.attn_q.weight'", "transformers": "layers.1.self_attn.q_proj.weight'"}
    for backend, name in named.items():
        code = main(["trace", "--model", str(path), "--text", "ab", "--backend", backend])
        err = capsys.readouterr().err
        last = err.rstrip("\n").rsplit("\n", 1)[-1]
        assert code == 2 and last.startswith("attnlab trace: error: ") and "Traceback" not in err, (backend, err)
        assert name in last and "1 NaN of its 1,024 numbers" in last, (backend, err)
        assert err == last + "\n", err  # no progress bar before it (transformers' own, on dequantizing)


@pytest.mark.parametrize(("value", "got"), [(None, "nothing"), (7, "7")])
def test_a_gguf_without_an_architecture_string_says_so(tmp_path, capsys, value, got):
    entry = b"" if value is None else _key("general.architecture") + struct.pack("<II", 4, value)  # UINT32 7
    path = tmp_path / "noarch.gguf"
    path.write_bytes(_header(_key("general.name") + struct.pack("<I", 8) + _key("x"), *([entry] if entry else [])))
    expected = f"metadata general.architecture: expected a string naming the architecture (llama, qwen2…), got {got}"
    with pytest.raises(models.CheckpointError, match=re.escape(f"{path}: {expected}")):
        models.load(path)
    assert main(["trace", "--model", str(path), "--text", "ab"]) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1, err


def test_a_file_the_system_cannot_map_is_named_with_the_mapping(tiny, monkeypatch, capsys):
    """As under `ulimit -v` with a sparse 1 TB file: mmap fails with ENOMEM."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM))

    monkeypatch.setattr(np, "memmap", refuse)
    size = tiny.stat().st_size
    expected = f"{tiny}: mapping its {size:,} bytes into memory failed (Cannot allocate memory; under a limit"
    with pytest.raises(models.CheckpointError, match=re.escape(expected)):
        models.load(tiny)
    assert main(["trace", "--model", str(tiny), "--text", "ab"]) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1, err


def _offset_field(data: bytes, name: str) -> int:
    """Where tensor ``name``'s offset (uint64, after its dimensions and type) lies in the header."""
    at = _entry(data, name)
    return at + 4 + 8 * struct.unpack_from("<I", data, at)[0] + 4


def _offset_of(tiny: Path, tensor: str) -> int:
    data = tiny.read_bytes()
    return struct.unpack_from("<Q", data, _offset_field(data, tensor))[0]


def _with_offset(tiny: Path, path: Path, tensor: str, offset: int) -> Path:
    """The tiny file with ``tensor``'s offset field set to ``offset``, written to ``path``."""
    data = bytearray(tiny.read_bytes())
    struct.pack_into("<Q", data, _offset_field(data, tensor), offset)
    path.write_bytes(bytes(data))
    return path


def test_two_tensors_at_the_same_offset_are_refused(tiny, tmp_path):
    q = _offset_of(tiny, "blk.0.attn_q.weight")  # k (16 × 32 floats) put inside q
    path = _with_offset(tiny, tmp_path / "overlap.gguf", "blk.0.attn_k.weight", q)
    start = _data_offset(tiny, "blk.0.attn_q.weight")
    with pytest.raises(models.CheckpointError) as caught:
        models.load(path)
    assert str(caught.value) == (
        f"{path}: tensors 'blk.0.attn_k.weight' and 'blk.0.attn_q.weight' share bytes {start}..{start + 16 * 32 * 4} "
        "(a corrupted GGUF file)"
    )


def test_a_tensor_offset_off_the_alignment_is_refused(tiny, tmp_path):
    offset = _offset_of(tiny, "blk.0.attn_v.weight") + 4  # inside the file, 4 bytes past a multiple of 32
    path = _with_offset(tiny, tmp_path / "misaligned.gguf", "blk.0.attn_v.weight", offset)
    with pytest.raises(models.CheckpointError) as caught:
        models.load(path)
    assert str(caught.value) == (
        f"{path}: tensor 'blk.0.attn_v.weight': expected an offset that is a multiple of general.alignment (32), "
        f"got {offset}"
    )


def _array(item: int, count: int, body: bytes) -> bytes:
    return struct.pack("<IQ", item, count) + body


def test_arrays_two_deep_are_read_and_three_deep_refused(tmp_path):
    arch = _key("general.architecture") + struct.pack("<I", 8) + _key("llama")
    two = struct.pack("<I", 9) + _array(9, 1, _array(0, 2, b"\x05\x06"))  # [[5, 6]]
    path = tmp_path / "two.gguf"
    path.write_bytes(_header(arch, _key("k") + two))
    assert _gguf.read_gguf(path).metadata["k"] == [[5, 6]]
    three = struct.pack("<I", 9) + _array(9, 1, _array(9, 1, _array(0, 1, b"\x05")))  # [[[5]]]
    path = tmp_path / "three.gguf"
    path.write_bytes(_header(arch, _key("k") + three))
    with pytest.raises(models.CheckpointError, match=r"metadata 'k': arrays nested deeper than 2"):
        models.load(path)


def test_a_bos_to_add_whose_id_is_outside_the_vocabulary_is_refused(tmp_path):
    path = tmp_path / "bos.gguf"
    write_tiny_llama(path, add_bos=True)
    bos = len(TOKENS) - 2  # "<s>"
    assert models.load(path).tokenizer.encode("ab").tolist()[0] == bos  # the BOS is added, where it is a token
    bad = _with_metadata(path, tmp_path, "tokenizer.ggml.bos_token_id", 10**9)
    with pytest.raises(models.CheckpointError) as caught:
        models.load(bad)
    assert str(caught.value) == (
        f"{bad}: metadata tokenizer.ggml.bos_token_id: expected a token id in 0..{len(TOKENS) - 1} "
        "(tokenizer.ggml.add_bos_token is true), got 1000000000"
    )


# ---- issue 44's second review: GGUF oddities llama.cpp refuses, refused naming the field ----


@pytest.mark.parametrize("base", [np.inf, -np.inf, np.nan, 0.0, -1.0])
def test_a_rope_freq_base_that_is_not_finite_and_positive_is_refused(tmp_path, base):
    path = tmp_path / "rope.gguf"
    write_tiny_llama(path, freq_base=base)
    with pytest.raises(models.CheckpointError) as caught:
        models.load(path)
    assert str(caught.value) == f"{path}: metadata llama.rope.freq_base: expected a finite number > 0, got {base!r}"


def test_token_types_fewer_than_the_tokens_are_refused_naming_both_lengths(tmp_path):
    path = tmp_path / "types.gguf"
    write_tiny_llama(path, token_types=[1] * 10)
    with pytest.raises(models.CheckpointError) as caught:
        models.load(path)
    assert str(caught.value) == (
        f"{path}: metadata tokenizer.ggml.token_type: expected a list of one for each of the {len(TOKENS)} tokens "
        "of tokenizer.ggml.tokens, got 10"
    )


def test_an_architecture_that_is_not_a_plain_name_is_refused_on_either_backend(tmp_path, capsys):
    path = tmp_path / "newline.gguf"
    write_tiny_llama(path, arch="llama\nx")
    expected = f"{path}: metadata general.architecture: expected a plain name (letters, digits"
    with pytest.raises(models.CheckpointError, match=re.escape(expected)):
        models.load(path)
    for backend in ("numpy", "transformers"):
        assert main(["trace", "--model", str(path), "--text", "ab", "--backend", backend]) == 2
        err = capsys.readouterr().err
        assert expected in err and "got 'llama\\nx'" in err and err.count("\n") == 1, err


def test_a_head_count_that_does_not_divide_the_width_names_the_gguf_field(tmp_path):
    path = tmp_path / "heads.gguf"
    write_tiny_llama(path, head_count=2**31)
    with pytest.raises(models.CheckpointError) as caught:
        models.load(path)
    assert str(caught.value) == (
        f"{path}: metadata llama.attention.head_count: expected a divisor of llama.embedding_length ({D}), "
        f"without llama.attention.key_length, got {2**31}"
    )


def test_bad_merges_are_refused_naming_the_file(tmp_path):
    path = tmp_path / "merges.gguf"
    write_tiny_llama(path, merges=["a b", "ab"])
    with pytest.raises(models.CheckpointError) as caught:
        models.load(path)
    assert str(caught.value) == (
        f"{path}: metadata tokenizer.ggml.merges: expected strings of two tokens split by a space, got 'ab'"
    )


def test_a_tensor_the_architecture_does_not_use_is_refused_naming_it(tmp_path):
    """A bias a Llama has none of, and a name no reader knows: llama.cpp refuses the file
    ("wrong number of tensors"); dropping them would run another model than the file's."""
    path = tmp_path / "extra.gguf"
    extra = {"blk.0.attn_q.bias": np.zeros(D, np.float32), "blk.0.attn_q_norm.weight": np.ones(8, np.float32)}
    write_tiny_llama(path, extra=extra)
    with pytest.raises(models.CheckpointError) as caught:
        models.load(path)
    assert str(caught.value) == (
        f"{path}: tensor 'blk.0.attn_q.bias' (and 1 more): expected only tensors a llama of 2 layers reads, got one "
        "it does not use (llama.cpp refuses such a file: wrong number of tensors)"
    )
