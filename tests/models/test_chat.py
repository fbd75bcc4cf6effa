"""Chat models: a text as the user's message in the checkpoint's chat template, against
transformers' ``apply_chat_template(..., add_generation_prompt=True)`` (the oracle), on a
folder the test writes (MiniLM's tokenizer with a template) and on SmolLM2's GGUF file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from checkpoints import chat_model_folder, minilm_dir

transformers = pytest.importorskip("transformers")

from attnlab import ArgumentError, models  # noqa: E402
from attnlab.cli import main  # noqa: E402
from attnlab.models import _chat  # noqa: E402
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


EXHAUSTING = {  # the hostile review's templates (issue 44): each reached 1.6–3.0 GB, or ran past 30 s
    "a product in a loop": "{% for i in range(100000) %}{{ 'a' * 1000000 }}{% endfor %}",
    "~ doubled 40 times": "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}{{ ns.s | length }}",
    "+ doubled 40 times": "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
    "{% endfor %}{{ ns.s | length }}",
    "center": "{{ 'x' | center(2000000000) }}",
    "percent": "{{ '%2000000000s' % 'x' }}",
    "format": "{{ '{:>2000000000}'.format('x') }}",
    "indent": "{{ 'x' | indent(2000000000) }}",
    "nested loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "lipsum": "{{ lipsum(1000000) }}",
}


@pytest.mark.parametrize("template", list(EXHAUSTING.values()), ids=list(EXHAUSTING))
def test_a_template_that_would_exhaust_the_machine_is_stopped_by_the_renderers_bounds(
    chat_folder: Path, template: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each is stopped by a bound of the child process that renders it, whatever operator
    builds the string: its memory, its CPU time (lowered to 1 s here), or its output."""
    import resource

    monkeypatch.setattr(_chat, "SECONDS", 1)
    model = models.load(chat_folder)
    model.tokenizer.chat_template = template
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ArgumentError, match="chat: the model's chat template fails: it ") as error:
        model.trace("hello", chat=True)
    bounds = r"builds more than 512 MiB|ran for more than 1 s of CPU time|writes more than 100,000 characters besides"
    assert re.search(bounds, str(error.value)) is not None and "\n" not in str(error.value)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before  # KiB
    assert grown < 200 * 1024  # this process built none of it


@pytest.mark.slow
def test_the_cli_refuses_an_endless_template_in_one_line_at_its_own_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the bounds as shipped (5 s of CPU time): `attnlab trace --chat` on a folder whose
    chat_template.jinja loops without end is one line and exit status 2."""
    folder = chat_model_folder(tmp_path)
    (folder / "chat_template.jinja").write_text(EXHAUSTING["nested loops"])  # read before tokenizer_config.json's
    assert main(["trace", "--model", str(folder), "--text", "hello", "--chat"]) == 2
    err = capsys.readouterr().err
    why = "it ran for more than 5 s of CPU time"
    assert err == f"attnlab trace: error: --chat: the model's chat template fails: {why}\n"


def test_a_template_that_writes_a_lone_surrogate_is_one_line_not_a_traceback(
    chat_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = chat_folder.parent / "surrogate"
    if not folder.exists():
        import shutil

        shutil.copytree(chat_folder, folder)
    (folder / "chat_template.jinja").write_text("{{ '\\ud800' }}{{ messages[0]['content'] }}")
    assert main(["trace", "--model", str(folder), "--text", "hi there", "--chat"]) == 2
    err = capsys.readouterr().err
    why = "it writes a lone surrogate (half of a UTF-16 pair), which no text holds"
    assert err == f"attnlab trace: error: --chat: the model's chat template fails: {why}\n"


def test_the_templates_own_output_is_bounded_besides_the_users_text(chat_folder: Path) -> None:
    """A long message passes (it is the user's); the template's own writing is bounded at
    10⁵ characters whatever the message's length."""
    model = models.load(chat_folder)
    model.tokenizer.chat_template = "{{ messages[0]['content'] }}{{ 'x' * 99990 }}"
    assert len(_chat.chat_prompt(model.tokenizer, "y" * 200_000)[0]) == 200_000 + 99_990
    model.tokenizer.chat_template = "{{ messages[0]['content'] }}{{ 'x' * 100_001 }}"
    with pytest.raises(ArgumentError, match=r"it writes more than 100,000 characters besides the message$"):
        _chat.chat_prompt(model.tokenizer, "")


def test_a_template_that_leaves_the_users_text_out_is_refused(chat_folder: Path) -> None:
    model = models.load(chat_folder)
    model.tokenizer.chat_template = "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(ArgumentError, match="chat: expected a chat template that writes the user's message, got one"):
        model.trace("hello", chat=True)


def test_a_template_that_changes_the_text_marks_nothing_and_says_so(chat_folder: Path) -> None:
    model = models.load(chat_folder)
    model.tokenizer.chat_template = "{{ messages[0]['content'] | trim }}"
    trace = model.trace("  hello  ", layers=0, chat=True)
    assert not any(trace.template)
    assert any("not marked" in note for note in trace.notes)
