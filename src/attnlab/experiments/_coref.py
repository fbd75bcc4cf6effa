"""The article's example as a task: in "小明是个运动达人，他平时很爱打篮球", 他 refers to 小明.

Sentences follow the article's pattern: one to three people, each "NAME是个TRAIT", then
"他/她平时很爱HOBBY". The pronoun's gender and the hobby (each trait has its own) pick out
one person; the others are distractors of either gender. A small BERT-shaped encoder
(attnlab.nn) learns to resolve the pronoun *in one attention head*: the loss is
−log Σ_j P[pronoun, j] over the referent's characters j, in head ``HEAD`` of the last layer,
so that head's weights are the model's answer. Held-out sentences pair names and traits
that training never paired.

The model is saved as a Hugging Face BERT checkpoint (config.json, model.safetensors,
vocab.txt, tokenizer_config.json, and tokenizer.json when the tokenizers package is there) that ``attnlab.models`` and
``transformers`` both load; the one shipped with attnlab is ``builtin:coref``.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import nn
from .._validation import Array, fail
from ..models._checkpoint import write_safetensors

__all__ = ["HEAD", "TASK", "CorefModel", "Example", "examples", "train"]

PREFIXES = "小阿大老"
MALE_GIVEN = "明刚强军伟龙杰东涛峰彬磊斌浩宇鹏超勇辉亮"
FEMALE_GIVEN = "红丽芳玲燕梅娟霞雪婷慧莉萍琳静敏倩颖洁蓉"
MALE = [p + g for p in PREFIXES for g in MALE_GIVEN]  # 80 names; the given character tells the gender
FEMALE = [p + g for p in PREFIXES for g in FEMALE_GIVEN]
TRAITS = [  # (what a person is, what they love doing)
    ("运动达人", "打篮球"), ("音乐迷", "弹钢琴"), ("书虫", "看小说"), ("美食家", "做饭"), ("画家", "画画"),
    ("游泳健将", "游泳"), ("棋迷", "下象棋"), ("旅行家", "去旅行"), ("摄影师", "拍照片"), ("园艺师", "种花"),
]  # fmt: skip
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LAYERS, HEADS, HIDDEN, INTERMEDIATE, POSITIONS = 2, 4, 64, 128, 64
HEAD = (LAYERS - 1, 0)  # (layer, head) whose weights answer the question
TASK = "coref"


@dataclass(frozen=True)
class Example:
    """One sentence, the people in it (name, start character), and the referent's index."""

    text: str
    names: tuple[tuple[str, int], ...]
    referent: int


def _held_out(name: str, trait: int) -> bool:
    """A fixed fifth of the (name, trait) pairs, never seen in training."""
    return ((MALE + FEMALE).index(name) + 3 * trait) % 5 == 0


def examples(n: int, rng: np.random.Generator, *, held_out: bool) -> list[Example]:
    """``n`` sentences whose referent's (name, trait) pair is held out (or not)."""
    made: list[Example] = []
    while len(made) < n:
        count = int(rng.choice([1, 2, 3], p=[0.2, 0.3, 0.5]))  # mostly the hard cases: distractors
        male_first = bool(rng.integers(2))
        pool = MALE + FEMALE if rng.random() < 0.5 else (MALE if male_first else FEMALE)  # half: all one gender
        people = [str(p) for p in rng.choice(pool, size=count, replace=False)]
        traits = [int(t) for t in rng.choice(len(TRAITS), size=count, replace=False)]
        referent = int(rng.integers(count))
        male = people[referent] in MALE
        # the pronoun and hobby must pick out one person: no other of the same gender with the same trait
        same = [i for i, p in enumerate(people) if i != referent and (p in MALE) == male]
        if any(traits[i] == traits[referent] for i in same):
            continue
        if _held_out(people[referent], traits[referent]) != held_out:
            continue
        if not held_out and any(_held_out(p, t) for p, t in zip(people, traits, strict=True)):
            continue  # training never sees a held-out pair, even as a distractor
        clauses, names, position = [], [], 0
        for person, trait in zip(people, traits, strict=True):
            names.append((person, position))
            clause = f"{person}是个{TRAITS[trait][0]}，"
            clauses.append(clause)
            position += len(clause)
        text = "".join(clauses) + f"{'他' if male else '她'}平时很爱{TRAITS[traits[referent]][1]}"
        made.append(Example(text, tuple(names), referent))
    return made


