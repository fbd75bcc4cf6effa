"""attnlab.hf.trace_generation: the calls of a transformers model's own ``generate``
recorded, each new token's attention over everything before it (see
:class:`attnlab.trace.GenerationTrace`).

While ``model.generate`` runs greedily with its KV cache on attnlab's backend,
:data:`_backend.recorder` hands each attention call to :class:`_Steps`, which computes it
on the engine with its weights and keeps the last query's row: the prefill's last position
(which chose the first new token), then each decode step's one query.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .._progress import progress_bar
from .._validation import fail, flag, is_integer, optional_callable
from ..trace import GenerationTrace
from ..trace._generation import stack_rows
from ._backend import EngineCall, _engine_call
from ._inputs import _labelled, model_inputs
from ._record import _chosen, _recorded
from ._register import check_model
from ._torch import model_name

__all__ = ["trace_generation"]


@dataclass
class _Steps:
    """Each attention module's last-query rows (H, S), one per forward of the generation."""

    names: dict[int, str]  # id(module) -> its path
    order: list[int] = field(default_factory=list)  # id(module), in the order the first forward calls them
    rows: dict[int, list[np.ndarray]] = field(default_factory=dict)

    def before(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """No input is kept: a generation's record is its weights."""

    def after(self, module: Any, args: Any, output: Any) -> None:
        """Nothing after a module either."""

    def record(self, call: EngineCall) -> np.ndarray:
        """The call's output (B, H, L, Ev), computed with its weights, whose last row is kept."""
        if call.query.shape[0] != 1:
            raise fail("text", "one sequence (a batch of 1) to generate from", f"a batch of {call.query.shape[0]}")
        result = _engine_call(replace(call, options={**call.options, "need_weights": True}))
        key = id(call.module)
        if key not in self.rows:
            self.order.append(key)
            self.rows[key] = []
        assert result.weights is not None
        self.rows[key].append(np.asarray(result.weights[0, :, -1], dtype=np.float64))  # (1, H, L, S) -> (H, S)
        return np.asarray(result.output)


@dataclass
class _Counter:
    """A streamer of ``model.generate`` (transformers' streamer protocol: ``put`` of the
    prompt's ids before the first forward, then of each new token's, then ``end``) that
    counts the new tokens on a progress bar and calls ``check`` before each new token's
    forward: after the prompt and each token but the last (``limit`` of them, or an end
    token, one of ``ends``)."""

    bar: Any
    check: Callable[[], object] | None = None
    limit: int = 0
    ends: frozenset[int] = frozenset()
    prompt_seen: bool = False
    count: int = 0

    def put(self, value: Any) -> None:
        """The prompt's ids first (not counted), then one new token's."""
        if self.prompt_seen:
            self.bar.update(1)
            self.count += 1
        last = self.count >= self.limit or (self.prompt_seen and int(value.reshape(-1)[-1]) in self.ends)
        self.prompt_seen = True
        if self.check is not None and not last:
            self.check()

    def end(self) -> None:
        """The generation has ended."""


def trace_generation(
    model: Any, text: Any, max_new_tokens: int, *, tokenizer: Any = None, layers: Any = None, progress: bool = False,
    check: Callable[[], object] | None = None,
) -> GenerationTrace:  # fmt: skip
    """The attention of the tokens ``model.generate`` adds greedily to ``text``, recorded
    from its own calls with the KV cache: for each new token, the weights of the step
    that chose it (one query, the token before it, over every position before the new
    token), per head of every attention module (a decoder-only model's layers).

    Args:
        model: a transformers causal language model (``AutoModelForCausalLM``) whose
            attention goes through the attention interface.
        text: the prompt: a text (tokenized with ``tokenizer``) or its input_ids, a
            mapping of tensors of a batch of 1.
        max_new_tokens: the most tokens to add (at least 1; fewer after an end token).
        tokenizer: the model's tokenizer; None: the inputs must be tensors, shown as ids.
        layers: the attention modules to keep, an index or a list of them (negative from
            the end), or None for all.
        progress: show a progress bar on stderr, tokens generated of ``max_new_tokens``.
        check: None, or a function called before each new token's forward (by
            ``generate``'s streamer); what it raises ends the generation (``attnlab
            serve``'s, to stop a request its page left).

    Raises:
        UnsupportedModelError: the model does not compute attention through the interface.
        ArgumentError, ArgumentTypeError: a model that cannot generate, inputs that are not
            one sequence, ``max_new_tokens`` below 1 or past the model's positions, a module
            the model does not have, a cache that drops keys (a sliding window's: its rows
            cannot be laid out by position); a ``progress`` that is not a bool, a ``check``
            that is not callable.
        Exception: whatever ``check`` raises.
    """
    check_model(model)
    show_progress = flag("progress", progress)
    if getattr(model.config, "is_encoder_decoder", False):
        raise fail(
            "model", "a decoder-only model (a generation's trace is of one sequence)", "an encoder-decoder model"
        )
    if (
        not callable(getattr(model, "generate", None))
        or getattr(model, "get_output_embeddings", lambda: None)() is None
    ):
        raise fail("model", "a causal language model that generates (AutoModelForCausalLM)", type(model).__name__)
    if not is_integer(max_new_tokens) or max_new_tokens < 1:
        raise fail("max_new_tokens", "at least one token to generate", repr(max_new_tokens))
    optional_callable("check", check)
    sequences = model_inputs(model, text, tokenizer)
    prompt = sequences.inputs["input_ids"]
    positions = getattr(model.config, "max_position_embeddings", None)
    if is_integer(positions) and prompt.shape[-1] + max_new_tokens > positions:
        raise fail(
            "max_new_tokens", f"at most {max(positions - prompt.shape[-1], 0)} (the model's {positions} positions)",
            f"{max_new_tokens} after {prompt.shape[-1]} prompt tokens",
        )  # fmt: skip
    chosen = _chosen(layers)
    steps = _Steps({id(module): name for name, module in model.named_modules()})
    bar = progress_bar(int(max_new_tokens), "generate", "token", enabled=show_progress)
    streamer = _Counter(bar, check, int(max_new_tokens), _end_tokens(model.generation_config))
    with bar, _recorded(model, steps):  # type: ignore[arg-type]  # duck-typed: before, after and record
        ids = model.generate(
            **sequences.inputs, max_new_tokens=int(max_new_tokens), do_sample=False, num_beams=1,
            pad_token_id=getattr(model.generation_config, "pad_token_id", None) or 0,
            streamer=streamer if show_progress or check is not None else None,
        )[0]  # fmt: skip
    count = len(steps.order)
    wanted = range(count) if chosen is None else sorted({i + count if i < 0 else i for i in chosen})
    if any(not 0 <= i < count for i in wanted):
        raise fail("layers", f"attention modules in 0..{count - 1} (each forward made {count})", repr(layers))
    all_ids = [int(i) for i in ids]
    P = int(prompt.shape[-1])
    weights = {i: stack_rows(steps.rows[steps.order[i]], P) for i in wanted}
    names = {i: steps.names.get(steps.order[i], f"attention {i}") for i in wanted}
    text_tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    if tokenizer is not None:
        labelled = _labelled(text_tokenizer, all_ids)
        tokens, special = labelled.tokens, labelled.special
    else:
        tokens, special = [str(i) for i in all_ids], []
    return GenerationTrace(model_name(model), all_ids, tokens, P, weights, names, special)


def _end_tokens(config: Any) -> frozenset[int]:
    """The ids whose generation ends it (the generation config's ``eos_token_id``: one, a
    list, or None)."""
    ends = getattr(config, "eos_token_id", None)
    ends = [] if ends is None else [ends] if is_integer(ends) else list(ends)
    return frozenset(int(end) for end in ends if is_integer(end))
