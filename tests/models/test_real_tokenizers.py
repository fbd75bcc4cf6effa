"""Tokenizers as transformers treats them, on a checkpoint other people published
(all-MiniLM-L6-v2, whose tokenizer.json pads and truncates every text to 128 tokens) and on
folders the tests write: the oracle is transformers' ``AutoTokenizer``, never attnlab."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from checkpoints import minilm_dir

transformers = pytest.importorskip("transformers")

from attnlab import ArgumentError, models  # noqa: E402
from attnlab.cli import main  # noqa: E402
from attnlab.models._tokenizer import read_tokenizer  # noqa: E402

ANIMAL = "The animal didn't cross the street because it was too tired."
TEXTS = [
    ANIMAL,
    "小明是个运动达人，他平时很爱打篮球",
    "Emoji too: 🙂👍🏽 and 🇫🇷!",
    "",
    "  Ünïcödé   àccents, naïve café  ",
]


@pytest.fixture(scope="module")
def minilm() -> Any:
    return models.load(minilm_dir())


@pytest.fixture(scope="module")
def minilm_oracle() -> Any:
    return transformers.AutoTokenizer.from_pretrained(str(minilm_dir()))


@pytest.mark.parametrize("special", [True, False], ids=["special", "plain"])
@pytest.mark.parametrize("text", TEXTS, ids=["english", "chinese", "emoji", "empty", "accents"])
def test_minilm_ids_equal_transformers(minilm: Any, minilm_oracle: Any, text: str, special: bool) -> None:
    expected = minilm_oracle(text, add_special_tokens=special)["input_ids"]
    assert minilm.tokenizer.encode(text, add_special_tokens=special).tolist() == expected


def test_minilm_sentence_is_its_own_16_tokens_not_128(minilm: Any, minilm_oracle: Any) -> None:
    """The folder's tokenizer.json pads to a fixed 128 with unmasked [PAD]s; transformers
    turns padding off unless asked, and so does attnlab."""
    trace = minilm.trace(ANIMAL, layers=0)
    assert trace.ids == minilm_oracle(ANIMAL)["input_ids"]
    assert len(trace.ids) == 16
    assert "[PAD]" not in trace.tokens


def _over(oracle: Any, limit: int, extra: int) -> str:
    """A text of ``limit + extra`` tokens with [CLS] and [SEP], by transformers' count."""
    text = " ".join(["attention"] * (limit - 2 + extra))
    assert len(oracle(text)["input_ids"]) == limit + extra
    return text


def test_minilm_at_the_limit_is_taken_whole(minilm: Any, minilm_oracle: Any) -> None:
    text = _over(minilm_oracle, 512, 0)
    assert minilm.tokenizer.encode(text).tolist() == minilm_oracle(text)["input_ids"]
    from attnlab.models._checks import sequence_ids

    assert len(sequence_ids(minilm.config, minilm.tokenizer, text).ids) == 512


def test_minilm_over_the_limit_is_refused_with_the_limit_and_the_count(minilm: Any, minilm_oracle: Any) -> None:
    text = _over(minilm_oracle, 512, 90)
    with pytest.raises(ArgumentError) as error:
        minilm.trace(text, layers=0)
    message = str(error.value)
    assert "\n" not in message
    assert "at most 512 tokens" in message and "got 602" in message


@pytest.mark.slow
def test_minilm_truncation_cuts_as_transformers_and_the_trace_says_so(minilm: Any, minilm_oracle: Any) -> None:
    text = _over(minilm_oracle, 512, 90)
    trace = minilm.trace(text, layers=-1, truncation=True)
    assert trace.ids == minilm_oracle(text, truncation=True)["input_ids"]
    assert len(trace.ids) == 512 and trace.tokens[-1] == "[SEP]"
    assert any("512 of 602" in note for note in trace.notes)
    assert "512 of 602" in trace.render(lang="en").splitlines()[0]


