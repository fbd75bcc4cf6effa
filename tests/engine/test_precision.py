"""The blocked engines' backward around one huge score (issue 24, item 2): where one key
takes a row's whole weight, dZ = P∘(dP − δ) must be exactly 0 there, as softmax's own
backward makes it, so that the huge element cannot multiply a rounding error into dQ or
dK. The oracle is torch's autograd in float64 through softmax(scale·Q·Kᵀ)·V."""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from attnlab.engine.fused import _engine as _fused
from oracles import optional_module, requires, torch_softmax_gradients

torch = optional_module("torch")

BLOCKED = ["tiled", *(["fused"] if _fused.available() else [])]
EVERY_ENGINE = ["naive", *BLOCKED]


def _arrays(seed: int = 0) -> tuple[np.ndarray, ...]:
    """q (2, 600, 16), k and v (2, 530, 16) and dO (2, 600, 16): more than one block of
    queries and of keys."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape) for shape in ((2, 600, 16), (2, 530, 16), (2, 530, 16), (2, 600, 16)))


def _check(q, k, v, grad_output, scale, engine):  # type: ignore[no-untyped-def]
    expected = torch_softmax_gradients(q, k, v, grad_output, scale)
    got = al.attention(q, k, v, scale=scale, engine=engine).backward(grad_output)
    for name, g, e in zip(("dQ", "dK", "dV"), got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-13, err_msg=name)


@requires("torch")
@pytest.mark.parametrize("engine", EVERY_ENGINE)
def test_one_huge_query_element_keeps_dk_exact(engine):
    q, k, v, grad_output = _arrays()
    q[0, 3, 2] = 1e15
    _check(q, k, v, grad_output, 0.25, engine)


@requires("torch")
@pytest.mark.parametrize("engine", EVERY_ENGINE)
def test_one_huge_key_element_keeps_dq_exact(engine):
    q, k, v, grad_output = _arrays(1)
    k[0, 3, 2] = 1e15
    _check(q, k, v, grad_output, 0.25, engine)


@requires("torch")
@pytest.mark.parametrize("engine", EVERY_ENGINE)
def test_huge_scale_gives_exactly_zero_dq_and_dk(engine):
    q, k, v, grad_output = _arrays(2)
    got = al.attention(q, k, v, scale=1e10, engine=engine).backward(grad_output)
    expected = torch_softmax_gradients(q, k, v, grad_output, 1e10)
    assert not np.any(expected[0]) and not np.any(expected[1])  # every row one-hot: torch's dZ is 0
    assert not np.any(got.query) and not np.any(got.key)
    np.testing.assert_allclose(got.value, expected[2], rtol=0, atol=1e-13)


@requires("torch")
@pytest.mark.parametrize("engine", BLOCKED)
def test_huge_query_element_with_grad_lse_and_sinks(engine):
    """The recomputed δ keeps −dlse, and the sink (value 0) adds nothing to Σ P·dP."""
    q, k, v, grad_output = _arrays(3)
    q[1, 10, 0] = -1e15
    sinks = np.array([0.5, -1.0])  # one per head: the 2 slices
    grad_lse = np.random.default_rng(4).standard_normal((2, 600))
    tq, tk, tv, ts = (torch.tensor(x, requires_grad=True) for x in (q, k, v, sinks))
    scores = tq @ tk.transpose(-1, -2) * 0.25
    with_sink = torch.cat([scores, ts[:, None, None].expand(2, 600, 1)], dim=-1)
    lse = torch.logsumexp(with_sink, dim=-1)
    output = torch.softmax(with_sink, dim=-1)[..., :-1] @ tv
    ((output * torch.tensor(grad_output)).sum() + (lse * torch.tensor(grad_lse)).sum()).backward()
    got = al.attention(q, k, v, scale=0.25, sinks=sinks, engine=engine).backward(grad_output, grad_lse)
    for name, g, e in zip(("dQ", "dK", "dV", "sinks"), (*got, got.sinks), (tq, tk, tv, ts), strict=True):
        np.testing.assert_allclose(g, e.grad.numpy(), rtol=1e-13, atol=1e-12, err_msg=name)


@requires("torch")
@pytest.mark.parametrize("engine", BLOCKED)
@pytest.mark.parametrize("largest", [1e307, 1.7e308])
def test_values_near_the_float64_maximum_give_finite_dq_and_dk(engine, largest):
    """dQ and dK are linear in V: torch's autograd on V·2⁻¹⁰, times 2¹⁰, is the exact
    gradient, which torch itself on V makes NaN (dP = dO·Vᵀ overflows)."""
    q, k, v, grad_output = _arrays(5)
    v *= largest / np.abs(v).max()
    expected = torch_softmax_gradients(q, k, np.ldexp(v, -10), grad_output, 0.25)
    got = al.attention(q, k, v, scale=0.25, engine=engine).backward(grad_output)
    for name, g, e in zip(("dQ", "dK"), got[:2], expected[:2], strict=True):
        assert np.isfinite(g).all(), name
        exact = np.ldexp(e, 10)
        np.testing.assert_allclose(g, exact, rtol=0, atol=1e-13 * np.abs(exact).max(), err_msg=name)
    np.testing.assert_allclose(got.value, expected[2], rtol=0, atol=1e-13)  # dV = Pᵀ·dO does not read V


@requires("torch")
@pytest.mark.parametrize("engine", BLOCKED)
def test_near_tie_at_a_huge_score_keeps_dq_dk_and_dv_exact(engine):
    """Three keys share the top score of about 2.8e14 to within 1 (every score exact: q has
    one element 2⁵⁰ and the keys' are quarters), so lse = m + log l rounded to a quarter
    would lose log l's digits: the weights, and dQ, dK, dV, follow m and l apart."""
    q, k, v, grad_output = _arrays(6)
    q[0, 3] = 0.0
    q[0, 3, 2] = 2.0**50
    k[0, :, 2] = np.round(k[0, :, 2] * 4) / 4
    k[0, 5, 2] = k[0, 9, 2] = k[0, :, 2].max()
    k[0, 5, 2] += 2.0**-48  # one more than keys 9 and the first maximum, after the scale 1/4
    expected = torch_softmax_gradients(q, k, v, grad_output, 0.25)
    got = al.attention(q, k, v, scale=0.25, engine=engine).backward(grad_output)
    for name, g, e in zip(("dQ", "dK", "dV"), got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-14 * max(np.abs(e).max(), 1.0), err_msg=name)
