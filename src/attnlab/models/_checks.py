"""The checks of a model's arguments: token ids, padding, token types, layers, lengths.

Each raises through :func:`attnlab._validation.fail` (``<argument>: expected <what>, got
<what came>``); the generic pieces (an integer, ids below a count) are there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._validation import ArgumentError, Array, array_of, fail, flag, ids_below, is_integer, real_number
from ._chat import chat_prompt
from ._network import ModelConfig, Network
from ._tokenizer import Tokenizer

__all__ = ["Prompt", "check_length", "generation_inputs", "layer_indices", "model_inputs", "sequence_ids", "token_ids"]


def model_inputs(
    network: Network, input_ids: Any, attention_mask: Any, token_type_ids: Any
) -> tuple[Array, Array | None, Array | None]:
    """A forward's arguments checked: the ids (L,) or (B, L) as int64, the padding
    (True for a token) and the token types, both (B, L) or None.

    Raises:
        ArgumentError, ArgumentTypeError: ids that are not integers in 0..vocab − 1, ragged
            or longer than the model's positions, a mask of other values than 0 and 1 or
            another shape, token types for a model without them or out of their range.
    """
    ids = token_ids(network.config, input_ids)
    shape = ids.shape if ids.ndim == 2 else (1, *ids.shape)  # (L,) -> (1, L)
    return ids, _padding(attention_mask, shape), _token_types(network, token_type_ids, shape)


def token_ids(config: ModelConfig, input_ids: Any, name: str = "input_ids") -> Array:
    """``input_ids`` (L,) or (B, L) as int64 token ids, once they are ids of the model's
    vocabulary and within its positions; ``name``: the argument they came as, which the
    errors name (a trace's ``text_or_ids`` takes a text too, and says so)."""
    if name == "input_ids":
        kind, shape = "integer token ids, (L,) or (B, L)", "at least one token id, (L,) or (B, L)"
    else:
        kind, shape = "a text (str) or integer token ids (L,)", "a text or at least one token id (L,)"
    if input_ids is None or isinstance(input_ids, (bytes, bytearray, memoryview, str)):
        raise fail(name, kind, _what_came(input_ids, None), TypeError)
    ids = array_of(name, input_ids)
    if ids.size == 0:
        empty = isinstance(input_ids, (list, tuple)) and not input_ids
        raise fail(name, shape, f"an empty {type(input_ids).__name__}" if empty else f"shape {ids.shape}")
    if ids.dtype.kind not in "iu":
        raise fail(name, kind, _what_came(input_ids, ids), TypeError)
    if ids.ndim not in (1, 2):
        raise fail(name, shape, f"shape {ids.shape}")
    ids_below(name, ids, config.vocab_size)
    check_length(config, ids.shape[-1], "input_ids", name)
    return ids.astype(np.int64, copy=False)


def _what_came(x: Any, ids: Array | None) -> str:
    """What came where ids were expected (``ids``: it as an array, when it is one), said
    briefly: None, bytes and their start, a text, a number, the dtype of numbers, or the
    type of what the objects are in."""
    if x is None:
        return "None"
    if isinstance(x, (bytes, bytearray, memoryview)):
        raw = bytes(x)
        return f"{type(x).__name__} {raw[:20]!r}{'…' if len(raw) > 20 else ''} (a text is a str: decode the bytes)"
    if isinstance(x, str):
        return f"a text {x[:20]!r}{'…' if len(x) > 20 else ''} (tokenize it first: model.tokenizer.encode)"
    if ids is not None and ids.dtype.kind in "fcb":
        return f"{type(x).__name__} {x!r}" if ids.ndim == 0 else f"{ids.dtype} values"
    return f"a {type(x).__name__} of objects" if isinstance(x, (list, tuple, np.ndarray)) else f"a {type(x).__name__}"


@dataclass
class Prompt:
    """One sequence as a model reads it: its ids (L,), per token whether a chat template
    put it there, and what was done to the text (a cut, the template), for the trace to say."""

    ids: Array
    template: list[bool] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def sequence_ids(
    config: ModelConfig, tokenizer: Tokenizer | None, text_or_ids: Any, *, truncation: bool = False,
    chat: bool = False,
) -> Prompt:  # fmt: skip
    """One sequence's ids (L,): a text tokenized with the model's tokenizer (and its
    special tokens; with ``chat``, as the user's message in its chat template), or ids
    checked as :func:`token_ids` checks them.

    A text longer than the limit, the model's positions or the tokenizer's
    ``model_max_length`` (the smaller), is refused, or with ``truncation`` cut to it.

    Raises:
        ArgumentError: a text and no tokenizer, a text of no token, a text over the limit
            without ``truncation``, ``chat`` for a model without a chat template or with
            ids, ids that are not one sequence of the vocabulary's ids.
    """
    flag("truncation", truncation)
    flag("chat", chat)
    if not isinstance(text_or_ids, str):
        if chat:
            raise fail("chat", "a text to put in the chat template", "token ids")
        ids = token_ids(config, text_or_ids, "text_or_ids")
        if ids.ndim != 1:
            raise fail("text_or_ids", "one sequence: a text or ids of shape (L,)", f"ids of shape {ids.shape}")
        return Prompt(ids)
    if tokenizer is None:
        raise fail("text_or_ids", "token ids: this checkpoint has no tokenizer", "a text")
    text, template, notes = text_or_ids, list[bool](), list[str]()
    if chat:
        text, marks = chat_prompt(tokenizer, text_or_ids)
        template = marks or []
        words = "" if marks is not None else "; the template changes the text, so its own tokens are not marked"
        notes.append(f"the text as a user's message in the model's chat template{words}")
    limits = [(config.max_position_embeddings, "the model's positions")]
    if tokenizer.model_max_length is not None:
        limits.append((tokenizer.model_max_length, "the tokenizer's model_max_length"))
    limit, why = min(limits)
    ids = tokenizer.encode(text, add_special_tokens=not chat)
    if len(ids) > limit:
        if not truncation:
            expected = f"at most {limit} tokens, {why} (truncation=True cuts a text to them)"
            raise fail("text_or_ids", expected, f"{len(ids)}", mentions=("truncation=True",))
        notes.append(f"cut to its first {limit} of {len(ids)} tokens ({why})")
        ids = tokenizer.encode(text, add_special_tokens=not chat, max_length=limit)
        template = template[: len(ids)]
    if len(ids) == 0:
        raise fail("text_or_ids", "a text of at least one token", repr(text_or_ids))
    return Prompt(token_ids(config, ids, "text_or_ids"), template, notes)


def generation_inputs(config: ModelConfig, ids: Any, steps: Any, temperature: Any) -> tuple[Array, int, float]:
    """:meth:`Model.generate`'s prompt (L,), its number of new tokens and its temperature,
    checked.

    Raises:
        ArgumentError, ArgumentTypeError: a model that is not causal, ids that are not one
            sequence of the vocabulary's ids, a negative ``max_new_tokens`` or
            ``temperature``, more tokens than the model's positions.
    """
    if not config.causal:
        raise ArgumentError(f"generate: {config.model_type} is not a causal model; GPT-2, Llama, Qwen2 and Mistral are")
    prompt = token_ids(config, ids)
    if prompt.ndim != 1:
        raise fail("input_ids", "one sequence of ids (L,)", f"shape {prompt.shape}")
    if not is_integer(steps) or steps < 0:
        raise fail("max_new_tokens", "an integer >= 0", repr(steps))
    temperature = real_number("temperature", temperature, minimum=0.0)
    check_length(config, len(prompt) + int(steps), "input_ids with max_new_tokens")
    return prompt, int(steps), temperature


def check_length(config: ModelConfig, length: int, what: str, name: str = "input_ids") -> None:
    """Refuse ``length`` tokens (of ``what``, the argument ``name``) beyond the model's positions."""
    if length > config.max_position_embeddings:
        got = f"{length}" if what == "input_ids" else f"{length} ({what})"
        raise fail(name, f"at most {config.max_position_embeddings} tokens, the model's positions", got)


def layer_indices(config: ModelConfig, layers: Any) -> list[int]:
    """``layers`` (an index, a list of them, or None for all; negative ones count from
    the end) as sorted distinct indices in 0..num_hidden_layers − 1."""
    n = config.num_hidden_layers
    chosen = list(range(n)) if layers is None else [layers] if not isinstance(layers, (list, tuple)) else layers
    if not chosen:  # an empty trace has nothing to view
        raise fail("layers", f"at least one layer index in {-n}..{n - 1}, or None for all", repr(layers))
    for layer in chosen:
        if not is_integer(layer) or not -n <= layer < n:
            raise fail("layers", f"layer indices in {-n}..{n - 1}", repr(layer))
    return sorted({int(layer) % n for layer in chosen})


def _padding(attention_mask: Any, shape: tuple[int, ...]) -> Array | None:
    if attention_mask is None:
        return None
    given = array_of("attention_mask", attention_mask)
    mask = given if given.ndim == 2 else given[None]  # (L,) -> (1, L)
    if mask.shape != shape:
        raise fail("attention_mask", f"the ids' shape {shape}", f"shape {given.shape}")
    if not np.isin(mask, (0, 1)).all():
        raise fail("attention_mask", "1 (a token) and 0 (padding)", f"values {np.unique(mask)[:5].tolist()}")
    return mask.astype(bool)


def _token_types(network: Network, token_type_ids: Any, shape: tuple[int, ...]) -> Array | None:
    if token_type_ids is None:
        return None
    if network.token_types is None:
        raise fail("token_type_ids", "None: only BERT has token types", "ids")
    types = array_of("token_type_ids", token_type_ids)
    types = types if types.ndim == 2 else types[None]  # (L,) -> (1, L)
    if types.shape != shape or types.dtype.kind not in "iu":
        raise fail("token_type_ids", f"integers of the ids' shape {shape}", f"{types.dtype} of shape {types.shape}")
    return ids_below("token_type_ids", types, len(network.token_types))
