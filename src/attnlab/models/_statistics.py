"""An attnlab model's attention at any length, without its weights: the statistics of every
layer's and head's weights (:func:`attnlab.engine.attention_statistics`), and one query's
whole row (:func:`attnlab.engine.attention_row`), from each layer's own q and k.

Both read the layer through the forward's one seam, ``Recorder.attention_inputs``: the
layer's queries after RoPE, its keys and the rules of its engine call (causal at the bottom
right, the sliding window, the padding mask, the scale, GQA), so that the statistics are
those of the weights the forward's engine computes, in the same forward, and no layer
keeps an (L, S) matrix."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .._validation import Array, fail, is_integer, optional_callable, positive_int
from ..engine import AttentionStatistics, attention_row, attention_statistics
from ..engine._statistics import LOCAL_KEYS, SINK_KEYS, TOP_K
from ..trace import ModelStatistics
from ._checks import sequence_ids
from ._model import Model, token_marks
from ._network import Recorder

__all__ = ["attention_rows", "model_statistics", "statistics_sizes"]


def statistics_sizes(top_k: Any, sink_keys: Any, local_keys: Any) -> dict[str, Any]:
    """The sizes of the statistics checked, by name (before any forward).

    Raises:
        ArgumentError, ArgumentTypeError: a count that is not a whole number ≥ 1, named.
    """
    sizes = {"top_k": top_k, "sink_keys": sink_keys, "local_keys": local_keys}
    return {name: positive_int(name, value) for name, value in sizes.items()}


def model_statistics(
    model: Model, text_or_ids: Any, *, top_k: int = TOP_K, sink_keys: int = SINK_KEYS, local_keys: int = LOCAL_KEYS,
    truncation: bool = False, chat: bool = False, check: Any = None,
) -> ModelStatistics:  # fmt: skip
    """The statistics of every layer's and head's attention weights in one forward of
    ``text_or_ids`` (as :meth:`Model.trace` reads it: ``truncation``, ``chat``, ``check``),
    each layer's computed from its q and k as the forward reaches it.

    Args:
        model: the model.
        text_or_ids: a text or ids (L,).
        top_k, sink_keys, local_keys: as :func:`attnlab.engine.attention_statistics`'s.
        truncation, chat, check: as :meth:`Model.trace`'s.

    Raises:
        ArgumentError, ArgumentTypeError: what :meth:`Model.trace` refuses; a count below 1.
        Exception: whatever ``check`` raises.
    """
    sizes = statistics_sizes(top_k, sink_keys, local_keys)
    optional_callable("check", check)
    prompt = sequence_ids(model.config, model.tokenizer, text_or_ids, truncation=truncation, chat=chat)
    layers: list[AttentionStatistics] = []

    def keep(layer: int, q: Array, k: Array, rules: dict[str, Any]) -> None:
        stats = attention_statistics(q, k, **rules, **sizes)  # batch (1, H)
        layers.append(stats[0])  # (1, H, …) -> (H, …)

    record = Recorder(check=check, attention_inputs=keep)
    model.network.forward(prompt.ids[None], None, None, None, record, None, name="text_or_ids")  # (L,) -> (1, L)
    c = model.config
    return ModelStatistics.from_layers(
        layers, model=model.name, ids=[int(i) for i in prompt.ids], **token_marks(model, prompt),
        architecture=c.model_type, num_key_value_heads=c.num_key_value_heads,
    )  # fmt: skip


def attention_rows(model: Model, ids: Array, layer: int, query: int, check: Any = None) -> Array:
    """Query ``query``'s whole row of every head's weights in layer ``layer`` of a forward of
    ``ids`` (L,), (H, L) in the compute dtype: computed for that row alone
    (:func:`attnlab.engine.attention_row`), the forward stopped after that layer; ``check``
    called before each layer.

    Raises:
        ArgumentError: a layer or query out of range, named.
        Exception: whatever ``check`` raises.
    """
    layer, query = _index("layer", layer, model.config.num_hidden_layers), _index("query", query, len(ids))
    rows: list[Array] = []

    def keep(index: int, q: Array, k: Array, rules: dict[str, Any]) -> None:
        if index == layer:
            rows.append(attention_row(q, k, query, **rules)[0])  # (1, H, S) -> (H, S)

    through = replace(model.network, blocks=model.network.blocks[: layer + 1])  # no layer after it runs
    through.forward(
        ids[None], None, None, None, Recorder(check=check, attention_inputs=keep), None, name="ids"
    )  # (L,) -> (1, L)
    return rows[0]


def _index(name: str, value: Any, count: int) -> int:
    """An index in 0..count − 1, or an error naming it."""
    if not is_integer(value) or not 0 <= value < count:
        raise fail(name, f"an index in 0..{count - 1}", repr(value))
    return int(value)