def vocabulary() -> list[str]:
    """The special tokens, then every character the task uses, in a fixed order."""
    characters = {c for name in MALE + FEMALE for c in name}
    characters |= {c for pair in TRAITS for word in pair for c in word}
    characters |= set("是个，他她平时很爱")
    return SPECIAL + sorted(characters)


class CorefModel(nn.Module):
    """BERT's encoder: word, position and token-type embeddings, a LayerNorm, LAYERS blocks."""

    def __init__(self, vocab_size: int, rng: np.random.Generator) -> None:
        self.word = nn.Embedding(vocab_size, HIDDEN, rng=rng)
        self.position = nn.Embedding(POSITIONS, HIDDEN, rng=rng)
        self.position.weight.value[...] = _sinusoids(POSITIONS, HIDDEN)  # learned, from a start that knows offsets
        self.token_type = nn.Embedding(2, HIDDEN, rng=rng)
        self.embed_norm = nn.LayerNorm(HIDDEN)
        self.blocks = [nn.TransformerBlock(HIDDEN, HEADS, INTERMEDIATE, rng=rng) for _ in range(LAYERS)]

    def __call__(self, ids: Array, key_padding_mask: Array) -> tuple[Array, Callable[..., None]]:
        """ids (B, L), key_padding_mask (B, L) True for padding; the answering head's weights
        (B, L, L) and the backward that takes their gradient."""
        x, embed_back = self.embed(ids)
        backs = []
        weights = None
        for i, block in enumerate(self.blocks):
            x, back, all_weights = block(x, key_padding_mask=key_padding_mask, need_weights=i == HEAD[0])
            backs.append(back)
            if i == HEAD[0]:
                weights = all_weights
        assert weights is not None

        def backward(d_head: Array) -> None:
            d_weights = np.zeros_like(weights)
            d_weights[:, HEAD[1]] = d_head
            dx = np.zeros_like(x)
            for i in reversed(range(LAYERS)):
                dx = backs[i](dx, d_weights if i == HEAD[0] else None)
            embed_back(dx)

        return weights[:, HEAD[1]], backward

    def embed(self, ids: Array) -> tuple[Array, Callable[[Array], None]]:
        """LayerNorm(word + position + token type) (B, L, D), and its backward."""
        B, L = ids.shape
        w, w_back = self.word(ids)
        p, p_back = self.position(np.broadcast_to(np.arange(L), (B, L)))
        t, t_back = self.token_type(np.zeros_like(ids))
        x, norm_back = self.embed_norm(w + p + t)

        def backward(dx: Array) -> None:
            de = norm_back(dx)
            w_back(de), p_back(de), t_back(de)

        return x, backward


def _sinusoids(positions: int, dim: int) -> Array:
    """The Transformer's sinusoidal positions (Vaswani et al. 2017), a start from which
    attention can find "the characters just after me" at any absolute position."""
    angles = np.arange(positions)[:, None] / 10000 ** (np.arange(0, dim, 2) / dim)  # (positions, dim/2)
    table = np.zeros((positions, dim))
    table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles)
    return table


Encoded = tuple[Array, Array, Array, Array]  # ids, padding, pronoun, target


