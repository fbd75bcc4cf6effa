"""The network a checkpoint describes, and its forward.

One :class:`Network` serves the five architectures (:mod:`._architectures` reads each): the
embeddings, one :class:`Block` per layer and the head. Every block's attention is one call
of :func:`attnlab.attention` (the engine behind :func:`attnlab.scaled_dot_product_attention`),
with grouped-query attention through ``enable_gqa``, causality through ``is_causal`` aligned
at the bottom right (query i is position S − L + i, after the cached ones), a sliding window
of w keys through ``window=(w − 1, 0)`` and padding through a boolean mask. Shapes:
input_ids (B, L); hidden states (B, L, D); per layer q (B, H, L, E), k and v (B, Hk, S, E)
with S = L plus the cached positions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .._exceptions import deprecated
from .._validation import Array, all_finite, check_finite
from ..engine._masks import mask_scores_
from ..engine.variants import Band
from ..functional import attention
from ..layers import Embedding
from ..layers._multihead_self import MultiheadSelfAttention
from ..trace import Trace, Variants
from ._ops import Linear, Norm, Rope, rotate

__all__ = ["FULL", "SLIDING", "Block", "Cache", "ModelConfig", "Network", "Recorder", "Step"]

FULL, SLIDING = "full_attention", "sliding_attention"  # a layer's attention, as transformers' layer_types name it


class _Renamed:
    """A field's old name, kept one release: reading it warns (DeprecationWarning) and
    gives the field; it cannot be set (the config is frozen)."""

    def __init__(self, new_name: str) -> None:
        self.new_name = new_name

    def __set_name__(self, owner: type, name: str) -> None:
        self.old_name = f"{owner.__name__}.{name}"

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self
        deprecated(self.old_name, self.new_name)
        return getattr(instance, self.new_name)


@dataclass(frozen=True)
class ModelConfig:
    """What attnlab reads from config.json, under the names of ``transformers``'
    configurations.

    Args:
        model_type: "gpt2", "bert", "llama", "qwen2" or "mistral".
        vocab_size: the number of token ids.
        hidden_size: D, the width of the hidden state.
        num_hidden_layers: the layers.
        num_attention_heads: H, the query heads of a layer.
        num_key_value_heads: Hk, its key/value heads (H for plain multi-head attention).
        head_dim: E, the width of one head.
        max_position_embeddings: the longest sequence the positions allow.
        causal: each position sees only those before it (GPT-2, Llama, Qwen2, Mistral; not BERT).
        eos_token_id: the end tokens, a tuple.
        raw: the whole config.json.
        sliding_window: w, the keys a query of a sliding layer sees: those at positions
            i − w < j <= i for the query at position i; None when no layer has a window.
        layer_types: each layer's attention, "full_attention" or "sliding_attention" (with
            the window), num_hidden_layers of them; () says every layer is full.
    """

    model_type: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    causal: bool
    eos_token_id: tuple[int, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()

    num_layers = _Renamed("num_hidden_layers")
    num_heads = _Renamed("num_attention_heads")
    num_kv_heads = _Renamed("num_key_value_heads")
    max_positions = _Renamed("max_position_embeddings")


class Cache(Protocol):
    """The keys and values of the positions before this forward's (the KV cache of
    :mod:`._generate`): ``length`` positions so far."""

    length: int

    def extend(self, layer: int, k: Array, v: Array) -> tuple[Array, Array]:
        """Append the new positions' k and v (B, Hk, n, E); all keys and values so far."""
        ...


