"""A pretrained model run in NumPy, its attention on attnlab's engine: what
:func:`attnlab.models.load` gives. The network and its forward are in :mod:`._network`,
generation in :mod:`._generate`, the argument checks in :mod:`._checks`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, overload

import numpy as np
from numpy.typing import ArrayLike

from .._progress import progress_bar
from .._validation import Array, check_finite, fail, flag, is_integer, optional_callable
from ..trace import GenerationTrace, ModelTrace
from ..trace._generation import stack_rows
from ._checks import Prompt, layer_indices, model_inputs, sequence_ids
from ._generate import generate
from ._network import ModelConfig, Network, Recorder
from ._tokenizer import Tokenizer

__all__ = ["Model", "ModelOutput", "answer_view", "token_marks"]

ASKED_ABOUT: dict[str, tuple[str, ...]] = {
    "coref": ("他", "她")
}  # a task's tokens that ask its question: coref's pronouns


def answer_view(raw: dict[str, Any], tokens: list[str]) -> dict[str, int] | None:
    """The view a trace's page opens on when the model's config (``raw``, config.json)
    names its answering head under "attnlab": {"answer_head": {"layer", "head"}}: that
    head, on the last token its task asks about (coref: the pronoun 他 or 她), else on
    query 0; None when the config names no head."""
    block = raw.get("attnlab")
    head = block.get("answer_head") if isinstance(block, dict) else None
    if not isinstance(head, dict) or not all(type(head.get(k)) is int for k in ("layer", "head")):
        return None
    asked = ASKED_ABOUT.get(str(block.get("task")), ()) if isinstance(block, dict) else ()
    query = max((i for i, t in enumerate(tokens) if t in asked), default=0)
    return {"layer": head["layer"], "head": head["head"], "query": query}


def _trace_generation_method(
    self: Model, text_or_ids: ArrayLike | str, max_new_tokens: int, *, layers: Any = None, truncation: bool = False,
    chat: bool = False, progress: bool = False, check: Callable[[], object] | None = None,
) -> GenerationTrace:  # fmt: skip
    """The attention of the tokens a greedy generation adds, recorded from its own
    decode steps with the KV cache: for each new token, the weights of the step that
    chose it (one query, the token before it, over every position before the new
    token), per head of the chosen layers (see :class:`GenerationTrace`).

    Args:
        text_or_ids: the prompt, a text (tokenized with the model's tokenizer and its
            special tokens) or ids (L,).
        max_new_tokens: the most tokens to add (at least 1; fewer after an end token).
        layers: an index, a list of them, or None for all; negative from the end.
        truncation: cut a text longer than the model takes (see :meth:`trace`).
        chat: the text as a user's message in the model's chat template (see :meth:`trace`).
        progress: show a progress bar on stderr, tokens generated of ``max_new_tokens``.
        check: None, or a function called before each new token's forward; what it raises
            ends the generation (``attnlab serve``'s, to stop a request its page left).

    Raises:
        ArgumentError, ArgumentTypeError: what :meth:`generate` and :meth:`trace`
            refuse, ``max_new_tokens`` below 1, a ``progress`` that is not a bool, a
            ``check`` that is not callable.
        Exception: whatever ``check`` raises.
    """
    progress = flag("progress", progress)
    return _trace_generation(self, text_or_ids, max_new_tokens, layers, truncation, chat, progress, check)


@dataclass(frozen=True)
class ModelOutput:
    """A forward's results, as ``transformers`` names them: ``logits`` (B, L, vocab) when
    the model has a head, ``last_hidden_state`` (B, L, D) (after the final norm),
    ``hidden_states`` (the embeddings and each layer's output, num_hidden_layers + 1 of
    them) and ``attentions`` (each layer's weights (B, H, L, S)) when asked for."""

    last_hidden_state: Array
    logits: Array | None = None
    hidden_states: tuple[Array, ...] | None = None
    attentions: tuple[Array, ...] | None = None


class Model:
    """A checkpoint loaded by :func:`attnlab.models.load`.

    ``model(input_ids, ...)``, as ``model.forward``, gives a :class:`ModelOutput`: the
    logits (B, L, vocab) (None for a BERT without its masked-LM head), the last hidden
    state and, when asked for, every hidden state and attention matrix; ``trace`` every
    step of attention; ``generate`` continues a causal model's text with a KV cache.

    Args:
        network: the checkpoint's weights read into one :class:`Network` (as :func:`load` builds it).
        tokenizer: its tokenizer, or None (ids only).
        name: the checkpoint's name, as a trace and a page show it.
        weights_note: what the weights were read from, when not plain floats: a GGUF
            file's "Q4_1, dequantized to float32"; None for a safetensors checkpoint.
    """

    backend = "numpy"  # what it runs on, as a runner names it: a page draws a model that names one

    def __init__(
        self, network: Network, tokenizer: Tokenizer | None, name: str, *, weights_note: str | None = None
    ) -> None:
        self.network = network
        self.tokenizer = tokenizer
        self.name = name
        self.weights_note = weights_note

    @property
    def config(self) -> ModelConfig:
        return self.network.config

    @property
    def dtype(self) -> np.dtype:
        return self.network.embed.weight.value.dtype

    def __repr__(self) -> str:
        c = self.config
        H, Hk = c.num_attention_heads, c.num_key_value_heads
        return (
            f"Model({self.name!r}, {c.model_type}, layers={c.num_hidden_layers}, heads={H}"
            + (f", kv_heads={Hk}" if Hk != H else "")
            + f", hidden={c.hidden_size}, dtype={self.dtype}"
            + (f", weights={self.weights_note!r}" if self.weights_note else "")
            + ")"
        )

    def forward(
        self, input_ids: ArrayLike, attention_mask: ArrayLike | None = None, token_type_ids: ArrayLike | None = None,
        *, output_hidden_states: bool = False, output_attentions: bool = False,
    ) -> ModelOutput:  # fmt: skip
        """Run the model on ``input_ids`` (B, L) or (L,) (the outputs then have no batch
        axis). ``attention_mask`` (same shape, 1 for a token and 0 for padding) hides the
        padding's keys; a padding query that would see no key sees itself, so no row is
        empty (but in a sliding layer, one whose window holds only padding sees nothing:
        its weights and output are 0), and its outputs mean nothing, as in ``transformers``. ``token_type_ids``:
        BERT's segments (default 0). Calling the model is calling ``forward``.

        Args:
            input_ids: (B, L) or (L,) token ids.
            attention_mask: None, or of input_ids' shape: 1 for a token, 0 for padding.
            token_type_ids: None, or of input_ids' shape: BERT's segments.
            output_hidden_states: also return every layer's hidden state (B, L, D).
            output_attentions: also return every layer's weights (B, H, L, L).

        Raises:
            ArgumentError, ArgumentTypeError: see :func:`._checks.model_inputs`; flags
                that are not bools; a forward whose numbers overflow (a NaN or an
                infinity in it, named by its first layer and step, or in the logits).
        """
        return _forward(self, input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions)

    __call__ = forward

    def trace(
        self, text_or_ids: ArrayLike | str, layers: Any = None, *, truncation: bool = False, chat: bool = False,
        check: Callable[[], object] | None = None,
    ) -> ModelTrace:  # fmt: skip
        """Every step of attention for one sequence in the chosen layers.

        Args:
            text_or_ids: a text (tokenized with the model's tokenizer and its special
                tokens, as ``transformers``' ``tokenizer(text)``) or ids (L,).
            layers: an index, a list of them, or None for all; negative indices count
                from the end.
            truncation: a text longer than the model takes (its positions, or its
                tokenizer's ``model_max_length``) is cut to its first tokens, and the
                trace's ``notes`` say so; without it (default), refused.
            chat: the text is a user's message in the model's chat template, followed by
                the prompt for the answer (``apply_chat_template(...,
                add_generation_prompt=True)``); the trace marks the template's tokens.
            check: None, or a function called before each layer's forward; what it raises
                ends the trace (``attnlab serve``'s, to stop a request its page left).

        Raises:
            ArgumentError: a text without a tokenizer, a text over the limit without
                ``truncation``, ``chat`` for a model without a chat template, ids out of
                the vocabulary, too many tokens for the positions, a layer the model does
                not have, or an empty list of layers (a trace of nothing); a forward whose
                numbers overflow (a NaN or an infinity in it, named by its first layer and step).
            ArgumentTypeError: ``text_or_ids`` neither a text nor integer ids (None, bytes), a
                ``check`` that is not callable.
            Exception: whatever ``check`` raises.
        """
        optional_callable("check", check)
        return _trace(self, text_or_ids, layers, truncation, chat, check)

    @overload
    def generate(
        self, input_ids: ArrayLike, max_new_tokens: int, *, temperature: float = ...,
        rng: int | np.random.Generator | None = ..., output_logits: Literal[False] = ...,
    ) -> Array: ...  # fmt: skip
    @overload
    def generate(
        self, input_ids: ArrayLike, max_new_tokens: int, *, temperature: float = ...,
        rng: int | np.random.Generator | None = ..., output_logits: Literal[True],
    ) -> tuple[Array, Array]: ...  # fmt: skip
    def generate(
        self, input_ids: ArrayLike, max_new_tokens: int, *, temperature: float = 0.0,
        rng: int | np.random.Generator | None = None, output_logits: bool = False,
    ) -> Array | tuple[Array, Array]:  # fmt: skip
        """``input_ids`` (L,) followed by up to ``max_new_tokens`` tokens: the most likely
        each time (``temperature`` 0, the default) or drawn from softmax(logits /
        temperature) with ``rng`` (a Generator or an int seed). Stops after an
        end-of-sequence token. With ``output_logits``, also the logits each new token was
        chosen from (new, vocab).

        The prompt runs once; each new token is one query against the cached keys and
        values of every position before it.

        Args:
            input_ids: the prompt, (L,) ids.
            max_new_tokens: the most tokens to add.
            temperature: 0 (default): the most likely token; above 0: drawn from
                softmax(logits / temperature).
            rng: the draws' randomness, a Generator or an int seed (with a temperature).
            output_logits: also return the logits of each new token, (new, vocab).

        Raises:
            ArgumentError, ArgumentTypeError: a model that is not causal (BERT), not one
                sequence of ids, more tokens than the model's positions, a KV cache of
                ``max_new_tokens`` too large to allocate, a bad argument.
        """
        return generate(
            self.network, input_ids, max_new_tokens, temperature=temperature, rng=rng, output_logits=output_logits
        )

    trace_generation = _trace_generation_method  # defined above: the class stays under 120 lines


def _forward(
    model: Model, input_ids: ArrayLike, attention_mask: ArrayLike | None, token_type_ids: ArrayLike | None,
    output_hidden_states: bool, output_attentions: bool,
) -> ModelOutput:  # fmt: skip
    """See :meth:`Model.forward`."""
    ids, valid, types = model_inputs(model.network, input_ids, attention_mask, token_type_ids)
    batched = ids.ndim == 2
    record = Recorder(attentions=flag("output_attentions", output_attentions))
    hidden: list[Array] | None = [] if flag("output_hidden_states", output_hidden_states) else None
    last = model.network.forward(ids if batched else ids[None], valid, types, None, record, hidden)  # (B, L, D)
    with np.errstate(over="ignore", invalid="ignore"):  # a non-finite logit is refused by check_finite
        logits = model.network.logits(last)
    if logits is not None:
        check_finite(logits, "the logits", "input_ids")

    def unbatch(x: Array) -> Array:
        return x if batched else x[0]

    return ModelOutput(
        last_hidden_state=unbatch(last),
        logits=None if logits is None else unbatch(logits),
        hidden_states=None if hidden is None else tuple(unbatch(h) for h in hidden),
        attentions=tuple(unbatch(w) for w in record.weights) if output_attentions else None,
    )


def _trace_generation(
    model: Model, text_or_ids: ArrayLike | str, steps: int, layers: Any, truncation: bool, chat: bool, progress: bool,
    check: Callable[[], object] | None,
) -> GenerationTrace:  # fmt: skip
    """See :meth:`Model.trace_generation`."""
    if not is_integer(steps) or steps < 1:
        raise fail("max_new_tokens", "at least one token to generate", repr(steps))
    optional_callable("check", check)
    prompt = sequence_ids(model.config, model.tokenizer, text_or_ids, truncation=truncation, chat=chat).ids
    chosen = layer_indices(model.config, layers)
    rows: list[list[Array]] = []
    with progress_bar(int(steps), "generate", "token", enabled=progress) as bar:
        ids = generate(model.network, prompt, int(steps), rows=rows, on_token=bar.update, check=check)
    assert isinstance(ids, np.ndarray)
    tokenizer = model.tokenizer
    tokens = tokenizer.pieces(ids)[0] if tokenizer is not None else [str(i) for i in ids]
    special = [tokenizer.is_special(i) for i in ids] if tokenizer is not None else []
    weights = {i: stack_rows([step[i] for step in rows], len(prompt)) for i in chosen}
    return GenerationTrace(model.name, [int(i) for i in ids], tokens, len(prompt), weights, {}, special)


def _trace(
    model: Model, text_or_ids: ArrayLike | str, layers: Any, truncation: bool, chat: bool,
    check: Callable[[], object] | None = None,
) -> ModelTrace:  # fmt: skip
    """See :meth:`Model.trace`."""
    tokenizer = model.tokenizer
    prompt = sequence_ids(model.config, tokenizer, text_or_ids, truncation=truncation, chat=chat)
    ids = prompt.ids
    chosen = layer_indices(model.config, layers)
    record = Recorder(trace_layers=frozenset(chosen), check=check)
    model.network.forward(ids[None], None, None, None, record, None, name="text_or_ids")  # (L,) -> (1, L)
    marks = token_marks(model, prompt)
    for trace in record.traces.values():
        trace.tokens = marks["tokens"]
    c, traces = model.config, {i: record.traces[i] for i in chosen}
    counts = (c.num_hidden_layers, c.num_attention_heads)
    opens = answer_view(c.raw, marks["tokens"])
    made = ModelTrace(
        model.name, [int(i) for i in ids], marks["tokens"], traces, *counts, marks["special"], marks["parts"], opens
    )
    made.template, made.notes = marks["template"], marks["notes"]
    made.architecture, made.num_key_value_heads = c.model_type, c.num_key_value_heads
    return made


def token_marks(model: Model, prompt: Prompt) -> dict[str, list[Any]]:
    """What a trace or the statistics of ``prompt`` say of its L tokens, by the field's name:
    ``tokens`` as text, ``parts`` (the characters split over tokens), ``special``,
    ``template`` (put there by the chat template) and ``notes`` (the weights' kind, a cut,
    the template)."""
    tokenizer, ids = model.tokenizer, prompt.ids
    tokens, parts = tokenizer.pieces(ids) if tokenizer is not None else ([str(i) for i in ids], [])
    return {
        "tokens": tokens,
        "parts": parts,
        "special": [tokenizer.is_special(i) for i in ids] if tokenizer is not None else [],
        "template": prompt.template or [False] * len(ids),
        "notes": [model.weights_note, *prompt.notes] if model.weights_note else prompt.notes,
    }
