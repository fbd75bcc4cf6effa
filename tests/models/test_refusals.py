"""Issue 24's models cases: every bad setting of a checkpoint or of a call refused where it
enters, naming the argument or the config.json key, with what was expected and what came."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from attnlab import ArgumentError, ArgumentTypeError, models  # noqa: E402
from checkpoints import tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """kind -> a tiny float32 checkpoint saved by transformers."""
    paths = {}
    for kind in ("gpt2", "bert", "llama"):
        paths[kind] = tmp_path_factory.mktemp(kind)
        tiny_model(kind).save_pretrained(paths[kind])
    return paths


def copy_of(source: Path, target: Path) -> Path:
    target.mkdir()
    for file in source.iterdir():
        (target / file.name).write_bytes(file.read_bytes())
    return target


def edit_config(directory: Path, **changes: Any) -> None:
    path = directory / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))  # NaN is written as NaN


# --- item 3: text that reached a library raw --------------------------------------------------


def write_vocab_without_unk(directory: Path, layout: str) -> None:
    """A WordPiece vocabulary of six tokens, no [UNK], as vocab.txt or as tokenizer.json."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordPiece

    tokens = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]
    if layout == "vocab.txt":
        (directory / "vocab.txt").write_text("\n".join(tokens) + "\n")
    else:
        Tokenizer(WordPiece({t: i for i, t in enumerate(tokens)}, unk_token="[UNK]")).save(str(directory / layout))


@pytest.mark.parametrize("layout", ["vocab.txt", "tokenizer.json"])
def test_a_bert_vocab_without_unk_is_refused_at_load_not_a_bare_exception_at_encode(saved, tmp_path, layout):
    directory = copy_of(saved["bert"], tmp_path / "no-unk")
    write_vocab_without_unk(directory, layout)
    with pytest.raises(models.CheckpointError, match=r"expected its unknown token '\[UNK\]' among its tokens"):
        models.load(directory)


def test_a_trace_of_an_empty_list_of_layers_is_refused(saved):
    model = models.load(saved["gpt2"])
    with pytest.raises(ArgumentError, match=r"layers: expected at least one layer index in -2\.\.1, .*got \[\]"):
        model.trace([1, 2, 3], layers=[])
    with pytest.raises(ArgumentError, match="layers: expected at least one"):
        model.trace([1, 2, 3], layers=())


def test_a_path_in_an_unknown_users_home_is_an_error_and_one_cli_line(tmp_path):
    with pytest.raises(models.CheckpointError, match=r"got '~nosuchuser/x' \(no such user's home directory\)"):
        models.load("~nosuchuser/x")
    environment = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "attnlab", "trace", "--model", "~nosuchuser/x", "--text", "a"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, env=environment)
    assert run.returncode == 2 and run.stdout == "", run.stderr
    assert run.stderr.strip().splitlines() == [
        "attnlab trace: error: --model: expected a checkpoint folder, a .gguf file, builtin:NAME or a hub id, "
        "got '~nosuchuser/x' "
        "(no such user's home directory)"
    ]


