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
