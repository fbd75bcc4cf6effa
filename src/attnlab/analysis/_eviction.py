"""What a KV cache may drop, replayed: a model generates greedily after a prompt with its
whole cache, then each policy of :mod:`._kv_policies` replays the generation with only the
keys it keeps, and each generated token's next-token distribution is compared.

The replay is exact and runs in one forward per policy and budget. Eviction begins after
the prompt, whose hidden states every policy computes with full attention (as a real
prefill does), so the prompt runs once, into a KV cache. Teacher-forced on the full run's
tokens, the evicted run is then the forward of the T generated tokens over that cache in
which generated token t's query, in each layer and head, sees only the keys its policy
keeps at step t (the network's hook ``Recorder.attention_inputs``, attnlab.models._network): the
generated rows' hidden states, keys and values are the evicted run's own, row t depending
only on rows ≤ t. H2O decides at step t from that step's weights over the kept keys;
within a layer those depend only on the layer's q and k, which the hook is given, so it
decides row by row there, recomputing the weights from q·k·scale (in float64; the engine's
own differ by rounding only). The prompt's weights that H2O and SnapKV read come from the
same hook during the prompt's forward (adding no rule), chunk by chunk: never n × n.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._validation import Array, fail, is_integer
from ..models._generate import KVCache
from ..models._network import Network, Recorder
from ._kv_policies import POLICIES, h2o, snapkv, streaming_llm

__all__ = ["Eviction", "evict", "kl_divergence"]

BUDGETS = (0.1, 0.25, 0.5)


@dataclass(frozen=True)
class Eviction:
    """The replay's result (:func:`evict`): P policies × B budgets over T generated tokens.

    Attributes:
        tokens: the S = n + T tokens read, readable (the prompt's, then the generated ones).
        prompt: n, the prompt's tokens.
        policies, budgets: the policies' names and the budgets, fractions of n.
        keys: (B,) the keys each budget keeps, ⌊budget · n⌋.
        kl: (P, B, T) float64: KL(full ‖ evicted) in nats of the next-token distribution
            after each generated token.
        agree: (P, B, T) bool: whether both distributions' most likely token is the same.
        kept: (P, B, layers, Hk, S) bool: the keys the last generated token's query sees,
            per layer and key/value head.
        settings: the policies' parameters (sinks, window, kernel, pool).
    """

    tokens: list[str]
    prompt: int
    policies: tuple[str, ...]
    budgets: tuple[float, ...]
    keys: Array
    kl: Array
    agree: Array
    kept: Array
    settings: dict[str, Any] = field(default_factory=dict)

    def rows(self) -> list[dict[str, Any]]:
        """One row per policy and budget: its keys, mean and largest KL, top-1 agreement."""
        return [
            {
                "policy": policy, "budget": budget, "keys": int(self.keys[b]),
                "mean_kl": float(self.kl[p, b].mean()), "max_kl": float(self.kl[p, b].max()),
                "top1": float(self.agree[p, b].mean()),
            }
            for p, policy in enumerate(self.policies)
            for b, budget in enumerate(self.budgets)
        ]  # fmt: skip

    def render(self) -> str:
        """The rows as a markdown table."""
        T = self.kl.shape[-1]
        lines = [
            f"{self.prompt} prompt tokens, {T} generated; KL(full ‖ evicted) in nats per generated token",
            "",
            "keys: the budget, of the prompt's keys. StreamingLLM and H2O keep that many as generation goes "
            "(a cache of fixed size); SnapKV keeps that many of the prompt's and every generated key (it "
            f"compresses the prompt once, as its paper and kvpress do): up to {T} more at the last token.",
            "",
            "| policy | budget | keys | mean KL | max KL | top-1 agreement |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for row in self.rows():
            lines.append(
                f"| {row['policy']} | {row['budget']:.0%} | {row['keys']} | {row['mean_kl']:.4f} "
                f"| {row['max_kl']:.4f} | {row['top1']:.1%} |"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The rows, the per-token KL and agreement, the generated tokens and the settings (JSON)."""
        return {
            "prompt": self.prompt, "generated": self.tokens[self.prompt :], "settings": self.settings,
            "rows": self.rows(), "kl": self.kl.tolist(), "agree": self.agree.tolist(),
        }  # fmt: skip


def kl_divergence(full: Array, evicted: Array) -> Array:
    """KL(p ‖ q) = Σ p (log p − log q) in nats, row by row, p = softmax(full) and
    q = softmax(evicted), logits (…, vocab) → (…,), in float64."""
    log_p, log_q = (_log_softmax(np.asarray(x, dtype=np.float64)) for x in (full, evicted))
    return np.sum(np.exp(log_p) * (log_p - log_q), axis=-1)


def _log_softmax(x: Array) -> Array:
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def evict(
    runner: Any, text: Any, *, policies: Sequence[str] = POLICIES, budgets: Sequence[float] = BUDGETS,
    generate: int = 32, sinks: int = 4, window: int = 32, kernel: int = 5, pool: str = "avg", chunk: int = 256,
) -> Eviction:  # fmt: skip
    """Replay a greedy generation of ``generate`` tokens after ``text`` with each policy
    keeping each budget of the cache (see the module; the policies in
    :mod:`attnlab.analysis._kv_policies`).

    Args:
        runner: a causal language model that attnlab runs in NumPy (:func:`attnlab.load_model`).
        text: the prompt, a text or ids.
        policies: among "streaming_llm", "h2o", "snapkv".
        budgets: fractions in (0, 1] of the prompt's n keys: each keeps ⌊budget · n⌋.
        generate: T, the tokens generated (fewer where the model ends the text).
        sinks: StreamingLLM's first keys kept.
        window: SnapKV's observation window, the prompt's last queries that vote.
        kernel: the width of SnapKV's pooling of the votes.
        pool: the kind of that pooling, "avg" or "max".
        chunk: the prompt's queries per forward where H2O reads its weights (a layer's
            weights of a chunk, (H, chunk, n) float64, are the memory it costs).

    Returns:
        An :class:`Eviction`.

    Raises:
        ArgumentError: a model that is not attnlab's NumPy causal language model (named
            ``model``); an unknown policy, a budget outside (0, 1], too few keys for a
            policy's budget, a prompt and ``generate`` past the model's positions.
    """
    network = _network(runner)
    policies = _policies(policies)
    budgets = tuple(_budget(b) for b in budgets)
    if not is_integer(generate) or generate < 1:
        raise fail("generate", "1 or more tokens", repr(generate))
    if not is_integer(chunk) or chunk < 1:
        raise fail("chunk", "1 or more queries per forward", repr(chunk))
    ids = runner.ids(text)
    n = len(ids)
    if runner.positions is not None and n + generate > runner.positions:
        raise fail("generate", f"at most {runner.positions - n} tokens after the {n} of the prompt", generate)
    keys = np.array([math.floor(b * n) for b in budgets])
    if keys.min() < 1:
        raise fail("budgets", f"fractions that keep at least one of the prompt's {n} keys", min(budgets))
    for budget in keys:
        _refuse_settings(policies, n, int(budget), sinks, window, kernel, pool)
    config = network.config
    cache = KVCache(config, 1, n + generate, network.embed.weight.value.dtype, generate)
    received, voted, first = _prefill(
        network, ids, cache, "h2o" in policies, window if "snapkv" in policies else 0, chunk
    )
    generated = _greedy(network, cache, first, generate, config.eos_token_id)
    T, S = len(generated), n + len(generated)
    full = _teacher_forced(network, cache, n, generated, None)
    group = config.num_attention_heads // config.num_key_value_heads
    shape = (len(policies), len(budgets))
    kl, agree = np.zeros((*shape, T)), np.zeros((*shape, T), dtype=bool)
    kept = np.zeros((*shape, config.num_hidden_layers, config.num_key_value_heads, S), dtype=bool)
    for p, policy in enumerate(policies):
        for b, budget in enumerate(keys):
            rule: Callable[[int, Array, Array], Array]
            if policy == "streaming_llm":
                rule = _every_layer(streaming_llm(n, T, int(budget), sinks))  # (T, S)
            elif policy == "snapkv":
                rule = _snapkv_rule(voted, window, int(budget), kernel, pool, T)
            else:
                rule = _h2o_rule(received, network, int(budget), group)
            recorded = _Seen(rule, group, kept[p, b])
            logits = _teacher_forced(network, cache, n, generated, recorded)
            kl[p, b] = kl_divergence(full, logits)
            agree[p, b] = full.argmax(axis=-1) == logits.argmax(axis=-1)
    tokens = runner.tokens(np.concatenate([ids, generated]))
    settings = {"sinks": sinks, "window": window, "kernel": kernel, "pool": pool, "generated": T}
    return Eviction(tokens, n, policies, budgets, keys, kl, agree, kept, settings)


def _refuse_settings(
    policies: Sequence[str], n: int, budget: int, sinks: int, window: int, kernel: int, pool: str
) -> None:
    """Each policy's refusals of its settings, before any forward: each run on no step yet."""
    if "streaming_llm" in policies:
        streaming_llm(n, 0, budget, sinks)
    if "snapkv" in policies:
        snapkv(np.zeros((1, 0, n)), window, budget, kernel, pool)  # (heads, rows, n): no vote
    if "h2o" in policies:
        h2o(np.zeros((1, n)), np.zeros((1, 1, 0, n)), budget)  # (heads, G, T, S): no step


class _Seen:
    """The hook (:attr:`Recorder.attention_inputs`) of one policy: its rule gives the keys each
    generated query sees per key/value head, (T, S) or (Hk, T, S); the hook repeats them
    to the G query heads of each and records the last query's in ``kept`` (layers, Hk, S)."""

    def __init__(self, rule: Callable[[int, Array, Array], Array], group: int, kept: Array) -> None:
        self.rule, self.group, self.kept = rule, group, kept

    def __call__(self, layer: int, q: Array, k: Array, rules: dict[str, Any]) -> Array:
        seen = self.rule(layer, q, k)
        self.kept[layer] = seen[..., -1, :]  # (…, T, S) -> (Hk, S), broadcast
        if seen.ndim == 2:
            return seen[None, None]  # (T, S) -> (1, 1, T, S): every head
        return np.repeat(seen, self.group, axis=0)[None]  # (Hk, T, S) -> (1, H, T, S), head h on h // G


def _every_layer(seen: Array) -> Callable[[int, Array, Array], Array]:
    """The rule of a policy whose keys (T, S) are the same in every layer and head."""
    return lambda layer, q, k: seen


def _snapkv_rule(voted: Array, window: int, budget: int, kernel: int, pool: str, T: int) -> Callable[..., Array]:
    """SnapKV's keys per layer: its prompt keys from the window's vote, every generated key
    up to the query's own."""
    n = voted.shape[-1]
    causal = np.tril(np.ones((T, T), dtype=bool))  # (T, T): generated key j ≤ query t

    def rule(layer: int, q: Array, k: Array) -> Array:
        prompt = snapkv(voted[layer], window, budget, kernel, pool)  # (Hk, n)
        heads = prompt.shape[0]
        return np.concatenate(
            [np.broadcast_to(prompt[:, None], (heads, T, n)), np.broadcast_to(causal, (heads, T, T))], axis=-1
        )  # (Hk, T, n + T)

    return rule


def _h2o_rule(received: Array, network: Network, budget: int, group: int) -> Callable[..., Array]:
    """H2O's keys per layer, decided from the layer's own queries and keys in the evicted run."""

    def rule(layer: int, q: Array, k: Array) -> Array:
        _, _, T, E = q.shape  # q (1, H, T, E), k (1, Hk, S, E)
        Hk = k.shape[1]
        queries = q[0].astype(np.float64).reshape(Hk, group, T, E)  # (H, T, E) -> (Hk, G, T, E)
        scores = queries @ np.swapaxes(k[0].astype(np.float64), -1, -2)[:, None]  # (Hk, G, T, S)
        scores *= network.blocks[layer].attn.scale
        return h2o(received[layer], scores, budget)

    return rule


class _PromptWeights:
    """The prompt's hook (:attr:`Recorder.attention_inputs`, adding no rule): from each layer's q
    and k, the causal weights softmax(q·k·scale) of a chunk's queries, in float64, summed
    into each key's attention ``received`` (layers, Hk, n) over the queries and a group's
    heads where ``accumulate``, and the last ``window`` queries' kept in ``voted``
    (layers, Hk, G, window, n). The engine runs its own path, without weights."""

    def __init__(self, network: Network, n: int, accumulate: bool, window: int) -> None:
        config = network.config
        layers, Hk = config.num_hidden_layers, config.num_key_value_heads
        self.network, self.n, self.accumulate, self.window = network, n, accumulate, window
        self.group = config.num_attention_heads // Hk
        self.received, self.voted = np.zeros((layers, Hk, n)), np.zeros((layers, Hk, self.group, window, n))

    def __call__(self, layer: int, q: Array, k: Array, rules: dict[str, Any]) -> None:
        _, _, c, E = q.shape  # q (1, H, c, E): the chunk's queries, positions stop − c..stop − 1
        Hk, stop = k.shape[1], k.shape[2]  # k (1, Hk, stop, E)
        first = stop - c if self.accumulate else max(self.n - self.window, stop - c)  # the first query read
        if first >= stop:
            return
        rows = (
            q[0, :, first - (stop - c) :].astype(np.float64).reshape(Hk, self.group, stop - first, E)
        )  # (H, r, E) -> (Hk, G, r, E)
        scores = rows @ np.swapaxes(k[0].astype(np.float64), -1, -2)[:, None]  # (Hk, G, r, E) @ (Hk, 1, E, stop)
        scores *= self.network.blocks[layer].attn.scale
        scores[..., np.arange(first, stop)[:, None] < np.arange(stop)] = -np.inf  # the causal rule: j ≤ i
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)  # (Hk, G, r, stop)
        if self.accumulate:
            self.received[layer, :, :stop] += weights.sum(axis=(1, 2))
        window = max(self.n - self.window, first)  # the window's queries among them
        if self.window and window < stop:
            start = window - (self.n - self.window)  # the window's rows window..stop − 1: its rows start..
            self.voted[layer, :, :, start : start + stop - window, :stop] = weights[:, :, window - first :]