def test_an_empty_model_name_is_refused_not_the_working_directory(capsys):
    """Path("") is "." (a directory): an empty name must not load the working directory."""
    with pytest.raises(models.CheckpointError, match=r"got ''$"):
        models.load("")
    from attnlab.cli._main import main

    assert main(["trace", "--model", "", "--text", "a b"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "attnlab trace: error: --model: expected a checkpoint folder, a .gguf file, builtin:NAME or a hub id, got ''"
    ]


# --- item 4: settings accepted that should be refused ----------------------------------------


@pytest.mark.parametrize(("dtype", "name"), [(np.int32, "I32"), (np.bool_, "BOOL")])
def test_safetensors_weights_declared_int32_or_bool_are_refused(saved, tmp_path, dtype, name):
    from safetensors.numpy import load_file, save_file

    directory = copy_of(saved["gpt2"], tmp_path / name)
    tensors = load_file(directory / "model.safetensors")
    weight = next(n for n in tensors if n.endswith("h.0.ln_1.weight"))
    tensors[weight] = np.ones(tensors[weight].shape, dtype)
    save_file(tensors, directory / "model.safetensors")
    with pytest.raises(models.CheckpointError, match=rf"{weight}': expected F64, F32, F16 or BF16, got {name}$"):
        models.load(directory)


@pytest.mark.parametrize(
    ("value", "dtype", "got"),
    [(np.nan, np.float32, "1 NaN"), (-np.inf, np.float32, "1 -Inf"), (1e300, np.float64, "1 +Inf")],
)
def test_a_non_finite_weight_is_refused_at_load_naming_it(saved, tmp_path, capsys, value, dtype, got):
    """A NaN or an infinity in c_attn (32 × 96 numbers), or a float64 beyond float32's range
    (+Inf once read as float32): refused by name, in one CLI line."""
    from safetensors.numpy import load_file, save_file

    from attnlab.cli import main

    directory = copy_of(saved["gpt2"], tmp_path / "bad")
    tensors = load_file(directory / "model.safetensors")
    name = next(n for n in tensors if n.endswith("h.0.attn.c_attn.weight"))
    tensors[name] = tensors[name].astype(dtype)
    tensors[name][3, 5] = value
    save_file(tensors, directory / "model.safetensors")
    expected = f"{directory}: the weight {name!r}: expected finite numbers as float32, got {got} of its 3,072 numbers"
    with pytest.raises(models.CheckpointError) as caught:
        models.load(directory)
    assert str(caught.value) == expected
    assert main(["trace", "--model", str(directory), "--text", "hi"]) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1, err


def test_a_checkpoint_the_system_cannot_map_is_named_with_the_mapping(saved, monkeypatch):
    """As under `ulimit -v` with a file larger than the limit: mmap fails with ENOMEM."""
    import errno

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOMEM, os.strerror(errno.ENOMEM))

    monkeypatch.setattr(np, "memmap", refuse)
    path = saved["gpt2"] / "model.safetensors"
    with pytest.raises(models.CheckpointError, match=rf"^{re.escape(str(path))}: mapping its [\d,]+ bytes into memory"):
        models.load(saved["gpt2"])


@pytest.mark.parametrize(
    ("kind", "key", "value"),
    [("gpt2", "layer_norm_epsilon", math.nan), ("gpt2", "layer_norm_epsilon", -1e-5),
     ("bert", "layer_norm_eps", math.nan), ("llama", "rms_norm_eps", -1.0), ("gpt2", "layer_norm_epsilon", math.inf)],
)  # fmt: skip
def test_a_nan_or_negative_norm_epsilon_is_refused(saved, tmp_path, kind, key, value):
    directory = copy_of(saved[kind], tmp_path / "eps")
    edit_config(directory, **{key: value})
    with pytest.raises(models.CheckpointError, match=rf"config\.json: {key}: expected a finite number >= 0, got"):
        models.load(directory)


def test_load_with_dtype_none_is_refused_not_float64(saved):
    with pytest.raises(ArgumentTypeError, match=r"dtype: expected numpy\.float32 or numpy\.float64, got None"):
        models.load(saved["gpt2"], dtype=None)


@pytest.mark.parametrize("dtype", ["x", "bogus!!", 3, "int64"])
def test_load_with_a_dtype_numpy_cannot_read_is_refused_not_float64(saved, dtype):
    """np.dtype(None) is float64, so an unreadable dtype must not be compared as None."""
    with pytest.raises(ArgumentError, match=r"^dtype: expected numpy\.float32 or numpy\.float64"):
        models.load(saved["gpt2"], dtype=dtype)


def test_a_special_token_with_null_content_is_refused(saved, tmp_path):
    directory = copy_of(saved["gpt2"], tmp_path / "null")
    (directory / "vocab.json").write_text('{"a": 0, "b": 1}')
    (directory / "merges.txt").write_text("")
    decoder = {"2": {"content": None, "special": True}}
    (directory / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": decoder}))
    with pytest.raises(models.CheckpointError, match="special token's content to be a non-empty string, got None"):
        models.load(directory)


@pytest.mark.parametrize("token_id", ["-1", "x", "2.0"])
def test_a_special_token_with_an_id_that_is_not_a_count_is_refused(saved, tmp_path, token_id):
    """tokenizers would give it an id of its own choosing (2 over a vocabulary of 2)."""
    directory = copy_of(saved["gpt2"], tmp_path / "bad-id")
    (directory / "vocab.json").write_text('{"a": 0, "b": 1}')
    (directory / "merges.txt").write_text("")
    decoder = {token_id: {"content": "<x>", "special": True}}
    (directory / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": decoder}))
    with pytest.raises(
        models.CheckpointError, match=f"expected ids that are integers >= 0, got '{re.escape(token_id)}'"
    ):
        models.load(directory)


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"head_dim": 5}, "head_dim: expected an even number"),
     ({"hidden_size": 30}, "num_attention_heads: expected a divisor of hidden_size 30, got 4")],
)  # fmt: skip
def test_a_llama_config_transformers_refuses_is_refused_at_load(saved, tmp_path, changes, message):
    directory = copy_of(saved["llama"], tmp_path / "llama")
    edit_config(directory, **changes)
    with pytest.raises(Exception, match=r"RoPE requires an even|not a multiple of the number of attention heads"):
        transformers.AutoConfig.from_pretrained(directory)  # the oracle refuses it too
    with pytest.raises(models.CheckpointError, match=message):
        models.load(directory)