@dataclass
class Recorder:
    """What a forward keeps beyond its output: each layer's weights, traces of some layers;
    ``head_outputs``, when given, is called as ``head_outputs(layer, out)`` with each layer's
    engine output (B, H, L, Ev), before the out projection, and its result goes on instead
    (attnlab.analysis replaces heads' outputs through it); ``check``, when given, is called
    before each layer, and what it raises ends the forward (the live page's, to stop a request
    its page left or the server that is stopping); ``attention_inputs``, when given, is
    called as ``attention_inputs(layer, q, k, rules)`` with each layer's queries (B, H, L, E)
    after RoPE, all its keys (B, Hk, S, E), the cached ones first, and the engine call's other
    keywords (``attn_mask``, ``is_causal``, ``causal_alignment``, ``window``, ``scale``,
    ``enable_gqa``): what :func:`attnlab.engine.attention_statistics` and
    :func:`~attnlab.engine.attention_row` take to compute the layer's weights' statistics or
    one row without the forward keeping them. What it returns, a boolean mask (1 or B, H, L,
    S), True where a query may see a key, joins the layer's rules (a KV cache's evicted keys,
    attnlab.analysis.evict); None adds none."""

    attentions: bool = False
    trace_layers: frozenset[int] = frozenset()
    weights: list[Array] = field(default_factory=list)
    traces: dict[int, Trace] = field(default_factory=dict)
    head_outputs: Callable[[int, Array], Array] | None = None
    check: Callable[[], object] | None = None
    attention_inputs: Callable[[int, Array, Array, dict[str, Any]], Array | None] | None = None


@dataclass(frozen=True)
class Step:
    """What every layer of one forward shares: the config, the attention mask (None
    without padding) and ``is_causal`` (bottom-right aligned), the RoPE tables of its
    positions, the cache, the recorder, and the name of the argument the forward runs on
    (what a refusal of a non-finite number names: :func:`~attnlab._validation.check_finite`)."""

    config: ModelConfig
    mask: Array | None
    is_causal: bool
    rope: tuple[Array, Array] | None
    cache: Cache | None
    record: Recorder | None
    name: str = "input_ids"