def _prefill(
    network: Network, ids: Array, cache: KVCache, accumulate: bool, window: int, chunk: int
) -> tuple[Array, Array, Array]:
    """The prompt's forward into ``cache``, ``chunk`` queries at a time (the same causal
    attention as one forward) where its weights are read (:class:`_PromptWeights`). Returns
    each key's attention received (layers, Hk, n), the window's weights (layers, Hk,
    G·window, n) and the last position's logits (vocab,)."""
    n, reads = len(ids), _PromptWeights(network, len(ids), accumulate, window)
    step = chunk if accumulate else n  # the window alone: its queries in one forward
    for start in range(0, n, step):
        record = Recorder(attention_inputs=reads) if accumulate or window else None
        last = network.forward(ids[None, start : start + step], None, None, cache, record, None)  # (1, c, D)
    logits = network.logits(last[0, -1])
    assert logits is not None  # a causal model has a head
    layers, Hk, G = reads.voted.shape[:3]
    return reads.received, reads.voted.reshape(layers, Hk, G * window, n), logits  # (…, G, w, n) -> (…, G·w, n)


def _greedy(network: Network, cache: KVCache, first: Array, steps: int, ends: tuple[int, ...]) -> Array:
    """Up to ``steps`` tokens, each the most likely after the last, ``first`` the prompt's
    logits, the cache holding the prompt; ends after an end-of-sequence token."""
    tokens = [int(np.argmax(first))]
    while len(tokens) < steps and tokens[-1] not in ends:
        last = network.forward(np.array([tokens[-1:]]), None, None, cache, None, None)  # (1, 1, D)
        logits = network.logits(last[0, -1])
        assert logits is not None
        tokens.append(int(np.argmax(logits)))
    return np.asarray(tokens, dtype=np.int64)


