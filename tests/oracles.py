"""Shared oracles: the seed program, the one table of tolerances, finite differences, torch's
attention (SDPA, its math backend, autograd written out) as several test modules compare
against it; and the optional modules (torch, ...) that some tests need, which skip where
they are not installed. torch is imported on first use, so that a run without it still
collects every test module."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

SEED_PROGRAM = Path(__file__).parent / "seed" / "seed_program.py"

# The tolerances, by the dtype computed in, against an oracle in float64:
# - atol, rtol: assert_close's (docs/design.md: float64 1e-10 absolute; float32 1e-5
#   absolute and 5e-6 relative);
# - of_scale: relative to the largest magnitude of the expected result (the variants
#   against their torch oracle, tests/engine/test_variants.py);
# - ring: ring attention against torch over the whole sequence, as rtol and atol
#   (tests/distributed/test_distributed.py).
TOLERANCE = {
    np.dtype(np.float64): dict(atol=1e-10, rtol=0, of_scale=1e-12, ring=1e-12),
    np.dtype(np.float32): dict(atol=1e-5, rtol=5e-6, of_scale=2e-5, ring=1e-5),
}


def assert_close(actual: Any, expected: Any, dtype: Any = np.float64) -> None:
    tolerance = TOLERANCE[np.dtype(dtype)]
    np.testing.assert_allclose(
        np.asarray(actual, dtype=np.float64),
        np.asarray(expected, dtype=np.float64),
        atol=tolerance["atol"],
        rtol=tolerance["rtol"],
    )


def numerical_gradient(
    f: Callable[[], float], x: np.ndarray, eps: float = 1e-6, indices: Iterable[tuple[int, ...]] | None = None
) -> np.ndarray:
    """Central differences (f(x + eps·e_i) − f(x − eps·e_i)) / 2·eps of the scalar f() with
    respect to the entries i of x, perturbed in place and restored: every entry, or only
    those in indices (the others stay 0). The result has x's shape."""
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape) if indices is None else indices:
        saved = x[i]
        x[i] = saved + eps
        up = f()
        x[i] = saved - eps
        down = f()
        x[i] = saved
        grad[i] = (up - down) / (2 * eps)
    return grad


def optional_module(name: str) -> ModuleType | None:
    """The module name (e.g. "torch"), or None where it is not installed; the tests that
    use it carry requires(name), so that a run without it skips them."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def requires(name: str) -> pytest.MarkDecorator:
    """Skip the test where the optional module name is not installed (for modules whose
    other tests run without it; a module that needs it throughout uses pytest.importorskip)."""
    return pytest.mark.skipif(optional_module(name) is None, reason=f"{name} is not installed")


class _Torch:
    """torch, imported on its first use by an oracle below."""

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.import_module("torch"), name)


torch: Any = _Torch()


def torch_reference(q, k, v, mask, is_causal, scale, gqa):
    """torch's SDPA for the output and gradients; its math formula for weights and lse."""
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    tmask = None if mask is None else torch.tensor(mask)
    out = torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, tmask, is_causal=is_causal, scale=scale, enable_gqa=gqa
    )
    with torch.no_grad():
        kk = tk
        if gqa:
            kk = tk.repeat_interleave(tq.shape[-3] // tk.shape[-3], -3)
        scores = tq @ kk.transpose(-1, -2) * (scale if scale is not None else q.shape[-1] ** -0.5)
        if tmask is not None:
            scores = scores.masked_fill(~tmask, -torch.inf) if tmask.dtype == torch.bool else scores + tmask
        if is_causal:
            scores = scores.masked_fill(~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(), -torch.inf)
        lse = torch.logsumexp(scores, -1)
        weights = torch.nan_to_num(torch.softmax(scores, -1))  # fully masked rows: 0
    return tq, tk, tv, out, weights.numpy(), lse.numpy()


def torch_math(q, k, v, mask, is_causal):
    """torch's math backend, except that the causal rule overrides a score (as masked_fill
    does) instead of being added to it: a key after the query is never read, even as NaN."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    tq, tk, tv = (torch.tensor(x) for x in (q, k, v))
    if not is_causal:
        with sdpa_kernel(SDPBackend.MATH):
            bias = None if mask is None else torch.tensor(mask)
            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=bias).numpy()
    scores = tq @ tk.transpose(-1, -2) / q.shape[-1] ** 0.5 + (0 if mask is None else torch.tensor(mask))
    later = ~torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
    return (torch.softmax(scores.masked_fill(later, -torch.inf), dim=-1) @ tv).numpy()


def torch_sdpa_with_gradients(q, k, v, grad, **kwargs):
    """torch's SDPA (keywords as its own) on q, k, v and its backward with grad: the output,
    dQ, dK, dV as NumPy arrays."""
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, **kwargs)
    out.backward(torch.tensor(grad))
    return [x.detach().numpy() for x in (out, tq.grad, tk.grad, tv.grad)]


def torch_softmax_gradients(q, k, v, grad_output, scale):  # type: ignore[no-untyped-def]
    """dQ, dK, dV of softmax(scale·Q·Kᵀ)·V by torch's autograd in float64."""
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    output = torch.softmax(tq @ tk.transpose(-1, -2) * scale, dim=-1) @ tv
    output.backward(torch.tensor(grad_output))
    return [t.grad.numpy() for t in (tq, tk, tv)]


def torch_sdpa_blhe(query: object, key: object, value: object, mask: object = None, is_causal: bool = False) -> object:
    """torch's SDPA, its output transposed to (B, L, H, E) as transformers' sdpa returns it."""
    output = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, is_causal=is_causal)
    return output.transpose(1, 2)