@dataclass(frozen=True)
class Block:
    """One transformer layer's weights: attention (nn's layer over the checkpoint's query, key, value
    and out projections, its heads and scale), two norms and
    the MLP down(act(gate(x))·up(x)) with a gate (Llama, Qwen2, Mistral) or
    down(act(up(x))); ``sliding_window``: w, the sliding window of a causal layer (the query at
    position i sees the keys i − w < j <= i), or None."""

    attn: MultiheadSelfAttention
    attention_norm: Norm
    mlp_norm: Norm
    up: Linear
    down: Linear
    activation: Callable[[Array], Array]
    gate: Linear | None = None
    sliding_window: int | None = None

    def forward(self, x: Array, layer: int, step: Step, pre_norm: bool) -> Array:
        """The layer's output (B, L, D) for its input x (B, L, D): each sublayer's norm
        before it (``pre_norm``: GPT-2, Llama, Qwen2, Mistral) or after its residual sum (BERT)."""
        if pre_norm:
            x = x + self.attention(self.attention_norm.infer(x), layer, step)
            x = x + self.mlp(self.mlp_norm.infer(x))
        else:
            x = self.attention_norm.infer(x + self.attention(x, layer, step))
            x = self.mlp_norm.infer(x + self.mlp(x))
        check_finite(x, f"layer {layer}'s output", step.name, "the out projection, MLP or norms overflow")
        return x

    def attention(self, h: Array, layer: int, step: Step) -> Array:
        """Self-attention over h (B, L, D), the cached positions' keys first: its output
        after the out projection (B, L, D). A sliding layer passes the engine the window
        (w − 1, 0) and, past the prompt, only the last L + w − 1 keys (those its queries see)."""
        L = h.shape[1]  # h (B, L, D)
        q, k, v = self.attn.project(h)  # q (B, H, L, E), k and v (B, Hk, L, E)
        if step.rope is not None:
            q, k = rotate(q, *step.rope), rotate(k, *step.rope)
        if step.cache is not None:
            k, v = step.cache.extend(layer, k, v)  # (B, Hk, S, E), the past positions first
        record = step.record
        keep = record is not None and (record.attentions or layer in record.trace_layers)
        every_key = keep or (record is not None and record.attention_inputs is not None)
        seen_k, seen_v, mask = k, v, step.mask
        if self.sliding_window is not None and not every_key:  # the weights keep all S columns, as transformers'
            first = max(k.shape[2] - L - (self.sliding_window - 1), 0)  # the first key the first query sees
            seen_k, seen_v = k[:, :, first:], v[:, :, first:]  # (B, Hk, S, E) -> (B, Hk, S − first, E)
            mask = None if mask is None else mask[..., first:]  # (…, L, S) -> (…, L, S − first)
        rules: dict[str, Any] = dict(
            attn_mask=mask, is_causal=step.is_causal, causal_alignment="bottom_right",
            window=None if self.sliding_window is None else (self.sliding_window - 1, 0), scale=self.attn.scale,
            enable_gqa=self.attn.kv_heads != self.attn.heads,
        )  # fmt: skip
        if record is not None and record.attention_inputs is not None:
            seen = record.attention_inputs(layer, q, seen_k, rules)  # (1 or B, H, L, S) or None
            if seen is not None:  # (B, 1, L, S) & (1, H, L, S) -> (B, H, L, S)
                rules["attn_mask"] = seen if mask is None else mask & seen
        result = attention(q, seen_k, seen_v, **rules, need_weights=keep)
        out, weights = result.output.astype(h.dtype, copy=False), result.weights
        if not all_finite(out) or (weights is not None and not all_finite(weights)):  # refused: where it began
            for x, what in ((q, "queries"), (k, "keys"), (v, "values")):
                check_finite(x, f"layer {layer}'s {what}", step.name)
            if weights is not None:
                axes = ("sequence" if len(weights) > 1 else "", "head", "query", "key")  # (B, H, L, S)
                check_finite(weights, f"layer {layer}'s attention weights", step.name, "the scores overflow", axes)
            check_finite(out, f"layer {layer}'s attention output", step.name)
        if record is not None and record.head_outputs is not None:
            out = record.head_outputs(layer, out)  # (B, H, L, Ev), some heads replaced
        projected = self.attn.merge(out)  # (B, H, L, E) -> (B, L, D)
        if record is not None and weights is not None:
            if record.attentions:
                record.weights.append(weights)
            if layer in record.trace_layers:
                record.traces[layer] = self._trace((h, q, k, v, weights, out, projected), step)
        return projected

    def _trace(self, batch: tuple[Array, ...], step: Step) -> Trace:
        """One layer's Trace of sequence 0 of its input h (B, L, D), q (B, H, L, E), k and v
        (B, Hk, S, E) (repeated to H heads), weights (B, H, L, S), output (B, H, L, E) and
        projected output (B, L, D); its scaled scores are −∞ where the padding, the causal rule
        or the window hides a key."""
        h, q, k, v, weights, out, projected = (x[0] for x in batch)
        group = q.shape[0] // k.shape[0]
        K, V = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)  # (Hk, S, E) -> (H, S, E)
        with np.errstate(over="ignore", invalid="ignore"):
            scores = q @ np.swapaxes(K, -1, -2)  # (H, L, S)
            scaled = scores * self.attn.scale
        mask = step.mask
        mask_scores_(scaled, None if mask is None else mask[0] if mask.ndim == 4 else mask, False)
        L, S = scaled.shape[-2:]
        # query i is position S − L + i: the band bottom-right aligned, a window of w keys (w − 1, None)
        window = None if self.sliding_window is None else (self.sliding_window - 1, None)
        band = Band.of(step.is_causal, window, S - L, (L, S))
        np.copyto(scaled, -np.inf, where=~band.allowed(slice(0, L), slice(0, S)))  # the causal rule and the window
        rules = Variants(  # what the page and plot say (L = S: the alignment does not show)
            is_causal=step.is_causal,
            window=None if self.sliding_window is None else (self.sliding_window - 1, 0),
            attn_mask=None if mask is None else "bool",
        )
        return Trace(h, q, K, V, scores, self.attn.scale, scaled, weights, out, None, projected, variants=rules)

    def mlp(self, x: Array) -> Array:
        if self.gate is None:
            return self.down.infer(self.activation(self.up.infer(x)))
        hidden = self.activation(self.gate.infer(x))
        hidden *= self.up.infer(x)
        return self.down.infer(hidden)


