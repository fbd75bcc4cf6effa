"""A transformers model's attention at any length, without its weights: the statistics of
every attention call's weights (:func:`attnlab.engine.attention_statistics`), and one
query's whole row (:func:`attnlab.engine.attention_row`), each from the call's own query,
key, mask and rules as attnlab's backend receives them (:class:`~._backend.EngineCall`:
causal, the sliding window and padding in the mask transformers' mask function made,
softcap, the sinks, GQA), recorded by :mod:`._record`'s path in the same forward."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import Array, fail, optional_callable
from ..engine import AttentionStatistics, attention_row, attention_statistics
from ..engine.variants import Rules
from ..trace import ModelStatistics
from ._backend import EngineCall
from ._inputs import key_value_heads, model_inputs
from ._record import _recorded, _Recording
from ._register import check_model
from ._torch import model_name

__all__ = ["attention_rows", "statistics"]


def _weights_keywords(call: EngineCall) -> dict[str, Any]:
    """What the weights of ``call`` are, as attention_statistics and attention_row take it:
    the mask, the rules (:func:`_banded`), the scale and GQA."""
    mask, rules = _banded(call.mask, call.rules)
    return {"attn_mask": mask, "rules": rules, **{k: call.options[k] for k in ("scale", "enable_gqa")}}


def _banded(mask: Any, rules: Rules) -> tuple[Any, Rules]:
    """A bool mask (…, L, S) that sees no key ahead of its query's diagonal (bottom-right
    aligned, as a prefill's and a cache's) as the causal rule that it is, so that the
    statistics' band (the local keys "the last it may see") is the model's, as on attnlab's
    own models: ``is_causal`` joins the rules, and the mask goes where it is the band itself,
    causal or with a sliding window of w keys (``window=(w − 1, 0)``), or stays (padding).
    The weights are the same: the band only removes keys the mask already removes."""
    if mask is None or mask.dtype != bool or rules.is_causal or rules.window is not None:
        return mask, rules
    L, S = mask.shape[-2:]
    behind = np.subtract.outer(np.arange(L) + S - L, np.arange(S))  # i + offset − j, (L, S)
    if (mask & (behind < 0)).any():  # a key ahead of a query: not causal
        return mask, rules
    rules = rules.replace(is_causal=True, causal_alignment="bottom_right")
    width = int(mask.sum(axis=-1).max())  # the most keys a query sees: w, where the mask is a window
    if (mask == (behind >= 0)).all():
        return None, rules
    if (mask == ((behind >= 0) & (behind < width))).all():
        return None, rules.replace(window=(width - 1, 0))
    return mask, rules


def _run(model: Any, text_or_inputs: Any, tokenizer: Any, check: Any, inspect: Any) -> tuple[_Recording, Any]:
    """One forward of the model, ``inspect(index, call)`` seeing each attention call: the
    recording and the sequences read."""
    check_model(model)
    optional_callable("check", check)
    sequences = model_inputs(model, text_or_inputs, tokenizer)
    names = {id(module): name for name, module in model.named_modules()}
    encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    recording = _Recording(names, frozenset(), encoder_decoder, check, inspect)  # no entry traced
    with _recorded(model, recording), np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        model(**sequences.inputs)
    return recording, sequences


def statistics(
    model: Any, text_or_inputs: Any, *, tokenizer: Any, sizes: dict[str, Any], check: Any = None
) -> ModelStatistics:
    """The statistics of every attention call's weights in one forward of a decoder-only or
    encoder-only model (an entry per call, in order: its layers).

    Args:
        model: a transformers model, as :func:`attnlab.hf.trace` takes it.
        text_or_inputs, tokenizer, check: as :func:`attnlab.hf.trace`'s (one sequence).
        sizes: top_k, sink_keys and local_keys (checked).

    Raises:
        ArgumentError: what :func:`attnlab.hf.trace` refuses.
        Exception: whatever ``check`` raises.
    """
    layers: list[AttentionStatistics] = []

    def keep(index: int, call: EngineCall) -> None:
        layers.append(attention_statistics(call.query, call.key, **_weights_keywords(call), **sizes)[0])  # (H, …)

    _, sequences = _run(model, text_or_inputs, tokenizer, check, keep)
    main, config = sequences.source, model.config
    return ModelStatistics.from_layers(
        layers, model=model_name(model), ids=main.ids, tokens=main.tokens, special=main.special, parts=main.parts,
        architecture=str(getattr(config, "model_type", "") or ""),
        num_key_value_heads=key_value_heads(config, int(layers[0].lse.shape[0])),
    )  # fmt: skip


def attention_rows(
    model: Any, text_or_inputs: Any, *, tokenizer: Any, layer: int, query: int, check: Any = None
) -> Array:
    """Query ``query``'s whole row of every head's weights in attention call ``layer`` of one
    forward, (H, S), computed for that row alone; ``check`` as :func:`statistics` takes it.

    Raises:
        ArgumentError: what :func:`attnlab.hf.trace` refuses; a layer the forward does not
            have or a query past its queries, named.
    """
    rows: list[Array] = []

    def keep(index: int, call: EngineCall) -> None:
        if index == layer:
            L = call.query.shape[-2]
            if not 0 <= query < L:
                raise fail("query", f"an index in 0..{L - 1}", repr(query))
            rows.append(attention_row(call.query, call.key, query, **_weights_keywords(call))[0])  # (1, H, S) -> (H, S)

    recording, _ = _run(model, text_or_inputs, tokenizer, check, keep)
    if not rows:
        count = len(recording.entries)
        raise fail("layer", f"an index in 0..{count - 1} (the forward's attention calls)", repr(layer))
    return rows[0]