def torch_leaf(x: np.ndarray) -> torch.Tensor:
    """x as a float64 torch tensor that requires its gradient."""
    return torch.tensor(x, dtype=torch.float64, requires_grad=True)


def torch_bert_self_attention(x: torch.Tensor, layer: Any, mask: np.ndarray | None) -> tuple[torch.Tensor, list]:
    """BERT's self-attention in torch, from the weights of layer (an attnlab.nn.MultiheadSelfAttention)."""
    params = [torch_leaf(p.value) for p in layer.parameters()]
    wq, bq, wk, bk, wv, bv, wo, bo = params
    B, L, D = x.shape
    H = layer.heads

    def heads(y: torch.Tensor) -> torch.Tensor:
        return y.reshape(B, L, H, D // H).transpose(1, 2)

    linear = torch.nn.functional.linear
    q, k, v = heads(linear(x, wq, bq)), heads(linear(x, wk, bk)), heads(linear(x, wv, bv))
    attn_mask = None if mask is None else torch.tensor(mask)[:, None, None, :]
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    return linear(o.transpose(1, 2).reshape(B, L, D), wo, bo), params


# Runner.statistics against a model's own dense weights (tests/runner, tests/hf): the sizes of
# the statistics, and their tolerance in float32 (of each statistic's scale: log L for an
# entropy, 1 for a weight or a share, L for the attention a key receives and a head's weight
# by distance, max(1, |lse|) for an lse)
TOP_K, SINK_KEYS, LOCAL_KEYS = 3, 2, 3
STATISTICS_TOLERANCE = 2e-6


def dense_statistics(trace: Any, causal: bool) -> dict[str, np.ndarray]:
    """Every statistic of every layer (layers, H, …) in float64 from the trace's dense weights
    P (H, L, L) and scaled scores Z (−∞ where a key is ruled out), as the engine's docstring
    defines them (a sink's weight: what the row's P leave of 1): ties in the top-k to the
    lower key; the local keys the last LOCAL_KEYS a query sees (j <= i when causal, else
    every key); d = i − j in bins 0, ±[2^(k−1), 2^k − 1]."""
    out: dict[str, list] = {}
    for index in range(trace.num_layers):
        layer = trace.layers[index]
        P, Z = layer.weights.astype(np.float64), layer.scaled_scores.astype(np.float64)
        _, L, S = P.shape  # (H, L, S)
        seen = np.isfinite(Z)
        i, j = np.arange(L)[:, None], np.arange(S)[None, :]
        stop = i + 1 if causal else np.full((L, 1), S)
        candidates = np.where(seen, P, -1.0)  # a key the row may not attend: never among its top keys
        order = np.argsort(-candidates, axis=-1, kind="stable")[..., :TOP_K]  # ties: the lower key
        ranked = np.take_along_axis(candidates, order, axis=-1)
        K = (L + S).bit_length()
        d = i - j
        bin_of = np.sign(d) * np.array([[int(abs(x)).bit_length() for x in row] for row in d])  # −K..K
        values = {
            # P_ij = e^(Z_ij − lse_i): Σ_j P_ij = Σ_j e^Z_ij / e^lse_i, 1 − the sink's weight
            "lse": np.log(np.where(seen, np.exp(np.where(seen, Z, 0.0)), 0.0).sum(axis=-1)) - np.log(P.sum(axis=-1)),
            "entropy": -np.where(P > 0, P * np.log(np.where(P > 0, P, 1.0)), 0.0).sum(axis=-1),
            "max_weight": P.max(axis=-1),
            "top_keys": np.where(ranked < 0, -1, order),  # −1 past the keys the row may attend
            "top_weights": np.maximum(ranked, 0.0),
            "sink_share": P[..., :SINK_KEYS].sum(axis=-1),
            "local_share": np.where((j >= stop - LOCAL_KEYS) & (j < stop), P, 0.0).sum(axis=-1),
            "sinks_weight": 1.0 - P.sum(axis=-1),
            "received": P.sum(axis=-2),
            "distance": np.stack([np.where(bin_of == b, P, 0.0).sum(axis=(-2, -1)) for b in range(-K, K + 1)], -1),
        }
        for name, value in values.items():
            out.setdefault(name, []).append(value)
    return {name: np.stack(value) for name, value in out.items()}


def scale_of(name: str, want: np.ndarray, length: int) -> np.ndarray | float:
    """The scale a statistic's error is measured against (see STATISTICS_TOLERANCE)."""
    if name == "entropy":
        return np.log(length)
    if name in ("received", "distance"):
        return length
    if name == "lse":
        return np.maximum(1.0, np.abs(want))
    return 1.0


def assert_model_statistics(stats: Any, trace: Any, causal: bool) -> None:
    """``stats`` (a ModelStatistics) are those of the dense weights of ``trace`` (a
    ModelTrace of the same text): every statistic within the tolerance, the top keys the
    oracle's where the row has no near-tie."""
    expected = dense_statistics(trace, causal)
    got = stats.statistics
    L = len(stats.tokens)
    assert stats.tokens == trace.tokens and stats.ids == trace.ids
    assert (stats.num_layers, stats.num_heads) == (trace.num_layers, trace.num_heads)
    for name, want in expected.items():
        have = getattr(got, name)
        assert have.shape == want.shape, name
        if name == "top_keys":
            continue
        error = np.abs(have.astype(np.float64) - want) / scale_of(name, want, L)
        assert error.max() <= STATISTICS_TOLERANCE, f"{name}: {error.max()}"
    # the keys reported are the oracle's where no two weights are within the tolerance (float32 near-ties)
    weights = np.stack([trace.layers[i].weights for i in range(trace.num_layers)]).astype(np.float64)
    reported = np.where(got.top_keys < 0, 0.0, np.take_along_axis(weights, np.maximum(got.top_keys, 0), axis=-1))
    assert np.abs(reported - got.top_weights).max() <= STATISTICS_TOLERANCE  # each key's own weight
    assert np.array_equal(got.top_keys < 0, expected["top_keys"] < 0) and (np.diff(got.top_weights, axis=-1) <= 0).all()
    gaps = np.diff(np.sort(weights, axis=-1), axis=-1)
    clear = (np.where(gaps > 0, gaps, np.inf).min(axis=-1) > 10 * STATISTICS_TOLERANCE)[..., None]  # (layers, H, L, 1)
    assert np.array_equal(np.where(clear, got.top_keys, 0), np.where(clear, expected["top_keys"], 0))


def assert_rows(runner: Any, text: Any, trace: Any, cells: list[tuple[int, int, int]]) -> None:
    """``runner.row`` of each (layer, head, query) is the trace's dense row, within 1e-6."""
    for layer, head, query in cells:
        row = runner.row(text, layer, head, query)
        want = trace.layers[layer].weights[head, query].astype(np.float64)
        assert row.shape == want.shape and row.dtype == np.float64
        np.testing.assert_allclose(row, want, rtol=0, atol=1e-6, err_msg=f"layer {layer}, head {head}, query {query}")