def encode(batch: list[Example], index: dict[str, int]) -> Encoded:
    """ids (B, L) with [CLS] … [SEP] and padding, the padding mask (B, L) (True: padding),
    the pronoun's position (B,), and (B, L) the referent's characters."""
    L = max(len(e.text) for e in batch) + 2
    ids = np.zeros((len(batch), L), dtype=np.int64)
    padding = np.ones((len(batch), L), dtype=bool)
    pronoun = np.zeros(len(batch), dtype=np.int64)
    target = np.zeros((len(batch), L), dtype=bool)
    for b, e in enumerate(batch):
        tokens = ["[CLS]", *e.text, "[SEP]"]
        ids[b, : len(tokens)] = [index.get(c, index["[UNK]"]) for c in tokens]
        padding[b, : len(tokens)] = False
        pronoun[b] = 1 + max(e.text.rfind("他"), e.text.rfind("她"))
        name, start = e.names[e.referent]
        target[b, 1 + start : 1 + start + len(name)] = True
    return ids, padding, pronoun, target


def answer(weights: Array, batch: list[Example], pronoun: Array) -> Array:
    """Which person each pronoun's weights (in the answering head) pick: the most weight on a name."""
    picked = []
    for b, e in enumerate(batch):
        row = weights[b, pronoun[b]]
        picked.append(int(np.argmax([row[1 + start : 1 + start + len(name)].sum() for name, start in e.names])))
    return np.array(picked)


def head_loss(model: CorefModel, batch: Encoded) -> tuple[float, Callable[[], None]]:
    """−log Σ_j P[pronoun, j] over the referent's characters j in the answering head, the
    mean over the batch, and its backward."""
    ids, padding, pronoun, target = batch
    weights, backward = model(ids, padding)
    rows = weights[np.arange(len(ids)), pronoun]  # (B, L): the pronoun's weights
    mass = (rows * target).sum(axis=-1)
    loss = float(-np.log(np.maximum(mass, 1e-30)).mean())
    d_rows = -target.astype(float) / np.maximum(mass, 1e-30)[:, None] / len(ids)
    d_head = np.zeros_like(weights)
    d_head[np.arange(len(ids)), pronoun] = d_rows
    return loss, lambda: backward(d_head)


def train(
    steps: int,
    *,
    seed: int = 0,
    batch: int = 64,
    lr: float = 3e-3,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[CorefModel, dict[str, Any]]:
    """Train from ``seed`` with nn.train (AdamW, clipping to 1, 100 steps of warm-up then a
    cosine decay); the model and its metrics (held-out accuracy, loss curve)."""
    rng = np.random.default_rng(seed)
    vocab = vocabulary()
    index = {c: i for i, c in enumerate(vocab)}
    model = CorefModel(len(vocab), rng)
    optimizer = nn.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    start = time.perf_counter()
    batches = (encode(examples(batch, rng, held_out=False), index) for _ in itertools.count())

    def learning_rate(step: int) -> float:  # warm-up, then a cosine decay
        return lr * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * step / steps))

    losses = nn.train(model, batches, optimizer, steps, head_loss, learning_rate=learning_rate, progress=progress)
    held = examples(2000, np.random.default_rng(seed + 1), held_out=True)
    accuracy = evaluate(model, held, index)
    return model, {"steps": steps, "seed": seed, "held_out_accuracy": accuracy, "losses": losses,
                   "seconds": time.perf_counter() - start}  # fmt: skip


def evaluate(model: CorefModel, data: list[Example], index: dict[str, int]) -> float:
    """The fraction of sentences whose pronoun the answering head resolves right."""
    right = 0
    for first in range(0, len(data), 256):
        chunk = data[first : first + 256]
        ids, padding, pronoun, _ = encode(chunk, index)
        weights, _ = model(ids, padding)
        right += int((answer(weights, chunk, pronoun) == np.array([e.referent for e in chunk])).sum())
    return right / len(data)


