"""Chat models: a text as the user's message in the checkpoint's chat template, against
transformers' ``apply_chat_template(..., add_generation_prompt=True)`` (the oracle), on a
folder the test writes (MiniLM's tokenizer with a template) and on SmolLM2's GGUF file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkpoints import chat_model_folder, minilm_dir

transformers = pytest.importorskip("transformers")

from attnlab import ArgumentError, models  # noqa: E402
from attnlab.cli import main  # noqa: E402
from attnlab.models._checks import sequence_ids  # noqa: E402

TEXTS = ["Hello there", "小明是个运动达人，他平时很爱打篮球", "an emoji 🙂", ""]


def _oracle_ids(tokenizer: Any, text: str) -> list[int]:
    made = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    return list(made["input_ids"] if hasattr(made, "keys") else made)


@pytest.fixture(scope="module")
def chat_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return chat_model_folder(tmp_path_factory.mktemp("chat"))


@pytest.mark.parametrize("text", TEXTS, ids=["english", "chinese", "emoji", "empty"])
def test_chat_ids_equal_apply_chat_template(chat_folder: Path, text: str) -> None:
    model = models.load(chat_folder)
    oracle = transformers.AutoTokenizer.from_pretrained(str(chat_folder))
    prompt = sequence_ids(model.config, model.tokenizer, text, chat=True)
    assert prompt.ids.tolist() == _oracle_ids(oracle, text)


def test_the_template_tokens_are_marked_apart_from_the_users_words(chat_folder: Path) -> None:
    """The tokens not marked are exactly the user's text as the tokenizer cuts it alone
    (a hand check: [CLS] user : | hello there | [SEP] assistant :)."""
    model = models.load(chat_folder)
    trace = model.trace("Hello there", layers=0, chat=True)
    words = [t for t, mark in zip(trace.tokens, trace.template, strict=True) if not mark]
    assert words == ["hello", "there"]
    assert trace.template == [True, True, True, False, False, True, True, True]
    assert any("chat template" in note for note in trace.notes)


def test_a_model_without_a_template_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    model = models.load(minilm_dir())
    with pytest.raises(ArgumentError, match="chat: expected a chat model"):
        model.trace("Hello", chat=True)
    assert main(["trace", "--model", str(minilm_dir()), "--text", "Hello", "--chat"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "attnlab trace: error: --chat: expected a chat model" in err


@pytest.mark.slow
@pytest.mark.parametrize("text", TEXTS, ids=["english", "chinese", "emoji", "empty"])
def test_smollm2_chat_ids_equal_apply_chat_template(smollm2: Any, smollm2_transformers: Any, text: str) -> None:
    oracle = smollm2_transformers[1]  # conftest.py's: transformers' tokenizer of the GGUF, loaded once
    prompt = sequence_ids(smollm2.config, smollm2.tokenizer, text, chat=True)
    assert prompt.ids.tolist() == _oracle_ids(oracle, text)
    message = [{"role": "user", "content": text}]
    rendered = oracle.apply_chat_template(message, add_generation_prompt=True, tokenize=False)
    assert rendered.endswith("<|im_start|>assistant\n")


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.mark.parametrize("text", ["a", "assistant", "user"], ids=["letter", "assistant", "role"])
def test_the_users_words_are_found_where_the_template_put_them_not_elsewhere(chat_folder: Path, text: str) -> None:
    """A word that the template also writes after the message ("assistant", its role, a
    letter of either) is marked where the message is: by hand, the unmarked tokens are the
    text's own tokens (the tokenizer alone), and they sit right after "user \\n"."""
    model = models.load(chat_folder)
    model.tokenizer.chat_template = CHATML
    trace = model.trace(text, layers=0, chat=True)
    words = [i for i, mark in enumerate(trace.template) if not mark]
    alone = model.tokenizer.encode(text, add_special_tokens=False).tolist()
    assert [trace.ids[i] for i in words] == alone
    assert words == list(range(words[0], words[0] + len(alone))) and words[0] < len(trace.ids) - 4


@pytest.mark.parametrize(
    "template",
    [
        "{{ 1/0 }}",
        "{{ 1 + 'a' }}",
        "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
        "{{ 'a' * 10**10 }}",
        "{{ raise_exception('two\\nlines') }}",
        "{{ ''.__class__.__mro__ }}",
    ],
    ids=["division", "type", "recursion", "huge-product", "two-lines", "escape"],
)
def test_a_hostile_template_is_one_line_not_a_traceback_or_a_hang(chat_folder: Path, template: str) -> None:
    model = models.load(chat_folder)
    model.tokenizer.chat_template = template
    with pytest.raises(ArgumentError, match="chat: the model's chat template fails") as error:
        model.trace("hello", chat=True)
    assert "\n" not in str(error.value)


def test_a_template_that_changes_the_text_marks_nothing_and_says_so(chat_folder: Path) -> None:
    model = models.load(chat_folder)
    model.tokenizer.chat_template = "{{ messages[0]['content'] | trim }}"
    trace = model.trace("  hello  ", layers=0, chat=True)
    assert not any(trace.template)
    assert any("not marked" in note for note in trace.notes)
