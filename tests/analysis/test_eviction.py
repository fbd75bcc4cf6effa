"""The KV cache policies against their papers' definitions, written here as plain loops over
dense weights, and the eviction replay against a real step-by-step decode whose cache
holds only the kept keys and values (the oracle), KL and top-1 computed by hand."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from attnlab import analysis, load_model, models
from attnlab._exceptions import ArgumentError
from attnlab.analysis._kv_policies import h2o, pooled, snapkv, streaming_llm
from attnlab.models._network import Recorder

# ---------------------------------------------------------------- the papers' definitions


def streaming_oracle(n, steps, budget, sinks):
    """StreamingLLM's rolling cache: the sinks stay, the oldest other key leaves when full."""
    cache, seen = list(range(n)), np.zeros((steps, n + steps), dtype=bool)
    while len(cache) > budget:
        cache.pop(sinks)
    for t in range(steps):
        cache.append(n + t)
        seen[t, cache] = True
        if len(cache) > budget:
            cache.pop(sinks)
    return seen


def pool_oracle(votes, kernel, pool):
    half, out = kernel // 2, []
    for j in range(len(votes)):
        cells = [votes[i] for i in range(j - half, j + half + 1) if 0 <= i < len(votes)]
        out.append(max(cells) if pool == "max" else sum(cells) / kernel)  # avg: the padding's zeros count
    return out


def best(scores, count, among):
    """The ``count`` positions of ``among`` with the largest scores, ties to the lower."""
    return sorted(among, key=lambda j: (-scores[j], j))[:count]


def snapkv_oracle(weights, window, budget, kernel, pool):
    """SnapKV: the window's queries (rows) vote on the prefix, pooled; top budget − w + window."""
    heads, rows, n = weights.shape
    kept = np.zeros((heads, n), dtype=bool)
    for h in range(heads):
        votes = [sum(weights[h, r, j] for r in range(rows)) for j in range(n - window)]
        smooth = pool_oracle(votes, kernel, pool)
        kept[h, best(smooth, budget - window, range(n - window))] = True
        kept[h, n - window :] = True
    return kept


def h2o_oracle(accumulated, scores, budget, recent):
    """H2O's greedy eviction: after each step's attention over the cache and the new key,
    the key of least accumulated attention outside the recent window leaves."""
    heads, group, steps, S = scores.shape
    n = S - steps
    seen = np.zeros((heads, steps, S), dtype=bool)
    for h in range(heads):
        acc = {j: accumulated[h, j] for j in range(n)}
        cache = set(range(n - recent, n)) | set(best(acc, budget - recent, range(n - recent)))
        for t in range(steps):
            p = n + t
            cache.add(p)
            acc[p] = 0.0
            seen[h, t, sorted(cache)] = True
            for g in range(group):
                total = sum(math.exp(scores[h, g, t, j]) for j in cache)
                for j in cache:
                    acc[j] += math.exp(scores[h, g, t, j]) / total
            if len(cache) > budget:
                keep_recent = {j for j in cache if j > p - recent}
                cache = keep_recent | set(best(acc, budget - recent, cache - keep_recent))
    return seen


# ---------------------------------------------------------------- the policies


@pytest.mark.parametrize(("budget", "sinks"), [(6, 4), (10, 2), (12, 0), (30, 4)])
def test_streaming_llm_is_the_rolling_cache_with_its_sinks(budget, sinks):
    np.testing.assert_array_equal(streaming_llm(24, 8, budget, sinks), streaming_oracle(24, 8, budget, sinks))


@pytest.mark.parametrize("pool", ["avg", "max"])
@pytest.mark.parametrize(("window", "budget", "kernel"), [(4, 6, 3), (6, 12, 5), (3, 10, 1)])
def test_snapkv_keeps_the_pooled_votes_best_keys_and_the_window(pool, window, budget, kernel):
    weights = np.random.default_rng(window + budget).dirichlet(np.ones(24), size=(3, 2 * window))  # (3, 2w, 24)
    np.testing.assert_array_equal(
        snapkv(weights, window, budget, kernel, pool), snapkv_oracle(weights, window, budget, kernel, pool)
    )