# --- item 5: unclear messages ----------------------------------------------------------------


def test_generate_10_to_the_13_tokens_names_max_new_tokens_not_a_memory_error(saved, tmp_path):
    directory = copy_of(saved["llama"], tmp_path / "long")
    edit_config(directory, max_position_embeddings=10**15)  # positions enough: the cache is what cannot be
    model = models.load(directory)
    with pytest.raises(ArgumentError, match=r"max_new_tokens: expected few enough tokens for the KV cache .*GiB"):
        model.generate([1, 2], 10**13)


def test_a_temperature_of_5e_324_draws_the_most_likely_token(saved):
    prompt = np.array([5, 17, 33])
    model = models.load(saved["gpt2"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no overflow warning, no NaN
        drawn = model.generate(prompt, 6, temperature=5e-324, rng=0)
    reference = transformers.AutoModelForCausalLM.from_pretrained(saved["gpt2"], attn_implementation="eager").eval()
    with torch.no_grad():
        greedy = reference.generate(
            torch.tensor(prompt[None]), max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0
        )
    np.testing.assert_array_equal(drawn, greedy.numpy()[0])


def test_ragged_input_ids_and_masks_name_the_argument(saved):
    model = models.load(saved["gpt2"])
    with pytest.raises(ArgumentTypeError, match=r"input_ids: expected an array \(equally long rows\), got list"):
        model([[1, 2], [3]])
    with pytest.raises(ArgumentTypeError, match=r"input_ids: expected an array \(equally long rows\)"):
        model.generate([[1, 2], [3]], 2)
    with pytest.raises(ArgumentTypeError, match=r"attention_mask: expected an array \(equally long rows\)"):
        model([[1, 2], [3, 4]], attention_mask=[[1, 1], [1]])
    bert = models.load(saved["bert"])
    with pytest.raises(ArgumentTypeError, match=r"token_type_ids: expected an array \(equally long rows\)"):
        bert([[1, 2], [3, 4]], token_type_ids=[[0, 0], [0]])


# --- issue 37, item 4: bounded loading of a hostile folder -------------------------------------


def write_vocab(directory: Path) -> None:
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d"]
    (directory / "vocab.txt").write_text("\n".join(tokens) + "\n")


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json", "tokenizer.json", "vocab.txt"])
def test_a_fifo_or_a_link_to_dev_zero_is_refused_before_it_is_opened(saved, tmp_path, name):
    for kind, make in (("a FIFO", os.mkfifo), ("a character device", lambda p: os.symlink("/dev/zero", p))):
        directory = copy_of(saved["bert"], tmp_path / f"{name}-{kind[2:6]}")
        write_vocab(directory)
        (directory / name).unlink(missing_ok=True)
        make(directory / name)  # a FIFO would block open() for ever; /dev/zero never ends
        with pytest.raises(models.CheckpointError, match=rf"{re.escape(name)}: expected a regular file, got {kind}$"):
            models.load(directory)


def test_a_file_past_the_size_limit_is_refused_naming_its_size_and_the_limit(saved, tmp_path, monkeypatch):
    from attnlab.models import _checkpoint

    directory = copy_of(saved["gpt2"], tmp_path / "big")
    size = (directory / "config.json").stat().st_size
    monkeypatch.setattr(_checkpoint, "MAX_JSON", size - 1)
    with pytest.raises(models.CheckpointError, match=rf"config.json: expected a file of at most {size - 1:,} bytes, "
                       rf"got {size:,} bytes$"):  # fmt: skip
        models.load(directory)


@pytest.mark.parametrize(("kind", "key"), [("gpt2", "n_layer"), ("bert", "num_hidden_layers"),
                                           ("llama", "num_hidden_layers")])  # fmt: skip
def test_a_layer_count_of_10_to_the_10_is_the_first_missing_layer_before_any_allocation(saved, tmp_path, kind, key):
    directory = copy_of(saved[kind], tmp_path / "layers")
    edit_config(directory, **{key: 10**10})
    with pytest.raises(models.CheckpointError, match=rf"the weight '.*\b2\.[a-z_.]+weight' is missing "
                       rf"\(config.json: {key}: 10,000,000,000 layers; the weights hold 2\)$"):  # fmt: skip
        models.load(directory)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model_type": ["llama"]}, r"model_type: expected one of gpt2, bert, llama, qwen2, mistral, got \['llama'\]"),
        ({"model_type": "mistral", "sliding_window": -1}, r"sliding_window: expected a positive integer, got -1"),
        ({"head_dim": 0}, r"head_dim: expected a positive integer, got 0"),
        ({"eos_token_id": ["</s>"]}, r"eos_token_id: expected a token id or a list of them, got \['</s>'\]"),
        ({"eos_token_id": 2.0}, r"eos_token_id: expected a token id or a list of them, got 2.0"),
    ],
)
def test_config_fields_of_the_wrong_type_are_refused_in_one_line(saved, tmp_path, changes, message):
    directory = copy_of(saved["llama"], tmp_path / "typed")
    edit_config(directory, **changes)
    with pytest.raises(models.CheckpointError, match=rf"^config.json: {message}$"):
        models.load(directory)


