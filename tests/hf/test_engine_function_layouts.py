"""attnlab.hf's autograd Function on the layouts transformers hands it: a query that is a
strided view (after RoPE, of a (B, L, H, E) buffer), a dO that is one, the output made in
the layout transformers transposes it to, and a 0/−∞ float mask that needs no gradient
going to the engine as the bool mask it is. The oracle: torch's SDPA in float64."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from attnlab.hf import _backend  # noqa: E402
from attnlab.hf._backend import attention_forward  # noqa: E402
from oracles import torch_sdpa_blhe  # noqa: E402


class _Module(torch.nn.Module):
    """The attributes transformers' attention modules give the attention function."""

    is_causal = False


def _tensors(B: int, H: int, L: int, S: int, E: int) -> tuple[object, object, object, object]:
    """Seeded q (B, H, L, E) as a strided view of a (B, L, H, E) buffer, k, v (B, H, S, E)
    and dO (B, L, H, E), float64, q, k and v requiring gradients."""
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(B, L, H, E, generator=generator, dtype=torch.float64).transpose(1, 2)  # (B, H, L, E) view
    key, value = (torch.randn(B, H, S, E, generator=generator, dtype=torch.float64) for _ in range(2))
    grad_output = torch.randn(B, L, H, E, generator=generator, dtype=torch.float64)  # as attention_forward returns
    for x in (query, key, value):
        x.requires_grad_()
    return query, key, value, grad_output


def _gradients(output: object, grad_output: object, *inputs: object) -> list[np.ndarray]:
    return [g.numpy() for g in torch.autograd.grad(output, inputs, grad_output)]


def test_a_strided_query_and_dO_give_sdpas_output_and_gradients_in_the_layout_transformers_wants():
    query, key, value, grad_output = _tensors(2, 3, 40, 40, 8)
    assert not query.is_contiguous()
    module = _Module()
    module.is_causal = True
    output, weights = attention_forward(module, query, key, value, None)
    assert weights is None and output.shape == (2, 40, 3, 8) and output.is_contiguous()
    expected = torch_sdpa_blhe(query, key, value, is_causal=True)
    np.testing.assert_allclose(output.detach().numpy(), expected.detach().numpy(), atol=1e-12, rtol=0)
    ours = _gradients(output, grad_output, query, key, value)
    theirs = _gradients(expected, grad_output, query, key, value)
    for mine, oracle in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(mine, oracle, atol=1e-11, rtol=0)


@pytest.mark.parametrize(
    "shape", [(1, 2, 16, 16, 4), (1, 2, 1, 16, 4), (2, 1, 8, 8, 4)], ids=["prefill", "decode", "1 head"]
)
def test_the_output_is_its_own_memory_the_engines_result_stays_intact(monkeypatch, shape):
    query, key, value, _ = _tensors(*shape)  # a decode step's and one head's (B, L, H, Ev) is C order without a copy
    results = []
    engine_call = _backend._engine_call
    monkeypatch.setattr(_backend, "_engine_call", lambda call: results.append(engine_call(call)) or results[-1])
    output, _ = attention_forward(_Module(), query, key, value, None)
    saved = results[0].exact_output.copy()
    with torch.no_grad():
        output.zero_()  # the caller's to change: the backward starts from the engine's own O
    np.testing.assert_array_equal(results[0].exact_output, saved)


def test_a_zero_or_minus_infinity_float_mask_without_gradient_goes_to_the_engine_as_bool(monkeypatch):
    query, key, value, grad_output = _tensors(2, 2, 24, 24, 8)
    rng = np.random.default_rng(1)
    allowed = rng.random((2, 1, 24, 24)) < 0.7
    allowed[..., 0] = True  # every row attends somewhere
    mask = torch.from_numpy(np.where(allowed, 0.0, -np.inf))  # (B, 1, L, S), float64, no gradient
    masks = []
    engine_call = _backend._engine_call
    monkeypatch.setattr(_backend, "_engine_call", lambda call: masks.append(call.mask) or engine_call(call))
    output, _ = attention_forward(_Module(), query, key, value, mask)
    assert masks[0].dtype == bool and np.array_equal(masks[0], allowed)
    expected = torch_sdpa_blhe(query, key, value, torch.from_numpy(allowed))
    np.testing.assert_allclose(output.detach().numpy(), expected.detach().numpy(), atol=1e-12, rtol=0)
    ours = _gradients(output, grad_output, query, key, value)
    theirs = _gradients(expected, grad_output, query, key, value)
    for mine, oracle in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(mine, oracle, atol=1e-11, rtol=0)


@pytest.mark.parametrize("kind", ["finite values", "needs a gradient"])
def test_any_other_float_mask_stays_float_and_a_trainable_one_gets_sdpas_gradient(monkeypatch, kind):
    query, key, value, grad_output = _tensors(1, 2, 12, 12, 4)
    if kind == "finite values":
        bias = np.random.default_rng(2).standard_normal((1, 2, 12, 12))
    else:  # only 0 and −∞, but a parameter's: it keeps its gradient
        bias = np.zeros((1, 2, 12, 12))
        bias[..., 3] = -np.inf
    mask = torch.from_numpy(bias).requires_grad_(kind == "needs a gradient")  # (1, H, L, S)
    masks = []
    engine_call = _backend._engine_call
    monkeypatch.setattr(_backend, "_engine_call", lambda call: masks.append(call.mask) or engine_call(call))
    output, _ = attention_forward(_Module(), query, key, value, mask)
    assert masks[0].dtype == np.float64
    expected = torch_sdpa_blhe(query, key, value, mask)
    np.testing.assert_allclose(output.detach().numpy(), expected.detach().numpy(), atol=1e-12, rtol=0)
    if kind == "needs a gradient":
        (ours,) = _gradients(output, grad_output, mask)
        (theirs,) = _gradients(expected, grad_output, mask)
        np.testing.assert_allclose(ours, theirs, atol=1e-11, rtol=0)


@pytest.mark.parametrize("context", ["no_grad", "inference_mode", "no input requires grad"])
def test_without_gradients_the_forward_skips_autograd_and_gives_sdpas_output(context):
    query, key, value, _ = _tensors(1, 2, 20, 20, 8)
    if context == "no input requires grad":
        query, key, value = (x.detach() for x in (query, key, value))
    guard = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}.get(context, torch.enable_grad)
    module = _Module()
    module.is_causal = True
    with guard():
        output, _ = attention_forward(module, query, key, value, None)
    assert output.grad_fn is None and output.is_contiguous()
    expected = torch_sdpa_blhe(query.detach(), key.detach(), value.detach(), is_causal=True)
    np.testing.assert_allclose(output.numpy(), expected.numpy(), atol=1e-12, rtol=0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_precision_output_comes_back_in_its_dtype_and_transformers_layout(dtype):
    query, key, value, _ = _tensors(1, 2, 16, 16, 8)
    half = getattr(torch, dtype)
    q, k, v = (x.detach().to(half) for x in (query, key, value))
    output, _ = attention_forward(_Module(), q, k, v, None)
    assert output.dtype == half and output.shape == (1, 16, 2, 8) and output.is_contiguous()
    expected = torch_sdpa_blhe(*(x.float().double() for x in (q, k, v)))  # the rounded inputs, computed exactly
    np.testing.assert_allclose(output.double().numpy(), expected.numpy(), atol=2e-2, rtol=1e-2)