@pytest.mark.parametrize("pool", ["avg", "max"])
def test_pooling_is_torchs_with_its_padding(pool):
    torch = pytest.importorskip("torch")
    votes = np.random.default_rng(1).random((2, 17))
    f = torch.nn.functional
    expected = (f.avg_pool1d if pool == "avg" else f.max_pool1d)(torch.tensor(votes), 5, stride=1, padding=2)
    np.testing.assert_allclose(pooled(votes, 5, pool), expected.numpy(), rtol=1e-12)


@pytest.mark.parametrize(("budget", "recent", "group"), [(6, 3, 1), (8, 2, 2), (5, 0, 1), (7, 7, 2)])
def test_h2o_evicts_greedily_by_accumulated_attention(budget, recent, group):
    rng = np.random.default_rng(budget)
    n, steps = 24, 8
    accumulated = rng.random((2, n)) * 3
    scores = rng.normal(size=(2, group, steps, n + steps)) * 2
    np.testing.assert_array_equal(
        h2o(accumulated, scores, budget, recent), h2o_oracle(accumulated, scores, budget, recent)
    )


def test_ties_keep_the_lower_position():
    weights = np.ones((1, 2, 12))  # every vote equal
    kept = snapkv(weights, 2, 5, 1, "avg")
    np.testing.assert_array_equal(np.flatnonzero(kept[0]), [0, 1, 2, 10, 11])
    seen = h2o(np.zeros((1, 12)), np.zeros((1, 1, 1, 13)), 4, 2)
    np.testing.assert_array_equal(np.flatnonzero(seen[0, 0]), [0, 1, 10, 11, 12])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: streaming_llm(10, 2, 4, 4), "budget: expected more keys than the 4 sinks"),
        (lambda: snapkv(np.ones((1, 4, 10)), 4, 4), "window: expected 1 to 3"),
        (lambda: pooled(np.ones(5), 4, "avg"), "kernel: expected an odd kernel size"),
        (lambda: pooled(np.ones(5), 3, "mean"), 'pool: expected "max" or "avg"'),
        (lambda: h2o(np.ones((1, 4)), np.ones((1, 1, 1, 5)), 3, 4), "recent: expected 0 to the budget, 3"),
    ],
)
def test_bad_settings_are_refused_by_name(call, match):
    with pytest.raises(ArgumentError, match=match):
        call()


# ---------------------------------------------------------------- the replay against a real evicted decode


class PrunedCache:
    """A KV cache that keeps every key and value but hands each layer's attention only the
    positions ``visible[layer]`` (Hk, count) of each key/value head, in position order."""

    def __init__(self, layers):
        self.keys, self.values, self.length, self.visible = [None] * layers, [None] * layers, 0, None

    def extend(self, layer, k, v):
        if self.keys[layer] is None:
            self.keys[layer], self.values[layer] = k, v
        else:
            self.keys[layer] = np.concatenate([self.keys[layer], k], axis=2)
            self.values[layer] = np.concatenate([self.values[layer], v], axis=2)
        if self.visible is None:
            return self.keys[layer], self.values[layer]
        index = self.visible[layer][:, :, None]  # (Hk, count, 1)
        picked = [np.take_along_axis(x[layer][0], index, axis=1)[None] for x in (self.keys, self.values)]
        return picked[0], picked[1]  # (1, Hk, count, E)