def test_a_model_type_list_is_one_cli_line(saved, tmp_path, capsys):
    from attnlab.cli import main

    directory = copy_of(saved["llama"], tmp_path / "typed")
    edit_config(directory, model_type=["llama"])
    assert main(["trace", "--model", str(directory), "--text", "a b"]) == 2
    err = capsys.readouterr().err
    assert "model_type: expected one of gpt2, bert, llama, qwen2, mistral, got ['llama']" in err
    assert err.count("\n") == 1


# --- issue 37, item 6: a suggested command is safe to paste ---------------------------------------


def test_the_conversion_command_of_a_pickle_checkpoint_keeps_a_hostile_folder_name_literal(tmp_path):
    import shlex

    directory = tmp_path / "a'$(touch x)'b"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (directory / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(models.CheckpointError, match="convert it to safetensors once with: python -c ") as caught:
        models.load(directory)
    command = str(caught.value).split("once with: ", 1)[1]
    words = shlex.split(command)
    assert words[:2] == ["python", "-c"] and words[3:] == [str(directory), f"{directory}-safetensors"]
    assert subprocess.run(["bash", "-n", "-c", command], check=False).returncode == 0
    # run through a shell, the arguments arrive as they are and nothing is executed
    echoed = subprocess.run(
        ["bash", "-c", command.replace("python -c", "printf '%s\\n'", 1)], cwd=tmp_path, capture_output=True, text=True
    )
    assert echoed.stdout.splitlines()[1:] == [str(directory), f"{directory}-safetensors"]
    assert not (tmp_path / "x").exists()


# --- issue 37, item 7: a lone surrogate in a model's text -----------------------------------------


def test_a_text_with_a_lone_surrogate_is_refused_naming_its_position(saved, tmp_path):
    directory = copy_of(saved["bert"], tmp_path / "words")
    write_vocab(directory)
    model = models.load(directory)
    with pytest.raises(ArgumentError, match=r"^text: expected a text of Unicode characters, got a lone surrogate at "
                       r"position 3$"):  # fmt: skip
        model.tokenizer.encode("abc\ud800d")
    with pytest.raises(ArgumentError, match="lone surrogate at position 0"):
        model.trace("\udfff")


def test_llama3_rope_with_equal_low_and_high_factors_equals_transformers_without_a_warning():
    """low_freq_factor == high_freq_factor leaves no medium band: its ramp divides by zero, and
    is never used. transformers gives the same frequencies; attnlab says nothing of the 0/0."""
    from transformers import modeling_rope_utils

    from attnlab.models._ops import rope_frequencies

    rope = {
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 2.0, "high_freq_factor": 2.0,
        "original_max_position_embeddings": 8,
    }  # fmt: skip
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, rope_parameters=rope)
    expected, _ = modeling_rope_utils.ROPE_INIT_FUNCTIONS["llama3"](config)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = rope_frequencies({"rope_parameters": rope}, 16)
    np.testing.assert_allclose(ours, expected.double().numpy(), rtol=1e-6)
