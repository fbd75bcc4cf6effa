"""What kind of head each attention head is: previous-token, induction, first-token sink,
self, and in an encoder [CLS], [SEP] and punctuation heads, each scored as the share of
attention a head puts on the keys of that kind (Olsson et al. 2022 for induction heads,
Xiao et al. 2024 for attention sinks, Clark et al. 2019 for BERT's [CLS], [SEP] and
punctuation heads).

The scores are read off the weights A (layers, H, L, L) of one sequence; every one is a
mean over queries of weights in [0, 1], so every score is in [0, 1] and they compare
across kinds. The queries scored, i = q0..L − 1, are those that choose: q0 = 1 where the
attention is causal (every weight above the diagonal 0: the first query sees only itself),
else 0.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import Array, fail, int_seed, is_integer
from ..runner import Runner
from ..runner._open import as_runner
from ..runner._runner import layer_weights
from ..trace import ModelTrace
from ..trace._opening import is_causal, previous_token_scores
from ._head_table import KINDS, HeadTypes

__all__ = [
    "DEFAULT_TEXT",
    "REPEAT",
    "head_types",
    "induction_scores",
    "key_scores",
    "previous_token_scores",
    "self_scores",
    "sink_scores",
]

REPEAT = 50  # n: the random tokens a model's induction sequence repeats
DEFAULT_TEXT = (
    "The cat sat on the mat, and the dog sat on the log. When Mary and John went to the store, "
    "John gave a drink to Mary. Attention (as in transformers) mixes the tokens: each query "
    "weighs every key it sees!"
)
CLS_NAMES = frozenset({"[CLS]", "<s>", "<cls>"})  # an encoder's first special token, by its name
SEP_NAMES = frozenset({"[SEP]", "</s>", "<sep>"})  # its separator


@dataclass(frozen=True)
class _Sequence:
    """One forward's attention: the ids (L,), their tokens and special flags, the weights
    (layers, H, L, L) in float64, every one a finite number: a NaN would make its head's
    scores NaN and the head of no kind, without a word. (A model's weights are checked at
    load, a trace's when it is made; a forward can still overflow.)

    Raises:
        ArgumentError: a weight that is not finite, named by layer, head, query and key.
    """

    ids: list[int]
    tokens: list[str]
    special: list[bool]
    weights: Array

    def __post_init__(self) -> None:
        if not np.isfinite(self.weights).all():
            layer, head, query, key = (int(i) for i in np.argwhere(~np.isfinite(self.weights))[0])
            got = f"{self.weights[layer, head, query, key]} at layer {layer}, head {head}, query {query}, key {key}"
            raise fail("model_or_trace", "attention weights that are finite numbers", got)


def _first_query(weights: Array) -> int:
    """q0: 1 where every weight above the diagonal is 0 (causal: the first query sees only
    itself and has no choice), else 0."""
    return 1 if is_causal(weights) else 0


def self_scores(weights: Array) -> Array:
    """self[l, h] = mean over i = q0..L − 1 of A[l, h, i, i] (q0: see the module).

    Args:
        weights: A, (layers, H, L, L) (L ≥ 2).

    Returns:
        (layers, H) float64.
    """
    q0 = _first_query(weights)
    return np.diagonal(weights, axis1=-2, axis2=-1)[..., q0:].mean(axis=-1)  # (layers, H, L) -> (layers, H)


def sink_scores(weights: Array) -> Array:
    """sink[l, h] = mean over i = q0..L − 1 of A[l, h, i, 0]: the weight on the first token.

    Args:
        weights: A, (layers, H, L, L) (L ≥ 2).

    Returns:
        (layers, H) float64.
    """
    return weights[..., _first_query(weights) :, 0].mean(axis=-1)  # (layers, H, L − q0) -> (layers, H)


def key_scores(weights: Array, keys: Sequence[int]) -> Array:
    """score[l, h] = mean over i = q0..L − 1 of Σ_{j ∈ keys} A[l, h, i, j]: the total
    weight on a set of keys ([CLS], [SEP], punctuation).

    Args:
        weights: A, (layers, H, L, L) (L ≥ 2).
        keys: the key positions, each in 0..L − 1.

    Returns:
        (layers, H) float64.
    """
    on_keys = weights[..., _first_query(weights) :, :][..., list(keys)].sum(axis=-1)  # (layers, H, L − q0)
    return on_keys.mean(axis=-1)


def induction_scores(weights: Array, repeat: int) -> Array:
    """ind[l, h] = mean over i = L − n..L − 1 of A[l, h, i, i − n + 1], n = ``repeat``: on
    a sequence whose last 2n tokens are n tokens twice, the second copy's weight on the
    token after the current token's previous occurrence (at i − n).

    Args:
        weights: A, (layers, H, L, L), L ≥ 2n.
        repeat: n ≥ 2 (at n = 1 the target i − n + 1 is i itself).

    Returns:
        (layers, H) float64.

    Raises:
        ArgumentError: n below 2, or 2n above L.
    """
    L = weights.shape[-1]
    if not is_integer(repeat) or not 2 <= repeat <= L // 2:
        raise fail("repeat", f"an integer in 2..{L // 2} (the last 2n of the {L} tokens repeat n)", repr(repeat))
    rows = np.arange(L - repeat, L)
    return weights[..., rows, rows - repeat + 1].mean(axis=-1)  # (layers, H, n) -> (layers, H)


def _is_punctuation(token: str) -> bool:
    """A token whose text, spaces stripped, is one or more Unicode punctuation characters."""
    text = token.strip()
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def _text_scores(sequence: _Sequence, notes: list[str]) -> dict[str, Array]:
    """The scores read off the text: previous, sink, self, and an encoder's cls, sep and
    punctuation where the text has such keys (else left out, said in ``notes``)."""
    A = sequence.weights
    if A.shape[-1] < 2:
        raise fail("text", "at least 2 tokens (the previous-token score reads A[i, i − 1])", "1 token")
    scores = {"previous": previous_token_scores(A), "sink": sink_scores(A), "self": self_scores(A)}
    if _first_query(A) == 1:
        notes.append("cls, sep, punctuation: scored in encoders only (this attention is causal)")
        return scores
    special = sequence.special or [True] * len(sequence.tokens)
    named = list(zip(sequence.tokens, special, strict=True))
    keys = {
        "cls": [j for j, (t, s) in enumerate(named) if s and t in CLS_NAMES],
        "sep": [j for j, (t, s) in enumerate(named) if s and t in SEP_NAMES],
        "punctuation": [j for j, (t, s) in enumerate(named) if not s and _is_punctuation(t)],
    }
    for kind, positions in keys.items():
        if positions:
            scores[kind] = key_scores(A, positions)
        else:
            notes.append(f"{kind}: left out, the text has no such token")
    return scores


def head_types(
    model_or_trace: Any, text: Any = None, *, repeat: int | None = None, seed: int | np.random.Generator = 0,
    tokenizer: Any = None,
) -> HeadTypes:  # fmt: skip
    """Score every (layer, head) as each kind of head; the scores are shares of attention
    A (layers, H, L, L), each in [0, 1] (q0 = 1 where the attention is causal, else 0):

    - previous: mean over i = 1..L − 1 of A[i, i − 1];
    - induction: on [BOS] + r + r, r = n distinct random ordinary token ids (no special
      token, no reserved entry such as [unused0] or <0x0A>), mean over the second copy's
      positions i of A[i, i − n + 1], the token after the previous occurrence of token i;
    - sink: mean over i = q0..L − 1 of A[i, 0];
    - self: mean over i = q0..L − 1 of A[i, i];
    - cls, sep, punctuation (encoders only, where the text has such tokens): mean over
      i = 0..L − 1 of Σ_{j ∈ K} A[i, j], K the positions of [CLS] (or <s>), of [SEP] (or
      </s>), of the tokens that are punctuation only.

    A model (attnlab's, or a transformers model on attnlab's backend) runs twice: on
    ``text`` for every score but induction, and on the repeated random sequence for
    induction. A trace is scored as it is: induction only when ``repeat`` says its last 2n
    tokens are n tokens twice, else left out (said in the result's ``notes``).

    Args:
        model_or_trace: an :class:`attnlab.models.Model`, :func:`attnlab.load_model`'s, a
            transformers model whose attention goes through transformers' attention
            interface (decoder-only or encoder-only), or a
            :class:`attnlab.models.ModelTrace` of every layer.
        text: a model's text (tokenized with its tokenizer, special tokens added) or ids
            (L,), at least 2 tokens; None: :data:`DEFAULT_TEXT`. None for a trace.
        repeat: n. For a model: None is :data:`REPEAT` (50), or the most its positions and
            ordinary tokens take where fewer; 0 leaves induction out; else
            2 ≤ n, with 1 + 2n positions and n ordinary tokens in the vocabulary. For a
            trace: None or 0 leaves induction out; n: its last 2n tokens repeat n.
        seed: the draw of r: an int seed in [0, 2**63) or a numpy Generator (never the global state).
        tokenizer: a transformers model's tokenizer (to read a text and tell special
            tokens); attnlab's models have their own.

    Returns:
        :class:`HeadTypes`: ``scores[kind]`` (layers, H); ``strongest``, ``dominant``,
        ``to_dict``, ``render``.

    Raises:
        ArgumentError: a text of fewer than 2 tokens or too long, a repeat out of range
            (too long for the positions or the vocabulary; a trace whose last 2n ids do
            not repeat), a seed outside [0, 2**63), a trace with a layer missing or with
            cross-attention, a text for a trace, a model's attention weights that are not
            finite numbers (named by layer, head, query and key: its forward overflowed).
        ArgumentTypeError: a model of none of these kinds, a bad seed or repeat.
        UnsupportedModelError: a transformers model attnlab's backend cannot run, or an
            encoder-decoder model.
    """
    if repeat is not None and not is_integer(repeat):
        raise fail("repeat", "None, 0 or an integer n ≥ 2", repr(repeat), TypeError)
    if repeat is not None and repeat < 0:
        raise fail("repeat", "None, 0 or an integer n ≥ 2", repr(repeat))
    if not (is_integer(seed) or isinstance(seed, np.random.Generator)):
        raise fail("seed", "an int seed or a numpy.random.Generator", type(seed).__name__, TypeError)
    if is_integer(seed):
        int_seed("seed", seed)
    if isinstance(model_or_trace, ModelTrace):
        return _of_trace(model_or_trace, text, repeat, tokenizer)
    expected = "an attnlab.models.Model, a transformers model or a ModelTrace"
    runner = as_runner(model_or_trace, tokenizer, "model_or_trace", expected)
    runner.check_one_stack()
    notes: list[str] = []
    ids = [int(i) for i in runner.ids(DEFAULT_TEXT if text is None else text, cut=text is None)]
    if text is None and runner.positions is not None and len(ids) == runner.positions:
        notes.append(f"the default text, cut to the model's {runner.positions} positions")
    if len(ids) < 2:  # checked before any forward, as repeat is
        raise fail("text", "at least 2 tokens (the previous-token score reads A[i, i − 1])", "1 token")
    n = runner.most_repeat(REPEAT) if repeat is None else int(repeat)
    repeat_ids = None if n == 0 else runner.repeated(n, np.random.default_rng(seed))
    sequence = _run(runner, ids)
    scores = _text_scores(sequence, notes)
    if repeat_ids is None:
        why = "repeat=0" if repeat == 0 else "the model's positions or vocabulary take no 2 tokens twice"
        notes.append(f"induction: left out ({why})")
    else:
        scores["induction"] = induction_scores(_run(runner, repeat_ids).weights, n)
    return _result(scores, runner.name, sequence, n or None, repeat_ids, notes)


def _of_trace(trace: ModelTrace, text: Any, repeat: int | None, tokenizer: Any) -> HeadTypes:
    """head_types of a trace: the scores of its one sequence."""
    if text is not None or tokenizer is not None:
        got = "a text" if text is not None else "a tokenizer"
        raise fail("text" if text is not None else "tokenizer", "None for a trace (it is scored as it is)", got)
    weights = layer_weights(trace)  # (layers, H, L, L) float64, every layer's self-attention
    sequence = _Sequence(list(trace.ids), list(trace.tokens), list(trace.special), weights)
    notes: list[str] = []
    scores = _text_scores(sequence, notes)
    if not repeat:
        notes.append("induction: left out; a trace whose last 2n tokens are n tokens twice is scored with repeat=n")
        return _result(scores, trace.model, sequence, None, None, notes)
    ids = sequence.ids
    if ids and ids[-repeat:] != ids[-2 * repeat : -repeat]:
        raise fail("repeat", f"n such that the trace's last 2n ids repeat n ids; its last {2 * repeat} do not", repeat)
    scores["induction"] = induction_scores(weights, repeat)
    return _result(scores, trace.model, sequence, int(repeat), None, notes)


def _result(
    scores: dict[str, Array], model: str, text: _Sequence, repeat: int | None, repeat_ids: list[int] | None,
    notes: list[str],
) -> HeadTypes:  # fmt: skip
    ordered = {kind: scores[kind] for kind in KINDS if kind in scores}
    return HeadTypes(ordered, model, text.tokens, repeat, repeat_ids, notes, text.ids or None)


def _run(runner: Runner, ids: list[int]) -> _Sequence:
    """One forward's attention, as a checked :class:`_Sequence`."""
    tokens, special, weights = runner.attention(ids)
    return _Sequence(ids, tokens, special, weights)
