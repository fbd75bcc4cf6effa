"""A pretrained model run in NumPy, its attention on attnlab's engine.

One forward serves the four architectures (:mod:`._architectures` describes each); every
layer's attention is one call of :func:`attnlab.attention` (the engine behind
:func:`attnlab.scaled_dot_product_attention`), with
grouped-query attention through ``enable_gqa``, causality through ``is_causal`` and padding
through a boolean mask. Shapes: input_ids (B, L); hidden states (B, L, D); per-layer q
(B, H, L, E), k and v (B, Hk, S, E) with S = L plus the cached positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, overload

import numpy as np

from .._validation import ArgumentError, fail, flag, real_number
from ..engine._masks import check_rng, mask_scores_
from ..functional import attention
from ..trace import ModelTrace, Trace
from ._architectures import Block, ModelConfig, Network
from ._ops import rotate
from ._tokenizer import Tokenizer

__all__ = ["Model", "ModelOutput"]

Array = np.ndarray


@dataclass(frozen=True)
class ModelOutput:
    """A forward's results, as ``transformers`` names them: ``logits`` (B, L, vocab) when
    the model has a head, ``last_hidden_state`` (B, L, D) (after the final norm),
    ``hidden_states`` (the embeddings and each layer's output, num_layers + 1 of them) and
    ``attentions`` (each layer's weights (B, H, L, S)) when asked for."""

    last_hidden_state: Array
    logits: Array | None = None
    hidden_states: tuple[Array, ...] | None = None
    attentions: tuple[Array, ...] | None = None


class _KVCache:
    """Keys and values of the positions seen so far, per layer: (B, Hk, capacity, E),
    of which the first ``length`` positions are filled (the rest is never read)."""

    def __init__(self, config: ModelConfig, batch: int, capacity: int, dtype: np.dtype) -> None:
        shape = (config.num_layers, batch, config.num_kv_heads, capacity, config.head_dim)
        self.keys, self.values = np.empty(shape, dtype), np.empty(shape, dtype)
        self.length = 0

    def extend(self, layer: int, k: Array, v: Array) -> tuple[Array, Array]:
        """Append the new positions' k and v (B, Hk, n, E); all keys and values so far."""
        end = self.length + k.shape[2]
        self.keys[layer, :, :, self.length : end] = k
        self.values[layer, :, :, self.length : end] = v
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]


@dataclass(frozen=True)
class _Pass:
    """What every layer of one forward shares: the attention mask (or ``is_causal``), the
    RoPE tables of its positions, the cache and the recorder."""

    mask: Array | None
    is_causal: bool
    rope: tuple[Array, Array] | None
    cache: _KVCache | None
    record: _Recorder | None


@dataclass
class _Recorder:
    """What a forward keeps beyond its output: each layer's weights, traces of some layers."""

    attentions: bool = False
    trace_layers: frozenset[int] = frozenset()
    weights: list[Array] = field(default_factory=list)
    traces: dict[int, Trace] = field(default_factory=dict)


class Model:
    """A checkpoint loaded by :func:`attnlab.models.load`.

    ``model(input_ids)`` gives the logits (B, L, vocab), or the last hidden state (B, L, D)
    for a BERT without its masked-LM head; ``forward`` gives every hidden state and
    attention matrix; ``trace`` every step of attention; ``generate`` continues a causal
    model's text with a KV cache."""

    def __init__(self, network: Network, tokenizer: Tokenizer | None, name: str) -> None:
        self.network = network
        self.tokenizer = tokenizer
        self.name = name

    @property
    def config(self) -> ModelConfig:
        return self.network.config

    @property
    def dtype(self) -> np.dtype:
        return self.network.embed.dtype

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Model({self.name!r}, {c.model_type}, layers={c.num_layers}, heads={c.num_heads}"
            + (f", kv_heads={c.num_kv_heads}" if c.num_kv_heads != c.num_heads else "")
            + f", hidden={c.hidden_size}, dtype={self.dtype})"
        )

    def __call__(self, input_ids: Any, attention_mask: Any = None, token_type_ids: Any = None) -> Array:
        output = self.forward(input_ids, attention_mask, token_type_ids)
        return output.logits if output.logits is not None else output.last_hidden_state

    def forward(
        self,
        input_ids: Any,
        attention_mask: Any = None,
        token_type_ids: Any = None,
        *,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> ModelOutput:
        """Run the model on ``input_ids`` (B, L) or (L,) (the outputs then have no batch
        axis). ``attention_mask`` (same shape, 1 for a token and 0 for padding) hides the
        padding's keys; a padding query that would see no key sees itself, so no row is
        empty, and its outputs mean nothing, as in ``transformers``. ``token_type_ids``:
        BERT's segments (default 0)."""
        ids = self._ids(input_ids)
        batched = ids.ndim == 2
        ids = ids if batched else ids[None]  # (L,) -> (1, L)
        valid = self._padding(attention_mask, ids.shape)
        types = self._token_types(token_type_ids, ids.shape)
        record = _Recorder(attentions=flag("output_attentions", output_attentions))
        hidden: list[Array] | None = [] if flag("output_hidden_states", output_hidden_states) else None
        last = self._run(ids, valid, types, None, record, hidden)
        logits = self._head(last)

        def unbatch(x: Array) -> Array:
            return x if batched else x[0]

        return ModelOutput(
            last_hidden_state=unbatch(last),
            logits=None if logits is None else unbatch(logits),
            hidden_states=None if hidden is None else tuple(unbatch(h) for h in hidden),
            attentions=tuple(unbatch(w) for w in record.weights) if output_attentions else None,
        )

    def trace(self, text_or_ids: Any, layers: Any = None) -> ModelTrace:
        """Every step of attention for one sequence (a text, tokenized with the model's
        tokenizer and its special tokens, or ids (L,)) in ``layers`` (an index, a list of
        them, or None for all; negative indices count from the end)."""
        if isinstance(text_or_ids, str):
            if self.tokenizer is None:
                raise fail("text_or_ids", "token ids: this checkpoint has no tokenizer", "a text")
            encoded = self.tokenizer.encode(text_or_ids)
            if len(encoded) == 0:
                raise fail("text_or_ids", "a text of at least one token", repr(text_or_ids))
            ids = self._ids(encoded)
        else:
            ids = self._ids(text_or_ids)
        if ids.ndim != 1:
            raise fail("text_or_ids", "one sequence: a text or ids of shape (L,)", f"ids of shape {ids.shape}")
        chosen = self._layers(layers)
        record = _Recorder(trace_layers=frozenset(chosen))
        self._run(ids[None], None, None, None, record, None)
        tokenizer = self.tokenizer
        tokens, parts = tokenizer.pieces(ids) if tokenizer is not None else ([str(i) for i in ids], [])
        special = [tokenizer.is_special(i) for i in ids] if tokenizer is not None else []
        for trace in record.traces.values():
            trace.tokens = tokens
        c = self.config
        traces = {i: record.traces[i] for i in chosen}
        return ModelTrace(self.name, [int(i) for i in ids], tokens, traces, c.num_layers, c.num_heads, special, parts)

    @overload
    def generate(
        self,
        input_ids: Any,
        max_new_tokens: int,
        *,
        temperature: float = ...,
        rng: Any = ...,
        output_logits: Literal[False] = ...,
    ) -> Array: ...
    @overload
    def generate(
        self,
        input_ids: Any,
        max_new_tokens: int,
        *,
        temperature: float = ...,
        rng: Any = ...,
        output_logits: Literal[True],
    ) -> tuple[Array, Array]: ...
    def generate(
        self,
        input_ids: Any,
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        rng: Any = None,
        output_logits: bool = False,
    ) -> Array | tuple[Array, Array]:
        """``input_ids`` (L,) followed by up to ``max_new_tokens`` tokens: the most likely
        each time (``temperature`` 0) or drawn from softmax(logits / temperature) with
        ``rng`` (a Generator or an int seed). Stops after an end-of-sequence token.
        With ``output_logits``, also the logits each new token was chosen from (new, vocab).

        The prompt runs once; each new token is one query against the cached keys and
        values of every position before it."""
        if not self.config.causal:
            raise ArgumentError(f"generate: {self.config.model_type} is not a causal model; GPT-2, Llama and Qwen2 are")
        ids = self._ids(input_ids)
        if ids.ndim != 1:
            raise fail("input_ids", "one sequence of ids (L,)", f"shape {ids.shape}")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
            raise fail("max_new_tokens", "an integer >= 0", repr(max_new_tokens))
        steps = int(max_new_tokens)
        temperature = real_number("temperature", temperature, minimum=0.0)
        generator = np.random.default_rng(check_rng(rng)) if temperature > 0 else None
        capacity = len(ids) + steps
        self._check_length(capacity, "input_ids with max_new_tokens")
        cache = _KVCache(self.config, 1, capacity, self.dtype)
        tokens, step_input, chosen_from = list(ids), ids, []
        for _ in range(steps):
            last = self._run(step_input[None], None, None, cache, None, None)[:, -1]  # (1, D): the last position's
            head = self._head(last)
            assert head is not None  # every causal model has one
            logits = head[0]  # (vocab,)
            chosen_from.append(logits)
            token = _pick(logits, temperature, generator)
            tokens.append(token)
            if token in self.config.eos_token_id:
                break
            step_input = np.array([token])
        result = np.asarray(tokens, dtype=np.int64)
        if flag("output_logits", output_logits):
            return result, np.stack(chosen_from) if chosen_from else np.zeros((0, self.config.vocab_size), self.dtype)
        return result

    # --- the forward ---------------------------------------------------------------------

    def _run(
        self,
        ids: Array,
        valid: Array | None,
        types: Array | None,
        cache: _KVCache | None,
        record: _Recorder | None,
        hidden: list[Array] | None,
    ) -> Array:
        """The hidden state after the last layer and the final norm (B, L, D)."""
        net = self.network
        past = cache.length if cache is not None else 0
        positions = np.arange(past, past + ids.shape[1])  # (L,)
        x = net.embed[ids]  # (B, L, D)
        if net.positions is not None:
            x += net.positions[positions]
        if net.token_types is not None:
            x += net.token_types[np.zeros_like(ids) if types is None else types]
        if net.embed_norm is not None:
            x = net.embed_norm(x)
        mask, is_causal = self._mask(valid, ids.shape[1], past)
        rope = None if net.rope is None else net.rope.tables(positions, x.dtype)
        step = _Pass(mask, is_causal, rope, cache, record)
        if hidden is not None:
            hidden.append(x)
        for i, block in enumerate(net.blocks):
            if net.pre_norm:
                x = x + self._attention(i, block, block.attention_norm(x), step)
                x = x + block.mlp(block.mlp_norm(x))
            else:
                x = block.attention_norm(x + self._attention(i, block, x, step))
                x = block.mlp_norm(x + block.mlp(x))
            if hidden is not None:
                hidden.append(x)
        if cache is not None:
            cache.length += ids.shape[1]
        if net.final_norm is not None:
            x = net.final_norm(x)
            if hidden is not None:
                hidden[-1] = x  # transformers reports the last layer's output after the final norm
        return x

    def _attention(self, layer: int, block: Block, h: Array, step: _Pass) -> Array:
        """One layer's attention over its normed input h (B, L, D): its output after the
        out projection (B, L, D)."""
        c = self.config
        B, L, _ = h.shape
        q = block.query(h).reshape(B, L, c.num_heads, c.head_dim).transpose(0, 2, 1, 3)  # (B,L,H·E) -> (B,H,L,E)
        k = block.key(h).reshape(B, L, c.num_kv_heads, c.head_dim).transpose(0, 2, 1, 3)  # -> (B, Hk, L, E)
        v = block.value(h).reshape(B, L, c.num_kv_heads, c.head_dim).transpose(0, 2, 1, 3)  # -> (B, Hk, L, E)
        if step.rope is not None:
            q, k = rotate(q, *step.rope), rotate(k, *step.rope)
        if step.cache is not None:
            k, v = step.cache.extend(layer, k, v)  # (B, Hk, S, E), the past positions first
        record = step.record
        keep = record is not None and (record.attentions or layer in record.trace_layers)
        result = attention(
            q, k, v, attn_mask=step.mask, is_causal=step.is_causal, scale=block.scale,
            enable_gqa=c.num_kv_heads != c.num_heads, need_weights=keep,
        )  # fmt: skip
        out, weights = result.output.astype(h.dtype, copy=False), result.weights
        merged = out.transpose(0, 2, 1, 3).reshape(B, L, c.num_heads * c.head_dim)  # (B,H,L,E) -> (B,L,H·E)
        projected = block.out(merged)
        if record is not None and weights is not None:
            if record.attentions:
                record.weights.append(weights)
            if layer in record.trace_layers:
                record.traces[layer] = _layer_trace(
                    h[0], q[0], k[0], v[0], weights[0], out[0], projected[0], block, step.mask, step.is_causal
                )
        return projected

    def _head(self, x: Array) -> Array | None:
        """The logits (…, vocab) of hidden states (…, D); None without a head."""
        net = self.network
        if net.head is None:
            return None
        if net.head_transform is not None:
            dense, act, norm = net.head_transform
            x = norm(act(dense(x)))
        return net.head(x)

    def _mask(self, valid: Array | None, L: int, past: int) -> tuple[Array | None, bool]:
        """The attention mask (B, 1, L, S) or (L, S), True where a query sees a key, or
        None with ``is_causal``: what the engine needs and nothing more."""
        causal, S = self.config.causal, past + L
        if valid is None:
            if not causal or L == 1:
                return None, False  # everything, or one new query that sees every key so far
            if past == 0:
                return None, True
        query_pos, key_pos = np.arange(past, S), np.arange(S)
        allowed = key_pos[None, :] <= query_pos[:, None] if causal else np.ones((L, S), dtype=bool)  # (L, S)
        if valid is None:
            return allowed, False
        allowed = allowed & valid[:, None, None, :]  # (B, 1, L, S)
        empty = ~allowed.any(axis=-1, keepdims=True)
        return allowed | (empty & (key_pos[None, :] == query_pos[:, None])), False

    # --- argument checks -------------------------------------------------------------------

    def _ids(self, input_ids: Any) -> Array:
        ids = np.asarray(input_ids)
        if ids.dtype.kind not in "iu":
            raise fail("input_ids", "integer token ids, (L,) or (B, L)", f"{ids.dtype} values", TypeError)
        if ids.ndim not in (1, 2) or ids.size == 0:
            raise fail("input_ids", "at least one token id, (L,) or (B, L)", f"shape {ids.shape}")
        if ids.min() < 0 or ids.max() >= self.config.vocab_size:
            raise fail("input_ids", f"ids in 0..{self.config.vocab_size - 1}", f"{ids.min()}..{ids.max()}")
        self._check_length(ids.shape[-1], "input_ids")
        return ids.astype(np.int64, copy=False)

    def _check_length(self, length: int, what: str) -> None:
        if length > self.config.max_positions:
            got = f"{length}" if what == "input_ids" else f"{length} ({what})"
            raise fail("input_ids", f"at most {self.config.max_positions} tokens, the model's positions", got)

    def _layers(self, layers: Any) -> list[int]:
        n = self.config.num_layers
        chosen = list(range(n)) if layers is None else [layers] if not isinstance(layers, (list, tuple)) else layers
        result = []
        for layer in chosen:
            if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not -n <= layer < n:
                raise fail("layers", f"layer indices in {-n}..{n - 1}", repr(layer))
            result.append(int(layer) % n)
        return sorted(set(result))

    def _padding(self, attention_mask: Any, shape: tuple[int, ...]) -> Array | None:
        if attention_mask is None:
            return None
        mask = np.asarray(attention_mask)
        mask = mask if mask.ndim == 2 else mask[None]  # (L,) -> (1, L)
        if mask.shape != shape:
            raise fail("attention_mask", f"the ids' shape {shape}", f"shape {np.shape(attention_mask)}")
        if not np.isin(mask, (0, 1)).all():
            raise fail("attention_mask", "1 (a token) and 0 (padding)", f"values {np.unique(mask)[:5].tolist()}")
        return mask.astype(bool)

    def _token_types(self, token_type_ids: Any, shape: tuple[int, ...]) -> Array | None:
        if token_type_ids is None:
            return None
        if self.network.token_types is None:
            raise fail("token_type_ids", "None: only BERT has token types", "ids")
        types = np.asarray(token_type_ids)
        types = types if types.ndim == 2 else types[None]  # (L,) -> (1, L)
        n = len(self.network.token_types)
        if types.shape != shape or types.dtype.kind not in "iu":
            raise fail("token_type_ids", f"integers of the ids' shape {shape}", f"{types.dtype} of shape {types.shape}")
        if types.min() < 0 or types.max() >= n:
            raise fail("token_type_ids", f"ids in 0..{n - 1}", f"{types.min()}..{types.max()}")
        return types


def _layer_trace(
    h: Array, q: Array, k: Array, v: Array, weights: Array, out: Array, projected: Array, block: Block,
    mask: Array | None, is_causal: bool,
) -> Trace:  # fmt: skip
    """One layer's Trace for sequence 0: q (H, L, E), k and v (Hk, S, E) repeated to H."""
    group = q.shape[0] // k.shape[0]
    K, V = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)  # (Hk, S, E) -> (H, S, E)
    with np.errstate(over="ignore", invalid="ignore"):
        scores = q @ np.swapaxes(K, -1, -2)  # (H, L, S)
        scaled = scores * block.scale
    mask_scores_(scaled, None if mask is None else mask[0] if mask.ndim == 4 else mask, is_causal)
    return Trace(h, q, K, V, scores, block.scale, scaled, weights, out, None, projected)


def _pick(logits: Array, temperature: float, generator: np.random.Generator | None) -> int:
    """The next token: argmax, or a draw from softmax(logits / temperature)."""
    if generator is None:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max())
    return int(generator.choice(len(p), p=p / p.sum()))