def save(model: CorefModel, directory: Path) -> None:
    """A Hugging Face BERT checkpoint of the model, float32, with its character vocabulary."""
    directory.mkdir(parents=True, exist_ok=True)
    vocab = vocabulary()
    tensors: dict[str, Array] = {
        "embeddings.word_embeddings.weight": model.word.weight.value,
        "embeddings.position_embeddings.weight": model.position.weight.value,
        "embeddings.token_type_embeddings.weight": model.token_type.weight.value,
        "embeddings.LayerNorm.weight": model.embed_norm.weight.value,
        "embeddings.LayerNorm.bias": model.embed_norm.bias.value,
    }
    for i, block in enumerate(model.blocks):
        p = f"encoder.layer.{i}."
        linears = {
            "attention.self.query": block.attention.query, "attention.self.key": block.attention.key,
            "attention.self.value": block.attention.value, "attention.output.dense": block.attention.out,
            "intermediate.dense": block.up, "output.dense": block.down,
        }  # fmt: skip
        for name, layer in linears.items():
            tensors[p + name + ".weight"] = layer.weight.value  # (out, in), as Hugging Face stores it
            assert layer.bias is not None
            tensors[p + name + ".bias"] = layer.bias.value
        for name, norm in (
            ("attention.output.LayerNorm", block.attention_norm),
            ("output.LayerNorm", block.output_norm),
        ):
            tensors[p + name + ".weight"], tensors[p + name + ".bias"] = norm.weight.value, norm.bias.value
    write_safetensors(directory / "model.safetensors", {k: v.astype(np.float32) for k, v in tensors.items()})
    config = {
        "architectures": ["BertModel"], "model_type": "bert", "vocab_size": len(vocab), "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "intermediate_size": INTERMEDIATE,
        "hidden_act": "gelu_new", "max_position_embeddings": POSITIONS, "type_vocab_size": 2,
        "layer_norm_eps": 1e-12, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
        "pad_token_id": 0, "position_embedding_type": "absolute", "initializer_range": 0.02,
        "attnlab": {"task": TASK, "answer_head": {"layer": HEAD[0], "head": HEAD[1]}},
    }  # fmt: skip
    (directory / "config.json").write_text(json.dumps(config, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer_config = {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "tokenize_chinese_chars": True,
                        "model_max_length": POSITIONS}  # fmt: skip
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1) + "\n", encoding="utf-8")
    try:  # tokenizer.json too, for the fast tokenizers; vocab.txt alone serves attnlab without them
        from tokenizers.implementations import BertWordPieceTokenizer
    except ImportError:
        return
    BertWordPieceTokenizer(str(directory / "vocab.txt"), lowercase=True).save(str(directory / "tokenizer.json"))


def antecedent_weights(model: CorefModel, data: list[Example], index: dict[str, int]) -> Array:
    """The mean weight from the pronoun to its referent's characters, per layer and head
    (layers, heads), over ``data``: which heads point at the antecedent."""
    totals = np.zeros((LAYERS, HEADS))
    for first in range(0, len(data), 256):
        chunk = data[first : first + 256]
        ids, padding, pronoun, target = encode(chunk, index)
        weights = _all_weights(model, ids, padding).transpose(
            1, 3, 0, 2, 4
        )  # (layers, B, H, L, L) -> (B, L, layers, H, L)
        rows = weights[np.arange(len(chunk)), pronoun]  # (B, layers, H, L): the pronoun's rows
        totals += (rows * target[:, None, None, :]).sum(axis=-1).sum(axis=0)
    return totals / len(data)


def sentence_weight(model: CorefModel, text: str, name: str, index: dict[str, int]) -> float:
    """In the answering head, the weight from the pronoun of ``text`` to ``name``'s characters."""
    if name not in text or not ("他" in text or "她" in text):
        raise fail("text", f"a sentence with {name!r} and a pronoun 他 or 她", repr(text))
    start = text.index(name)
    example = Example(text, ((name, start),), 0)
    ids, padding, pronoun, target = encode([example], index)
    weights, _ = model(ids, padding)
    return float((weights[0, pronoun[0]] * target[0]).sum())


def _all_weights(model: CorefModel, ids: Array, padding: Array) -> Array:
    """Every layer's attention weights (layers, B, H, L, L); padding (B, L) True for padding."""
    x, _ = model.embed(ids)
    weights: list[Array] = []
    for block in model.blocks:
        x, _, w = block(x, key_padding_mask=padding, need_weights=True)
        assert w is not None  # asked for
        weights.append(w)
    return np.stack(weights)
