"""attnlab.hf.trace: one forward of a transformers model, every attention module recorded
as an :class:`attnlab.Trace` by the engine's own call (no second forward).

While the forward runs, :data:`_backend.recorder` hands each attention call to
:class:`_Recording`, which computes it through :func:`attnlab.trace._build.build_trace`
(the weights and every step beside the output the model goes on with), and hooks on the
modules catch each one's input (the query side's hidden states) and its output after the
out projection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._validation import check_finite, fail, is_integer, optional_callable
from ..trace import ModelTrace, Trace
from ..trace._build import build_trace
from ._backend import EngineCall, _engine_call, recorder
from ._inputs import Sequences, model_inputs
from ._register import check_model, on_attnlab
from ._torch import torch

__all__ = ["trace"]

# the keyword arguments by which a module is handed another sequence's states: cross-attention
_CROSS_STATES = ("key_value_states", "encoder_hidden_states")


@dataclass
class _Entry:
    """One recorded attention call: its module's path, kind and trace."""

    name: str
    kind: str
    trace: Trace | None = None


@dataclass
class _Recording:
    """What one traced forward records, in the order the attention modules run."""

    names: dict[int, str]  # id(module) -> its path in the model
    chosen: frozenset[int] | None  # the entries to trace; None: all
    encoder_decoder: bool
    check: Callable[[], object] | None = None  # called before each attention call's work
    inspect: Callable[[int, EngineCall], None] | None = None  # sees each call (its index) before the engine runs it
    entries: list[_Entry] = field(default_factory=list)
    inputs: dict[int, tuple[Any, bool]] = field(default_factory=dict)  # id(module) -> (hidden states, cross)
    by_module: dict[int, _Entry] = field(default_factory=dict)  # the latest entry of each module

    def before(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A module's forward pre-hook: keep its first tensor input and whether it is handed
        another sequence's states."""
        states = args[0] if args else kwargs.get("hidden_states")
        if isinstance(states, torch.Tensor):
            cross = any(kwargs.get(name) is not None for name in _CROSS_STATES)
            self.inputs[id(module)] = (states, cross)

    def after(self, module: Any, _args: Any, output: Any) -> None:
        """A module's forward hook: the recorded module's output after its out projection."""
        entry = self.by_module.pop(id(module), None)
        first = output[0] if isinstance(output, tuple) else output
        if entry is not None and entry.trace is not None and isinstance(first, torch.Tensor):
            entry.trace.layer_output = first[0].detach().float().numpy() if first.shape[0] == 1 else None

    def record(self, call: EngineCall) -> np.ndarray:
        """The recorder: the call's output (B, H, L, Ev), with its trace when chosen; a NaN
        or an infinity in what enters or leaves the call refused (:func:`_check_finite`);
        ``check`` called first."""
        if self.check is not None:
            self.check()
        states, cross = self.inputs.get(id(call.module), (None, False))
        name = self.names.get(id(call.module), type(call.module).__name__)
        entry = _Entry(name, _kind(name, cross, self.encoder_decoder))
        index = len(self.entries)
        self.entries.append(entry)
        self.by_module[id(call.module)] = entry
        where = f"attention entry {index} ({name})"
        if states is not None and not bool(torch.isfinite(states).all()):
            _check_finite(states.detach().float().numpy(), f"the hidden states entering {where}")
        for x, what in ((call.query, "queries"), (call.key, "keys"), (call.value, "values")):
            _check_finite(x, f"the {what} of {where}")
        if self.inspect is not None:
            self.inspect(index, call)
        with np.errstate(over="ignore", invalid="ignore"):  # a non-finite number is refused below
            if self.chosen is not None and index not in self.chosen:
                output = np.asarray(_engine_call(call).output)
            else:
                entry.trace = _trace_of(call, states)
                weights, axes = entry.trace.weights, ("head", "query", "key")  # (H, L, S)
                _check_finite(weights, f"the attention weights of {where}", "the scores overflow", axes)
                output = entry.trace.output[None]  # (H, L, Ev) -> (1, H, L, Ev)
        _check_finite(output, f"the attention output of {where}")
        return output


# how a NaN or an infinity comes into a transformers model's forward (followed by its dtype): its
# weights are the caller's, not checked by a loader of attnlab's
_NOT_FINITE = "a weight that is not finite, or numbers that overflow"


def _check_finite(x: np.ndarray, where: str, why: str = _NOT_FINITE, axes: tuple[str, ...] = ()) -> None:
    """Refuse a NaN or an infinity in ``x``, what the forward computed at ``where``
    (``why``: how it came, followed by the dtype), as attnlab's own models refuse it."""
    check_finite(x, where, "text_or_inputs", why, axes)


def _kind(name: str, cross: bool, encoder_decoder: bool) -> str:
    """self, or in an encoder-decoder model encoder, decoder or cross."""
    if cross:
        return "cross"
    if not encoder_decoder:
        return "self"
    return "decoder" if "decoder" in name.split(".") else "encoder"


def _trace_of(call: EngineCall, states: Any) -> Trace:
    """The trace of one sequence's call: Q (H, L, E), K and V (H, S, ·) with each key/value
    head repeated for its query heads, the mask of the one sequence."""
    query, key, value = call.query, call.key, call.value
    if query.shape[0] != 1:
        raise fail("text_or_inputs", "one sequence (a batch of 1) to trace", f"a batch of {query.shape[0]}")
    groups = query.shape[1] // key.shape[1]
    K, V = (np.repeat(x[0], groups, axis=0) for x in (key, value))  # (Hk, S, ·) -> (H, S, ·)
    L = query.shape[-2]
    inputs = states[0].detach().float().numpy() if states is not None and states.shape[-2] == L else None
    if inputs is None:
        inputs = np.zeros((L, 0), query.dtype)  # the module's input was not a (1, L, D) tensor: none to show
    mask = None if call.mask is None else call.mask[0]  # (1, ·, L, S) -> (·, L, S)
    scale = call.options["scale"]
    return build_trace(inputs, query[0], K, V, scale=scale, rules=call.rules, tokens=None, attn_mask=mask)


@contextlib.contextmanager
def _recorded(model: Any, recording: _Recording) -> Iterator[None]:
    """The model on attnlab's backend, in eval mode and without gradients, its modules
    hooked and its attention calls handed to ``recording``; everything restored after."""
    handles = [
        handle
        for module in model.modules()
        for handle in (
            module.register_forward_pre_hook(recording.before, with_kwargs=True),
            module.register_forward_hook(recording.after),
        )
    ]
    token = recorder.set(recording.record)
    try:
        with on_attnlab(model):
            yield
    finally:
        recorder.reset(token)
        for handle in handles:
            handle.remove()


def trace(
    model: Any, text_or_inputs: Any, *, tokenizer: Any = None, layers: Any = None,
    check: Callable[[], object] | None = None,
) -> ModelTrace:  # fmt: skip
    """Every attention module of one forward of a transformers model, each as an
    :class:`attnlab.Trace` (Q and K after RoPE, V, scores, weights, output) named by its
    module path: self-attention, and in an encoder-decoder model the encoder's, the
    decoder's and the cross-attention. ``trace[i]`` is the i-th attention call of the
    forward (of a decoder-only or encoder-only model, its i-th layer).

    While it runs, the model itself is changed: its attention implementation is attnlab's,
    it is in eval mode, and its attention modules carry the hooks that record them (all
    restored after). So trace a model object from one thread at a time, and run no other
    forward of that object meanwhile (another thread's forward of it would be recorded, and
    would run in eval mode on attnlab's engine); other model objects are untouched.

    Args:
        model: a transformers ``PreTrainedModel`` whose attention goes through transformers'
            attention interface (any attn_implementation: the trace runs on attnlab's, then
            restores it).
        text_or_inputs: a text (tokenized with ``tokenizer``, special tokens added); for an
            encoder-decoder model a text (the decoder reads it too) or a (source, target)
            pair of texts; for a vision model an image (a PIL image or an (H, W, 3) array,
            prepared with ``tokenizer``, its image processor); or the model's inputs as a
            mapping of tensors of a batch of 1.
        tokenizer: the model's tokenizer, image processor or processor (AutoProcessor);
            None: the inputs must be tensors, and the tokens are shown as their ids.
        layers: the entries to trace, an index or a list of them (negative: from the
            end), or None for all; the others run without being recorded.
        check: None, or a function called before each attention call; what it raises
            ends the forward (``attnlab serve``'s, to stop a request its page left).

    Raises:
        UnsupportedModelError: the model does not compute attention through the interface.
        ArgumentError, ArgumentTypeError: inputs that are not one sequence, a text without
            a tokenizer, an entry the forward does not have; a NaN or an infinity in the
            forward (a weight that is not finite, or numbers that overflow), named by the
            first attention entry it reaches and what of it; a ``check`` that is not
            callable.
        Exception: whatever ``check`` raises.
    """
    check_model(model)
    optional_callable("check", check)
    sequences = model_inputs(model, text_or_inputs, tokenizer)
    chosen = _chosen(layers)
    names = {id(module): name for name, module in model.named_modules()}
    ahead = None if chosen is None or min(chosen) < 0 else frozenset(chosen)  # negative: known after the forward
    recording = _Recording(names, ahead, bool(getattr(model.config, "is_encoder_decoder", False)), check)
    with _recorded(model, recording):
        model(**sequences.inputs)
    count = len(recording.entries)
    wanted = range(count) if chosen is None else sorted({i + count if i < 0 else i for i in chosen})
    missing = [i for i in wanted if not 0 <= i < count]
    if missing:
        raise fail("layers", f"attention entries in 0..{count - 1} (the forward made {count})", repr(layers))
    return _model_trace(model, recording, list(wanted), sequences)


def _chosen(layers: Any) -> list[int] | None:
    """``layers`` as a list of indices, checked for type; None: all."""
    if layers is None:
        return None
    chosen = [layers] if is_integer(layers) else list(layers) if isinstance(layers, (list, tuple, range)) else None
    if chosen is None or not chosen or not all(is_integer(i) for i in chosen):
        raise fail("layers", "an index, a non-empty list of indices or None", repr(layers), TypeError)
    if len(set(chosen)) != len(chosen):
        raise fail("layers", "each entry once", repr(layers))
    return [int(i) for i in chosen]


def _model_trace(model: Any, recording: _Recording, wanted: list[int], sequences: Sequences) -> ModelTrace:
    """The ModelTrace of the wanted entries, each labelled with its sequences' tokens."""
    traces, modules, kinds = {}, {}, {}
    for i in wanted:
        entry = recording.entries[i]
        assert entry.trace is not None  # every entry was traced; the unwanted are left out here
        entry.trace.tokens = sequences.labels(entry.kind, "rows")
        entry.trace.key_tokens = sequences.labels(entry.kind, "keys")
        traces[i], modules[i], kinds[i] = entry.trace, entry.name, entry.kind
    heads = max(trace.num_heads for trace in traces.values())
    return sequences.model_trace(model, traces, len(recording.entries), heads, modules, kinds)