@dataclass(frozen=True)
class Network:
    """A whole model: embeddings, blocks with the norms before (GPT-2, Llama) or after
    (BERT) each sublayer, a final norm and a head to the vocabulary (None: the model
    returns hidden states)."""

    config: ModelConfig
    embed: Embedding  # (vocab, D)
    blocks: tuple[Block, ...]
    pre_norm: bool
    positions: Embedding | None = None  # (max_position_embeddings, D): learned; None with rope
    token_types: Embedding | None = None  # (types, D), BERT
    embed_norm: Norm | None = None  # BERT's LayerNorm over the summed embeddings
    rope: Rope | None = None
    final_norm: Norm | None = None
    head_transform: tuple[Linear, Callable[[Array], Array], Norm] | None = None  # BERT's MLM transform
    head: Linear | None = None  # (vocab, D)

    def forward(
        self, ids: Array, valid: Array | None, types: Array | None, cache: Cache | None, record: Recorder | None,
        hidden: list[Array] | None, *, name: str = "input_ids",
    ) -> Array:  # fmt: skip
        """The hidden state (B, L, D) after the last layer and the final norm, for ids
        (B, L) after the ``cache``'s positions; ``valid`` (B, L): False for padding;
        ``types`` (B, L): BERT's token types. Appends to ``hidden`` the embeddings and
        each layer's output, the last one after the final norm (as transformers does).

        Raises:
            ArgumentError: ``name`` (the argument the ids came from): a NaN or an infinity
                in what the forward computed (its float overflowed), naming the first
                layer and step where it appeared (``_validation.check_finite``); NumPy's
                overflow warnings are silenced, the refusal says it.
        """
        with np.errstate(over="ignore", invalid="ignore"):  # a non-finite number is refused by check_finite
            return self._forward(ids, valid, types, cache, record, hidden, name)

    def _forward(
        self, ids: Array, valid: Array | None, types: Array | None, cache: Cache | None, record: Recorder | None,
        hidden: list[Array] | None, name: str,
    ) -> Array:  # fmt: skip
        past = cache.length if cache is not None else 0
        positions = np.arange(past, past + ids.shape[1])  # (L,)
        x = self.embed.infer(ids)  # (B, L, D), a copy
        if self.positions is not None:
            x += self.positions.infer(positions)
        if self.token_types is not None:
            x += self.token_types.infer(np.zeros_like(ids) if types is None else types)
        if self.embed_norm is not None:
            x = self.embed_norm.infer(x)
        check_finite(x, "the embeddings", name)
        mask, is_causal = attention_mask(self.config.causal, valid, ids.shape[1], past)
        rope = None if self.rope is None else self.rope.tables(positions, x.dtype)
        step = Step(self.config, mask, is_causal, rope, cache, record, name)
        if hidden is not None:
            hidden.append(x)
        for layer, block in enumerate(self.blocks):
            if record is not None and record.check is not None:
                record.check()
            x = block.forward(x, layer, step, self.pre_norm)
            if hidden is not None:
                hidden.append(x)
        if cache is not None:
            cache.length += ids.shape[1]
        if self.final_norm is not None:
            x = self.final_norm.infer(x)
            check_finite(x, "the final norm", name)
            if hidden is not None:
                hidden[-1] = x
        return x

    def logits(self, x: Array) -> Array | None:
        """The logits (…, vocab) of hidden states (…, D); None without a head."""
        if self.head is None:
            return None
        if self.head_transform is not None:
            dense, act, norm = self.head_transform
            x = norm.infer(act(dense.infer(x)))
        return self.head.infer(x)


def attention_mask(is_causal: bool, valid: Array | None, L: int, past: int) -> tuple[Array | None, bool]:
    """The padding mask (B, 1, L, S), True where a query sees a key, or None without
    padding, and ``is_causal``: the L queries are the positions past..S − 1, so the
    engine's causal rule is aligned at the bottom right. ``valid`` (B, S): False for
    padding; with a mask, the causal rule is in it too, and a padding query that would see
    no key sees itself, so no row is empty (a sliding layer's window can still empty a
    padding query's row: its output is then 0)."""
    if valid is None:
        return None, is_causal
    S = past + L
    query_pos, key_pos = np.arange(past, S), np.arange(S)
    allowed = key_pos[None, :] <= query_pos[:, None] if is_causal else np.ones((L, S), dtype=bool)  # (L, S)
    allowed = allowed & valid[:, None, None, :]  # (B, 1, L, S)
    empty = ~allowed.any(axis=-1, keepdims=True)
    return allowed | (empty & (key_pos[None, :] == query_pos[:, None])), is_causal
