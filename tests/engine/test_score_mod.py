"""A variant from outside the package that gives FlexAttention's ``score_mod(score, b, h,
q_idx, kv_idx)``: the scaled scores become what it returns, in every engine, forward and
backward. The forward is held to a float64 oracle written out here and to torch's
flex_attention (eager, on the CPU: forward only); the backward, whose ∂score_mod/∂score the
engines take by complex step (or from the variant), to central finite differences.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import attnlab as al
from attnlab.engine.fused import _engine as _fused
from attnlab.engine.variants import REGISTRY, Context, Rules, ScoreMod, Variant, register
from oracles import numerical_gradient, requires

TEMPERATURE = 0.1  # head h's scores are multiplied by 1 + 0.1·h
BUMP = 0.5  # and 0.5·tanh(score) added: a score function that is not a bias


def warped(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
    """z ↦ z·(1 + 0.1·h) + 0.5·tanh(z) − 0.01·(q − k)²: analytic in z (complex step works)."""
    return score * (1 + TEMPERATURE * h) + BUMP * np.tanh(score) - 0.01 * (q_idx - kv_idx) ** 2


class Warped(Variant):
    """A score function: ``warped`` when its value is True."""

    name = "toy_warped"

    def check(self, value: Any, context: Context) -> bool:
        return bool(value)

    def given(self, checked: Any) -> bool:
        return bool(checked)

    def score_mod(self, checked: Any) -> ScoreMod | None:
        return warped if checked else None

    def record(self, checked: Any) -> bool:
        return bool(checked)


def clipped(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
    """z ↦ |z|: not analytic, so no complex step."""
    return np.abs(score)


class Clipped(Variant):
    """``clipped``, with its derivative given (sign z) when its value is "with derivative"."""

    name = "toy_clipped"

    def score_mod(self, checked: Any) -> ScoreMod | None:
        return None if checked is None else clipped

    def score_mod_derivative(self, checked: Any) -> ScoreMod | None:
        return (lambda score, b, h, q_idx, kv_idx: np.sign(score)) if checked == "with derivative" else None


WARPED = REGISTRY.get("toy_warped") or register(Warped())
CLIPPED = REGISTRY.get("toy_clipped") or register(Clipped())
ENGINES = ["naive", "tiled"] + (["fused"] if _fused.available() else [])


def by_hand(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """(O, lse) in float64: Z = warped(Q·Kᵀ/√E) per head of (B, H, L, E), the causal mask, softmax."""
    H, L, E = q.shape[1:]
    S = k.shape[-2]
    h = np.arange(H)[None, :, None, None]
    i, j = np.arange(L)[:, None], np.arange(S)[None, :]
    raw = q @ np.swapaxes(k, -1, -2) / np.sqrt(E)  # (B, H, L, S)
    z = raw * (1 + TEMPERATURE * h) + BUMP * np.tanh(raw) - 0.01 * (i - j) ** 2
    if causal:
        z = np.where(j > i, -np.inf, z)
    top = z.max(axis=-1, keepdims=True)
    p = np.exp(z - top)
    total = p.sum(axis=-1, keepdims=True)
    return (p / total) @ v, (top + np.log(total))[..., 0]


def arrays(L: int, S: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape) for shape in ((2, 3, L, 8), (2, 3, S, 8), (2, 3, S, 8), (2, 3, L, 8)))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("L, S, causal", [(5, 7, False), (6, 6, True), (600, 600, True)])  # one block, and past 512
def test_a_score_function_is_the_float64_oracles_in_every_engine(engine: str, L: int, S: int, causal: bool) -> None:
    q, k, v, _ = arrays(L, S)
    result = al.attention(q, k, v, engine=engine, rules=Rules(is_causal=causal, extra={"toy_warped": True}))
    output, lse = by_hand(q, k, v, causal)
    np.testing.assert_allclose(result.output, output, rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.lse, lse, rtol=0, atol=1e-12)


@requires("torch")
def test_a_score_function_is_torchs_flex_attention_forward() -> None:
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    def warped_torch(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        h, distance = h.to(score.dtype), (q_idx - kv_idx).to(score.dtype)  # int·float would be float32 in torch
        return score * (1 + TEMPERATURE * h) + BUMP * torch.tanh(score) - 0.01 * distance**2

    q, k, v, _ = arrays(5, 9, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
        expected = flex_attention(*(torch.tensor(x) for x in (q, k, v)), score_mod=warped_torch)
    for engine in ENGINES:
        result = al.attention(q, k, v, engine=engine, rules=Rules(extra={"toy_warped": True}))
        np.testing.assert_allclose(result.output, expected.numpy(), rtol=0, atol=1e-12)


def numerical_gradients(q: np.ndarray, k: np.ndarray, v: np.ndarray, d_out: np.ndarray, rules: Rules) -> list:
    """∂Σ dO∘O/∂x of q, k and v by central differences (float64), on the naive engine."""

    def loss() -> float:
        return float((al.attention(q, k, v, rules=rules, engine="naive").output * d_out).sum())

    return [numerical_gradient(loss, x) for x in (q, k, v)]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_score_functions_backward_is_the_finite_differences(engine: str) -> None:
    q, k, v, d_out = (x[:1, :2] for x in arrays(4, 5, seed=2))  # (1, 2, ·, 8)
    rules = Rules(is_causal=True, causal_alignment="bottom_right", extra={"toy_warped": True})
    grads = al.attention(q, k, v, rules=rules, engine=engine).backward(d_out)
    for got, expected in zip(grads, numerical_gradients(q, k, v, d_out, rules), strict=True):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-8)


def test_a_score_function_that_is_not_analytic_is_refused_unless_it_gives_its_derivative() -> None:
    q, k, v, d_out = (x[:1, :2] for x in arrays(4, 5, seed=3))
    refused = al.attention(q, k, v, rules=Rules(extra={"toy_clipped": "complex step"}))  # the forward needs none
    with pytest.raises(al.ArgumentError, match=r"toy_clipped: expected a score_mod analytic in the score"):
        refused.backward(d_out)
    rules = Rules(extra={"toy_clipped": "with derivative"})
    grads = al.attention(q, k, v, rules=rules, engine="tiled").backward(d_out)
    for got, expected in zip(grads, numerical_gradients(q, k, v, d_out, rules), strict=True):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-8)


def test_a_score_function_numpy_cannot_take_complex_is_refused_in_the_backward_by_its_variant() -> None:
    class Floored(Variant):
        name = "toy_floored"

        def score_mod(self, checked: Any) -> ScoreMod | None:
            return None if checked is None else (lambda score, b, h, q_idx, kv_idx: np.floor(score))

    register(REGISTRY.get("toy_floored") or Floored())
    q, k, v, d_out = (x[:1, :2] for x in arrays(4, 5, seed=3))
    result = al.attention(q, k, v, rules=Rules(extra={"toy_floored": 1}))  # np.floor of real scores: the forward runs
    with pytest.raises(al.ArgumentError, match=r"^toy_floored: expected a score_mod analytic in the score.*TypeError"):
        result.backward(d_out)


def test_a_score_function_that_returns_no_scores_is_refused() -> None:
    class Bad(Variant):
        name = "toy_bad_score_mod"

        def score_mod(self, checked: Any) -> ScoreMod | None:
            return None if checked is None else (lambda score, b, h, q_idx, kv_idx: score[..., :1, :1] > 0)

    register(REGISTRY.get("toy_bad_score_mod") or Bad())
    q = np.ones((2, 3, 4))
    with pytest.raises(al.ArgumentError, match=r"toy_bad_score_mod: expected a score_mod returning real scores"):
        al.attention(q, q, q, rules=Rules(extra={"toy_bad_score_mod": 1}))


def test_a_score_function_shows_in_a_traces_scaled_scores_and_not_in_its_bias() -> None:
    from attnlab.trace import build_trace

    rng = np.random.default_rng(4)
    Q, K, V = (rng.standard_normal((3, 5, 4)) for _ in range(3))
    trace = build_trace(Q[0], Q, K, V, scale=None, tokens=None, rules=Rules(extra={"toy_warped": True}))
    raw = Q @ np.swapaxes(K, -1, -2) / 2.0
    h, i, j = np.arange(3)[:, None, None], np.arange(5)[:, None], np.arange(5)[None, :]
    expected = raw * (1 + TEMPERATURE * h) + BUMP * np.tanh(raw) - 0.01 * (i - j) ** 2
    np.testing.assert_allclose(trace.scaled_scores, expected, rtol=0, atol=1e-12)
    assert trace.bias is None and trace.variants is not None and trace.variants.toy_warped is True
