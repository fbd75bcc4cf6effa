"""The shipped model that learned 他 → 小明 (builtin:coref): its accuracy on held-out
sentences, its answering head on the article's sentence, and transformers reading it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from attnlab import models
from attnlab.experiments import _coref

SENTENCE = "小明是个运动达人，他平时很爱打篮球"


@pytest.fixture(scope="module")
def model() -> models.Model:
    return models.load("builtin:coref")


def answering_head(model: models.Model) -> tuple[int, int]:
    head = model.config.raw["attnlab"]["answer_head"]
    return head["layer"], head["head"]


@pytest.mark.slow
def test_it_resolves_held_out_pronouns(model):
    layer, head = answering_head(model)
    data = _coref.examples(400, np.random.default_rng(12345), held_out=True)
    right = 0
    for example in data:
        trace = model.trace(example.text, layers=layer)
        row = trace[layer].weights[head][1 + max(example.text.rfind("他"), example.text.rfind("她"))]
        mass = [row[1 + start : 1 + start + len(name)].sum() for name, start in example.names]
        right += int(np.argmax(mass) == example.referent)
    accuracy = right / len(data)
    print(f"builtin:coref held-out accuracy: {accuracy:.3f} on {len(data)} sentences")
    assert accuracy >= 0.95


def test_he_attends_to_xiaoming_in_the_named_head(model):
    layer, head = answering_head(model)
    trace = model.trace(SENTENCE, layers=layer)
    assert trace.tokens[1:3] == ["小", "明"] and trace.tokens[10] == "他"
    weight = trace[layer].weights[head][10, 1:3].sum()  # from 他 to 小 and 明
    print(f"他 → 小明 in layer {layer}, head {head}: {weight:.3f}")
    assert weight >= 0.5


def test_transformers_reads_it_and_gives_the_same_attentions(model):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    directory = models._checkpoint.locate("builtin:coref")
    reference = transformers.AutoModel.from_pretrained(directory, attn_implementation="eager").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    ids = tokenizer(SENTENCE)["input_ids"]
    assert ids == model.tokenizer.encode(SENTENCE).tolist()
    with torch.no_grad():
        expected = reference(torch.tensor([ids]), output_attentions=True)
    ours = model.forward(np.array([ids]), output_attentions=True)
    for mine, theirs in zip(ours.attentions, expected.attentions, strict=True):
        np.testing.assert_allclose(mine, theirs.numpy(), atol=1e-5)
    np.testing.assert_allclose(ours.last_hidden_state, expected.last_hidden_state.numpy(), atol=1e-5)


def test_without_the_tokenizers_package_its_characters_tokenize_as_bert_does():
    pytest.importorskip("tokenizers")
    from tokenizers.implementations import BertWordPieceTokenizer

    from attnlab.models._tokenizer import Tokenizer, _character_vocabulary, _CharacterBackend

    directory = models._checkpoint.locate("builtin:coref")
    vocab = _character_vocabulary(directory / "vocab.txt")
    assert vocab is not None
    fallback = Tokenizer(_CharacterBackend(vocab, lowercase=True))
    bert = BertWordPieceTokenizer(str(directory / "vocab.txt"), lowercase=True)
    texts = [SENTENCE, "她平时很爱弹钢琴", "小红 是个 画家！", "abc 小明 x 他", "Ünï 你好 🙂", "", "，，他"]
    texts += ["小\u200b明", "他\x00她", "小明\ufffd他", "a\x1cb", "小明[MASK]他", "\t小\n明\r", "a\u3000b", "x\x85y"]
    for text in texts:
        assert fallback.encode(text).tolist() == bert.encode(text).ids, text
    assert "".join(fallback.readable(fallback.encode(SENTENCE))[1:-1]) == SENTENCE


def test_the_viewer_opens_it_offline(tmp_path):
    page = tmp_path / "coref.html"
    run = subprocess.run([sys.executable, "-m", "attnlab", "view", "--model", "builtin:coref", "--text", SENTENCE,
                          "-o", str(page)], capture_output=True, text=True, timeout=1800,
                         env={"HF_HUB_OFFLINE": "1", "PATH": ""})  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert page.stat().st_size > 0
    bad = subprocess.run([sys.executable, "-m", "attnlab", "trace", "--model", "builtin:nope", "--text", "a"],
                         capture_output=True, text=True, timeout=1800)  # fmt: skip
    assert bad.returncode == 2 and "expected one of builtin:coref, got 'builtin:nope'" in bad.stderr


@pytest.mark.slow
def test_training_is_deterministic_for_a_seed():
    first = _coref.train(4, seed=3, batch=8)[1]["losses"]
    assert first == _coref.train(4, seed=3, batch=8)[1]["losses"]
    assert first != _coref.train(4, seed=4, batch=8)[1]["losses"]


def test_the_experiments_are_listed_in_order():
    """(Their runs: test_experiments.py; coref's training, report and saved model: test_measure.py.)"""
    listed = subprocess.run([sys.executable, "-m", "attnlab", "experiment", "list"], capture_output=True, text=True,
                            timeout=1800)  # fmt: skip
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [
        "scaling",
        "normalization",
        "value",
        "rnn",
        "coref",
        "length",
    ]