def _teacher_forced(network: Network, cache: KVCache, n: int, generated: Array, seen: _Seen | None) -> Array:
    """The next-token logits (T, vocab) float64 after each of the T generated tokens, read
    in one forward over the cache's n prompt positions, its queries seeing what ``seen``
    lets them (None: every earlier key)."""
    cache.length = n  # rewound: the generated positions are written again, by this run
    record = None if seen is None else Recorder(attention_inputs=seen)
    hidden = network.forward(generated[None], None, None, cache, record, None)  # (1, T, D)
    logits = network.logits(hidden[0])
    assert logits is not None
    return logits.astype(np.float64)


def _network(runner: Any) -> Network:
    """The NumPy network of a causal language model's runner.

    Raises:
        ArgumentError: anything else (named ``model``).
    """
    model = getattr(runner, "model", None)
    network = getattr(model, "network", None)
    if getattr(runner, "backend", None) != "numpy" or not isinstance(network, Network):
        name = getattr(runner, "name", type(runner).__name__)
        raise fail("model", "a causal language model that attnlab runs in NumPy (attnlab.load_model)", name)
    if not (runner.causal and runner.has_head):
        raise fail("model", "a causal language model, which generates text", f"{runner.name}, {runner.description}")
    if network.config.sliding_window is not None:  # the policies' weights would have to follow the window
        raise fail("model", "a model whose every layer is full attention", f"{runner.name}, with sliding windows")
    return network


def _policies(given: Sequence[str]) -> tuple[str, ...]:
    names = (given,) if isinstance(given, str) else tuple(given)
    unknown = [name for name in names if name not in POLICIES]
    if unknown or not names or len(set(names)) != len(names):
        raise fail("policies", f"distinct names among {', '.join(POLICIES)}", repr(given))
    return names


def _budget(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise fail("budgets", "fractions of the cache in (0, 1]", repr(value))
    return float(value)