def evicted_decode(network, prompt, tokens, policy, budget, settings):
    """The oracle: the prompt with full attention, then each generated token one step at a
    time over only what the policy (its paper's definition above) keeps, per layer and
    key/value head. Returns the logits (T, vocab) and the last step's visible keys (layers, Hk, S)."""
    config = network.config
    layers, H, Hk = config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads
    G, n, T = H // Hk, len(prompt), len(tokens)
    cache = PrunedCache(layers)
    record = Recorder(attentions=True)
    network.forward(prompt[None], None, None, cache, record, None)
    dense = [w[0].reshape(Hk, G, n, n) for w in record.weights]  # (H, n, n) -> (Hk, G, n, n)
    window, sinks = settings["window"], settings["sinks"]
    caches, acc = [], []
    for layer in range(layers):
        if policy == "streaming_llm":
            kept = [set(np.flatnonzero(streaming_oracle(n, 1, budget, sinks)[0, :n]))] * Hk
        elif policy == "snapkv":
            window_rows = dense[layer][:, :, n - window :].reshape(Hk, G * window, n)
            mask = snapkv_oracle(window_rows, window, budget, settings["kernel"], settings["pool"])
            kept = [set(np.flatnonzero(mask[h])) for h in range(Hk)]
        else:
            received = dense[layer].sum(axis=(1, 2))  # (Hk, n): each key's attention over the prompt
            acc.append([dict(enumerate(received[h])) for h in range(Hk)])
            r = budget // 2
            kept = [set(range(n - r, n)) | set(best(acc[layer][h], budget - r, range(n - r))) for h in range(Hk)]
        caches.append(kept)
    logits, last_seen = [], np.zeros((layers, Hk, n + T), dtype=bool)
    for t, token in enumerate(tokens):
        p = n + t
        for layer in range(layers):
            for h in range(Hk):
                caches[layer][h] = set(caches[layer][h]) | {p}
        cache.visible = [np.array([sorted(caches[layer][h]) for h in range(Hk)]) for layer in range(layers)]
        record = Recorder(attentions=True)
        hidden = network.forward(np.array([[token]]), None, None, cache, record, None)
        logits.append(network.logits(hidden[0, -1]))
        for layer in range(layers):
            weights = record.weights[layer][0, :, 0].reshape(Hk, G, -1)  # (H, count) -> (Hk, G, count)
            for h in range(Hk):
                order = sorted(caches[layer][h])
                if t == T - 1:
                    last_seen[layer, h, order] = True
                if policy == "streaming_llm":
                    if len(order) > budget:
                        caches[layer][h] = set(order[:sinks] + order[sinks + 1 :])
                elif policy == "h2o":
                    a = acc[layer][h]
                    a[p] = 0.0
                    for c, j in enumerate(order):
                        a[j] += weights[h, :, c].sum()
                    if len(order) > budget:
                        r = budget // 2
                        recent = {j for j in order if j > p - r}
                        caches[layer][h] = recent | set(best(a, budget - r, set(order) - recent))
    return np.array(logits), last_seen


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("transformers")
    from checkpoints import tiny_model

    path = tmp_path_factory.mktemp("evict-llama")
    tiny_model("llama", initializer_range=0.3).save_pretrained(path)  # weights large enough for sharp attention
    return load_model(models.load(path, dtype=np.float64))  # float64: the two runs agree to rounding


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


SETTINGS = {
    "sinks": 2,
    "window": 5,
    "kernel": 3,
    "pool": "max",
}  # the window: rows 19..23, two of them in the chunk 18..20
PROMPT = np.random.default_rng(7).integers(0, 300, 24)


@pytest.fixture(scope="module")
def replayed(tiny):
    # chunks of 3 queries: the prompt's weights read over several forwards, the window across two
    return analysis.evict(tiny, PROMPT, budgets=[0.25, 0.5], generate=8, chunk=3, **SETTINGS)


@pytest.mark.parametrize("policy", ["streaming_llm", "h2o", "snapkv"])
def test_the_replay_is_a_real_step_by_step_evicted_decode(tiny, replayed, policy):
    network, p = tiny.model.network, replayed.policies.index(policy)
    ids, logits = tiny.model.generate(PROMPT, 9, output_logits=True)  # the plain greedy generation
    tokens, full = ids[24:32], logits[1:]  # the distributions after each of the 8 generated tokens
    assert tiny.tokens(tokens) == replayed.tokens[24:]
    for b, budget in enumerate([6, 12]):
        assert replayed.keys[b] == budget
        evicted, last_seen = evicted_decode(network, PROMPT, tokens, policy, budget, SETTINGS)
        p_full, p_evicted = softmax(full), softmax(evicted)
        kl = (p_full * (np.log(p_full) - np.log(p_evicted))).sum(axis=-1)
        assert kl.max() > 1e-6  # something was dropped
        np.testing.assert_allclose(replayed.kl[p, b], kl, rtol=1e-7, atol=1e-13)
        np.testing.assert_array_equal(replayed.agree[p, b], full.argmax(-1) == evicted.argmax(-1))
        np.testing.assert_array_equal(replayed.kept[p, b], last_seen)


