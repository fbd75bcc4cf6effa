"""attnlab trace|plot|view --model on any architecture transformers loads: the NumPy path
for the ones attnlab re-implements, transformers on attnlab's engine for the rest, the
command saying which; --backend forces one. Oracle: transformers' eager attention."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from checkpoints import SENTENCE, tiny_model, train_tokenizers
from helpers import run_cli

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("attnlab.hf")


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tokenizers(tmp_path_factory.mktemp("tokenizers"))["vocab+merges-tokenizer.json"]


@pytest.fixture(scope="module")
def mistral_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    directory = tmp_path_factory.mktemp("mistral")
    tiny_model("mistral").save_pretrained(directory)
    transformers.AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    directory = tmp_path_factory.mktemp("whisper")
    torch.manual_seed(7)
    config = transformers.WhisperConfig(
        vocab_size=300, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_source_positions=16, num_mel_bins=8,
        max_target_positions=32, pad_token_id=0, bos_token_id=0, eos_token_id=0, decoder_start_token_id=0,
    )  # fmt: skip
    transformers.WhisperForConditionalGeneration(config).save_pretrained(directory)
    transformers.WhisperFeatureExtractor(feature_size=8, chunk_length=0.32).save_pretrained(directory)
    transformers.AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def vit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("vit")
    torch.manual_seed(8)
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, image_size=32, patch_size=8
    )
    transformers.ViTModel(config).save_pretrained(directory)
    transformers.ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(directory)
    return directory


def test_a_mistral_directory_runs_on_the_numpy_path_and_on_transformers_when_forced(capsys, mistral_dir) -> None:
    code, out, err = run_cli(capsys, "trace", "--model", str(mistral_dir), "--text", SENTENCE, "--format", "json")
    assert code == 0 and "(mistral) ran in attnlab's NumPy model" in err
    numpy_path = json.loads(out)
    code, out, err = run_cli(
        capsys,
        "trace",
        "--model",
        str(mistral_dir),
        "--text",
        SENTENCE,
        "--format",
        "json",
        "--backend",
        "transformers",
    )
    assert code == 0 and "(mistral) ran in transformers, on attnlab's engine" in err
    hf_path = json.loads(out)
    assert list(hf_path["layers"]) == ["1"] == list(numpy_path["layers"])  # the last layer by default
    assert hf_path["layers"]["1"]["tokens"] == numpy_path["layers"]["1"]["tokens"]
    np.testing.assert_allclose(
        np.array(hf_path["layers"]["1"]["weights"]), np.array(numpy_path["layers"]["1"]["weights"]), atol=1e-5
    )


def test_stats_of_a_mistral_directory_agree_on_both_backends(capsys, mistral_dir) -> None:
    from attnlab.trace import ModelStatistics

    base = ("trace", "--model", str(mistral_dir), "--text", SENTENCE, "--stats", "--top-k", "3")
    saved = {}
    for backend in ("numpy", "transformers"):
        code, out, err = run_cli(capsys, *base, "--backend", backend)
        assert code == 0 and "ran in" in err, err
        saved[backend] = ModelStatistics.from_json(out).statistics
    assert saved["numpy"].top_keys.shape == saved["transformers"].top_keys.shape
    np.testing.assert_allclose(saved["numpy"].entropy, saved["transformers"].entropy, atol=1e-5)
    np.testing.assert_allclose(saved["numpy"].local_share, saved["transformers"].local_share, atol=1e-5)


@pytest.mark.slow
def test_a_whisper_directory_traces_its_decoder_over_silence_and_says_so(capsys, whisper_dir, tmp_path) -> None:
    page = tmp_path / "whisper.html"
    code, _, err = run_cli(capsys, "view", "--model", str(whisper_dir), "--text", "他很爱打篮球", "-o", str(page))
    assert code == 0, err
    assert "(whisper) ran in transformers, on attnlab's engine" in err
    assert page.stat().st_size > 0
    code, out, err = run_cli(capsys, "trace", "--model", str(whisper_dir), "--text", "他很爱打篮球", "--format", "json")
    assert code == 0, err
    saved = json.loads(out)
    assert saved["kinds"] == {"2": "cross"}  # the last entry: the decoder's cross-attention
    assert saved["source_tokens"][0] == "silence 0" and len(saved["source_tokens"]) == 16
    code, _, err = run_cli(capsys, "plot", "--model", str(whisper_dir), "--text", "他很", "-o", str(tmp_path / "w.png"))
    assert code == 0, err


def test_a_vit_directory_reads_the_picture_of_image(capsys, vit_dir, tmp_path) -> None:
    from PIL import Image

    picture = tmp_path / "red.png"
    pixels = np.zeros((32, 32, 3), np.uint8)
    pixels[:, :16, 0] = 255
    Image.fromarray(pixels).save(picture)
    code, out, err = run_cli(capsys, "trace", "--model", str(vit_dir), "--image", str(picture), "--format", "json")
    assert code == 0, err
    saved = json.loads(out)
    assert saved["patch_grid"] == [4, 4] and saved["tokens"][:2] == ["[CLS]", "patch 0,0"]
    assert len(saved["tokens"]) == 17


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backend", "numpy"], "--backend: expected 'transformers' for {d}, a 'vit' model (attnlab runs gpt2, bert"),
        ([], "--model: {d} is a vision model; give it a picture with --image FILE"),
    ],
)
def test_bad_choices_are_one_line_with_exit_status_2(capsys, vit_dir, argv, message) -> None:
    code, _, err = run_cli(capsys, "trace", "--model", str(vit_dir), "--text", "a", *argv)
    assert code == 2 and message.format(d=vit_dir) in err and len(err.strip().splitlines()) == 1


def test_image_and_backend_need_a_model_and_a_missing_picture_is_named(capsys, vit_dir, tmp_path) -> None:
    code, _, err = run_cli(capsys, "trace", "--image", "x.png")
    assert code == 2 and "--image: expected --model with it" in err
    code, _, err = run_cli(capsys, "trace", "--text", "a", "--backend", "numpy")
    assert code == 2 and "--backend: expected --model with it" in err
    code, _, err = run_cli(capsys, "trace", "--model", str(vit_dir), "--image", str(tmp_path / "none.png"))
    assert code == 2 and "--image: no such file" in err


@pytest.fixture(scope="module")
def bart_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    directory = tmp_path_factory.mktemp("bart")
    torch.manual_seed(9)
    config = transformers.BartConfig(
        vocab_size=300, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
    )  # fmt: skip
    transformers.BartForConditionalGeneration(config).save_pretrained(directory)
    transformers.AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(directory)
    return directory


def test_what_the_review_found_is_one_line_naming_the_option(
    capsys, mistral_dir, vit_dir, bart_dir, tmp_path, monkeypatch
) -> None:
    from PIL import Image

    cases = [
        (["trace", "--model", str(mistral_dir), "--text", "", "--backend", "transformers"],
         "--text: expected a text of at least one token"),
        (["trace", "--model", str(mistral_dir), "--image", str(tmp_path / "p.png"), "--backend", "transformers"],
         "--image: " + str(mistral_dir) + " is not a vision model"),
        (["trace", "--model", str(mistral_dir), "--text", SENTENCE, "--layer", "1,0,1"], "expected each layer once"),
        (["ablate", "--model", str(bart_dir), "--text", "the cat sat", "--backend", "transformers"],
         "--model: attnlab runs decoder-only and encoder-only models here; bart is an encoder-decoder"),
        (["view", "--model", str(bart_dir), "--text", "the cat", "--generate", "2", "-o", str(tmp_path / "g.html")],
         "--model: attnlab runs decoder-only and encoder-only models here; bart is an encoder-decoder"),
        (["view", "--model", str(bart_dir), "--text", "the cat", "--text", "a dog", "-o", str(tmp_path / "p.html")],
         "--model: attnlab runs decoder-only and encoder-only models here; bart is an encoder-decoder"),
        (["heads", "--model", str(bart_dir), "--text", "the cat sat"],
         "--model: attnlab runs decoder-only and encoder-only models here; bart is an encoder-decoder"),
        (["trace", "--model", str(vit_dir), "--image", str(tmp_path / "p.png")], "--image: " + str(tmp_path / "p.png")
         + " is too large a picture"),
    ]  # fmt: skip
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(tmp_path / "p.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 4,096 pixels: over twice the limit, a "bomb"
    for argv, message in cases:
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (argv, err)


def test_the_python_api_refuses_what_it_cannot_run_by_name(bart_dir) -> None:
    from attnlab import hf

    tokenizer = transformers.AutoTokenizer.from_pretrained(bart_dir)
    model = transformers.BartForConditionalGeneration.from_pretrained(bart_dir)
    with pytest.raises(ValueError, match="model: expected a decoder-only model"):
        hf.trace_generation(model, "the cat", 2, tokenizer=tokenizer)
    with pytest.raises(TypeError, match="model: expected a transformers model"):
        hf.trace(object(), "the cat", tokenizer=tokenizer)
    with pytest.raises(ValueError, match="text_or_inputs: expected a text of at least one token"):
        hf.trace(model, "", tokenizer=tokenizer)
    attention = model.model.encoder.layers[0].self_attn
    three = torch.zeros(2, 3, 8)
    with pytest.raises(ValueError, match=r"query: expected a 4-D tensor \(B, heads, length, width\), got shape"):
        hf.attention_forward(attention, three, three, three, None)
    with pytest.raises(TypeError, match="query: expected a torch tensor, got ndarray"):
        hf.attention_forward(attention, three.numpy(), three, three, None)


def test_a_checkpoint_without_the_head_the_work_uses_is_refused_by_its_missing_weights(capsys) -> None:
    from checkpoints import minilm_dir

    directory = minilm_dir()  # a BertModel: no language-modelling head
    code, _, err = run_cli(
        capsys, "ablate", "--model", str(directory), "--text", "the cat", "--backend", "transformers"
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "transformers would initialise cls.predictions.* at random (not in the checkpoint)" in err


def _broken(base: Path, source: Path, name: str, config: dict | None = None, weights: Any = None) -> Path:
    import shutil

    directory = base / name
    shutil.copytree(source, directory)
    if config is not None:
        saved = json.loads((directory / "config.json").read_text())
        (directory / "config.json").write_text(json.dumps({**saved, **config}))
    if weights is not None:
        path = directory / "model.safetensors"
        path.write_bytes(weights(path.read_bytes()))
    return directory


def test_a_checkpoint_transformers_cannot_load_is_one_line_naming_the_file_or_field(
    capsys, mistral_dir, tmp_path
) -> None:
    import struct

    def header(data: bytes) -> int:
        return 8 + struct.unpack("<Q", data[:8])[0]

    cases = [
        ("hidden", {"hidden_size": "32"}, None, "hidden_size"),
        ("layers", {"layer_types": ["full_attention"] * 5}, None, "layer_types"),
        ("huge", None, lambda b: struct.pack("<Q", 2**63 - 1) + b[8:], "model.safetensors: expected a header of"),
        ("past", None, lambda b: b[: header(b)] + b[header(b) :][:16], "past the data's 16 bytes (truncated)"),
        ("short", None, lambda b: b[: len(b) // 3], "model.safetensors: "),
        ("json", None, lambda b: b[:8] + b"{" * (header(b) - 8) + b[header(b) :], "the header is not JSON"),
        ("window", {"sliding_window": -1}, None, "sliding_window: expected a positive whole number"),
    ]
    for name, config, weights, message in cases:
        directory = _broken(tmp_path, mistral_dir, name, config, weights)
        for command in ("trace", "ablate", "heads"):
            code, _, err = run_cli(
                capsys, command, "--model", str(directory), "--text", "a b", "--backend", "transformers"
            )
            assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (name, command, err)
    pickled = _broken(tmp_path, mistral_dir, "pickle")
    (pickled / "model.safetensors").unlink()
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04cos\nsystem\n.")
    code, _, err = run_cli(capsys, "trace", "--model", str(pickled), "--text", "a", "--backend", "transformers")
    assert code == 2 and "pytorch_model.bin: torch's weights_only load refuses it" in err, err
    assert len(err.strip().splitlines()) == 1


def test_head_dim_0_prints_no_torch_warning_before_its_one_line(capsys, mistral_dir, tmp_path) -> None:
    directory = _broken(tmp_path, mistral_dir, "head0", {"head_dim": 0})
    _, _, err = run_cli(capsys, "trace", "--model", str(directory), "--text", "a b", "--backend", "transformers")
    assert len(err.strip().splitlines()) == 1 and "Warning" not in err, err  # the one line: its refusal or backend


def test_a_hostile_folder_is_refused_in_one_line_before_transformers_reads_it(capsys, mistral_dir, tmp_path) -> None:
    """What the round-4 review found on the transformers path: each refused in one line naming
    the file or field, before transformers builds anything (10⁹ layers used to hang)."""
    import os

    cases = {
        "layers": ({"num_hidden_layers": 10**9}, "num_hidden_layers: expected at most 2, the layers its weights hold"),
        "model_type": ({"model_type": ["mistral"]}, "config.json's model_type: expected a text, got ['mistral']"),
        "heads": ({"num_attention_heads": 0}, "config.json's num_attention_heads: expected a positive whole number"),
        "head_dim": ({"head_dim": 0}, "config.json's head_dim: expected a positive whole number, got 0"),
        "hidden": ({"hidden_size": 4.5}, "config.json's hidden_size: expected a positive whole number, got 4.5"),
    }
    for name, (config, message) in cases.items():
        directory = _broken(tmp_path, mistral_dir, name, config)
        code, _, err = run_cli(capsys, "trace", "--model", str(directory), "--text", "a b", "--backend", "transformers")
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (name, err)
        assert f"error: --model {directory}: " in err, err  # the option, not the library's argument
    for file, kind in (("config.json", "fifo"), ("tokenizer_config.json", "zero"), ("tokenizer.json", "fifo")):
        directory = _broken(tmp_path, mistral_dir, f"{file}-{kind}")
        (directory / file).unlink()
        if kind == "fifo":
            os.mkfifo(directory / file)  # reading it would block for ever
        else:
            (directory / file).symlink_to("/dev/zero")  # reading it would never end
        code, _, err = run_cli(capsys, "trace", "--model", str(directory), "--text", "a b", "--backend", "transformers")
        what = "a FIFO" if kind == "fifo" else "a character device"
        assert code == 2 and f"{file}: expected a regular file, got {what}" in err, (file, err)
        assert len(err.strip().splitlines()) == 1, err


def test_a_safetensors_model_larger_than_memory_is_refused_from_its_header(capsys, mistral_dir, monkeypatch) -> None:
    from attnlab.models import _checkpoint

    monkeypatch.setattr(_checkpoint, "available_memory", lambda: 10_000)  # bytes: far less than the tiny model's
    for backend in ("numpy", "transformers"):
        code, _, err = run_cli(capsys, "trace", "--model", str(mistral_dir), "--text", "a b", "--backend", backend)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "GiB as float32, more than this machine's 0.0 GiB of memory" in err, (backend, err)


def test_sizes_that_do_not_fit_the_weights_say_so_in_one_line(capsys, mistral_dir, tmp_path) -> None:
    directory = _broken(tmp_path, mistral_dir, "wide", {"hidden_size": 64})  # the weights are 32 wide
    code, _, err = run_cli(capsys, "trace", "--model", str(directory), "--text", "a b", "--backend", "transformers")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "config.json's sizes (hidden_size, vocab_size, head_dim and the like) do not fit the weights' shapes" in err


def test_a_masked_lm_checkpoint_traces_without_its_pooler_which_no_view_reads(capsys, tmp_path) -> None:
    """A BertForMaskedLM has no pooler; AutoModel's BertModel would make one at random, but the
    trace reads the attention, before it: the trace runs, and equals eager's attention."""
    directory = tmp_path / "bert"
    model = tiny_model("bert")
    model.save_pretrained(directory)
    transformers.AutoTokenizer.from_pretrained(train_tokenizers(tmp_path / "tok")["vocab.txt"]).save_pretrained(
        directory
    )
    code, out, err = run_cli(
        capsys, "trace", "--model", str(directory), "--text", "a b", "--backend", "transformers", "--format", "json"
    )
    assert code == 0, err
    trace = json.loads(out)
    ids = torch.tensor([trace["ids"]])
    with torch.no_grad():
        eager = transformers.BertModel.from_pretrained(directory, attn_implementation="eager")
        expected = eager(ids, output_attentions=True).attentions[-1][0].numpy()
    np.testing.assert_allclose(np.array(trace["layers"]["1"]["weights"]), expected, atol=1e-6)