@pytest.mark.slow
def test_cli_refuses_a_long_text_in_one_line_and_cuts_it_with_truncate(
    minilm_oracle: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _over(minilm_oracle, 512, 10)
    assert main(["trace", "--model", str(minilm_dir()), "--text", text, "--layer", "0", "--format", "json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 or err.splitlines()[-1].startswith("attnlab trace: error:")
    last = err.splitlines()[-1]
    assert "--text: expected at most 512 tokens" in last and "--truncate" in last and "got 522" in last
    assert main(["trace", "--model", str(minilm_dir()), "--text", text, "--layer", "0", "--format", "json",
                 "--truncate"]) == 0  # fmt: skip
    saved = json.loads(capsys.readouterr().out)
    assert len(saved["tokens"]) == 512 and any("512 of 522" in note for note in saved["notes"])


# ---- folders whose tokenizer_config.json settings transformers honours ----


def _folder(tmp_path: Path, settings: dict[str, Any], name: str = "tok") -> Path:
    """MiniLM's tokenizer files with other tokenizer_config.json settings."""
    directory = tmp_path / name
    directory.mkdir()
    for file in ("tokenizer.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(minilm_dir() / file, directory / file)
    base = json.loads((minilm_dir() / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({**base, **settings}))
    return directory


@pytest.mark.parametrize(
    "settings",
    [
        {"do_lower_case": False},
        {"strip_accents": False},
        {"tokenize_chinese_chars": False},
        {"add_bos_token": True, "add_eos_token": True, "bos_token": "[CLS]", "eos_token": "[SEP]"},
        {"add_bos_token": False, "add_eos_token": False, "tokenizer_class": "PreTrainedTokenizerFast"},
        {"model_max_length": 20},
        {"tokenizer_class": "PreTrainedTokenizerFast", "do_lower_case": False},
    ],
    ids=["cased", "accents-kept", "chinese-as-words", "bos-eos", "no-bos-eos-fast", "max-length", "fast-class"],
)
def test_settings_are_honoured_as_transformers_honours_them(tmp_path: Path, settings: dict[str, Any]) -> None:
    directory = _folder(tmp_path, settings)
    oracle = transformers.AutoTokenizer.from_pretrained(str(directory))
    ours = read_tokenizer(directory)
    assert ours is not None
    for text in TEXTS:
        for special in (True, False):
            assert (
                ours.encode(text, add_special_tokens=special).tolist()
                == oracle(text, add_special_tokens=special)["input_ids"]
            ), (text, special)
    assert ours.model_max_length == (None if oracle.model_max_length > 1e29 else oracle.model_max_length)


def test_model_max_length_below_the_positions_is_the_limit(tmp_path: Path) -> None:
    directory = tmp_path / "model"
    shutil.copytree(minilm_dir(), directory)
    settings = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({**settings, "model_max_length": 10}))
    model = models.load(directory)
    oracle = transformers.AutoTokenizer.from_pretrained(str(directory))
    with pytest.raises(ArgumentError, match="at most 10 tokens, the tokenizer's model_max_length"):
        model.trace(ANIMAL, layers=0)
    assert model.trace(ANIMAL, layers=0, truncation=True).ids == oracle(ANIMAL, truncation=True)["input_ids"]


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"add_eos_token": True, "eos_token": None}, "add_eos_token is true but no eos_token"),
        ({"add_bos_token": True, "bos_token": "<s>"}, "'<s>' is not in the vocabulary"),
        ({"add_bos_token": False, "bos_token": "[CLS]"}, "add_bos_token false, but the tokenizer adds '\\[CLS\\]'"),
        ({"add_bos_token": "yes"}, "add_bos_token: expected true or false"),
        ({"do_lower_case": "no"}, "do_lower_case: expected true or false"),
        ({"model_max_length": -3}, "model_max_length: expected a positive integer"),
        ({"chat_template": 7}, "chat_template: expected a text"),
    ],
    ids=[
        "eos-unnamed",
        "bos-not-in-vocabulary",
        "bos-contradicts-post-processor",
        "flag-not-bool",
        "lower-not-bool",
        "negative-length",
        "template-not-text",
    ],
)
def test_settings_that_contradict_each_other_are_one_line(tmp_path: Path, settings: dict[str, Any], words: str) -> None:
    directory = _folder(tmp_path, settings)
    with pytest.raises(ArgumentError, match=words) as error:
        read_tokenizer(directory)
    assert "\n" not in str(error.value)


def test_the_sentence_weights_equal_transformers(minilm: Any) -> None:
    """The real BERT, layer by layer: attnlab's weights of every head against transformers'
    eager attention on the same ids (float32)."""
    torch = pytest.importorskip("torch")
    oracle = transformers.AutoModel.from_pretrained(str(minilm_dir()), attn_implementation="eager").eval()
    trace = minilm.trace(ANIMAL)
    with torch.no_grad():
        out = oracle(torch.tensor([trace.ids]), output_attentions=True)
    for layer in range(6):
        expected = out.attentions[layer][0].numpy()  # (heads, L, L)
        np.testing.assert_allclose(trace[layer].weights, expected, atol=2e-6, rtol=0)


@pytest.mark.parametrize(
    ("files", "setting"),
    [
        ({"vocab.txt": "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\ncat\n"}, {"do_lower_case": "false"}),
        ({"vocab.txt": "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\ncat\n"}, {"tokenize_chinese_chars": 0}),
        (
            {"vocab.json": '{"a": 0, "b": 1, "ab": 2}', "merges.txt": "#version: 0.2\na b\n"},
            {"add_prefix_space": "false"},
        ),
    ],
    ids=["lower-case-as-text", "chinese-as-number", "prefix-space-as-text"],
)
def test_a_switch_of_another_type_is_refused_not_read_as_true(
    tmp_path: Path, files: dict[str, str], setting: dict
) -> None:
    """ "false" is a non-empty string, true to Python's bool(): the switch would flip silently."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(setting))
    (name,) = setting
    with pytest.raises(ArgumentError, match=f"tokenizer_config.json: {name}: expected true or false, got") as error:
        read_tokenizer(tmp_path)
    assert "\n" not in str(error.value)