def test_the_replay_refuses_bad_input_by_name(tiny):
    with pytest.raises(ArgumentError, match="policies: expected distinct names"):
        analysis.evict(tiny, [1, 2, 3], policies=["lru"])
    with pytest.raises(ArgumentError, match=r"budgets: expected fractions of the cache in \(0, 1\]"):
        analysis.evict(tiny, [1, 2, 3], budgets=[25])
    with pytest.raises(ArgumentError, match="budgets: expected fractions that keep at least one of the prompt's 24"):
        analysis.evict(tiny, list(range(24)), budgets=[0.5, 0.01], generate=8)
    with pytest.raises(ArgumentError, match="window: expected 1 to 5"):
        analysis.evict(tiny, list(range(24)), budgets=[0.25], window=6, generate=8)
    with pytest.raises(ArgumentError, match="generate: expected at most 16 tokens after the 24"):
        analysis.evict(tiny, list(range(24)), generate=17)
    with pytest.raises(ArgumentError, match="model: expected a causal language model that attnlab runs in NumPy"):
        analysis.evict(object(), [1, 2, 3])


def test_a_model_with_sliding_windows_is_refused(tmp_path):
    from checkpoints import tiny_model

    tiny_model("mistral").save_pretrained(tmp_path)
    with pytest.raises(ArgumentError, match="model: expected a model whose every layer is full attention"):
        analysis.evict(load_model(tmp_path), list(range(20)), generate=4)


def test_the_table_says_each_policy_and_budget(tiny):
    result = analysis.evict(tiny, list(range(3, 27)), budgets=[0.5], generate=4, sinks=2, window=4, kernel=3)
    table = result.render()
    assert "24 prompt tokens, 4 generated" in table
    assert "SnapKV keeps that many of the prompt's and every generated key" in table and "up to 4 more" in table
    for policy in ("streaming_llm", "h2o", "snapkv"):
        assert f"| {policy} | 50% | 12 |" in table
    assert [row["policy"] for row in result.to_dict()["rows"]] == ["streaming_llm", "h2o", "snapkv"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


@pytest.mark.slow
def test_on_smollm2_the_replay_is_the_step_by_step_evicted_decode():
    """The real model (float32, GQA 9 → 3 heads) at 128 prompt tokens of Python's textwrap.py."""
    import textwrap
    from pathlib import Path

    from checkpoints import smollm2_gguf

    runner = load_model(smollm2_gguf())
    prompt = runner.ids(Path(textwrap.__file__).read_text(encoding="utf-8"), cut=True)[:128]
    settings = {"sinks": 4, "window": 8, "kernel": 5, "pool": "avg"}
    result = analysis.evict(runner, prompt, budgets=[0.25], generate=4, chunk=48, **settings)
    ids, logits = runner.model.generate(prompt, 5, output_logits=True)
    tokens, full = ids[128:132], logits[1:].astype(np.float64)
    for p, policy in enumerate(result.policies):
        evicted, last_seen = evicted_decode(runner.model.network, prompt, tokens, policy, 32, settings)
        p_full, p_evicted = softmax(full), softmax(evicted.astype(np.float64))
        kl = (p_full * (np.log(p_full) - np.log(p_evicted))).sum(axis=-1)
        np.testing.assert_allclose(result.kl[p, 0], kl, rtol=1e-2, atol=1e-5)  # float32: batched vs one by one
        assert (result.kept[p, 0] != last_seen).mean() < 1e-3, policy  # a float32 near-tie may differ
