"""attnlab as transformers' attention backend, length-scaled scores: a tiny model whose
attention passes Scalable-Softmax's ``length_scale`` (one s per head, a trained parameter)
to its attention function gets the output, the weights and every gradient (the
projections' and s's) of the same model on an eager attention written out here."""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS  # noqa: E402

import attnlab.hf  # noqa: E402  (registers attn_implementation="attnlab")

H, E, D = 2, 4, 8


def eager_length_scaled(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scaling: float,
                        length_scale: Any, **kwargs: Any) -> tuple[Any, Any]:  # fmt: skip
    """The oracle: causal softmax of (s_h·log n_i)·scaling·q_i·k_j, n_i = i + 1 keys (B, L, H, E)."""
    L = query.shape[-2]
    rows = torch.arange(L, dtype=query.dtype)
    multiplier = length_scale[:, None] * torch.log(rows + 1)  # (H, L): m_hi = s_h·log n_i
    scores = scaling * (query @ key.transpose(-1, -2)) * multiplier[..., None]  # (B, H, L, L)
    scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), -math.inf)
    weights = torch.softmax(scores, dim=-1)
    return (weights @ value).transpose(1, 2).contiguous(), weights


class LengthScaledAttention(torch.nn.Module):
    """A one-layer causal self-attention whose attention function receives ``length_scale``."""

    def __init__(self, implementation: str) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.projections = torch.nn.Parameter(torch.randn(3, D, D, generator=generator, dtype=torch.float64) / 3)
        self.length_scale = torch.nn.Parameter(torch.tensor([0.7, 1.6], dtype=torch.float64))
        self.is_causal, self.training = True, False
        self.config = type("Config", (), {"model_type": "length_scaled_toy"})()
        self.attention = ALL_ATTENTION_FUNCTIONS["attnlab"] if implementation == "attnlab" else eager_length_scaled

    def forward(self, x: Any, output_attentions: bool = False) -> tuple[Any, Any]:
        B, L, _ = x.shape
        q, k, v = (  # (B, H, L, E)
            (x @ w).view(B, L, H, E).transpose(1, 2) for w in self.projections
        )
        return self.attention(self, q, k, v, None, scaling=E**-0.5, length_scale=self.length_scale,
                              output_attentions=output_attentions)  # fmt: skip


@pytest.mark.parametrize("with_weights", [False, True])
def test_a_models_length_scale_kwarg_gives_eagers_output_weights_and_gradients(with_weights: bool) -> None:
    x = torch.randn(2, 6, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    results = {}
    for implementation in ("attnlab", "eager"):
        model = LengthScaledAttention(implementation)
        output, weights = model(x, output_attentions=with_weights)
        loss = (output * torch.linspace(-1, 1, output.numel(), dtype=torch.float64).view(output.shape)).sum()
        if with_weights:
            loss = loss + (weights * weights).sum()  # the weights in the loss too
        loss.backward()
        results[implementation] = (output, weights, model.projections.grad, model.length_scale.grad)
    ours, theirs = results["attnlab"], results["eager"]
    torch.testing.assert_close(ours[0], theirs[0], rtol=0, atol=1e-12)
    if with_weights:
        torch.testing.assert_close(ours[1], theirs[1], rtol=0, atol=1e-12)
    torch.testing.assert_close(ours[2], theirs[2], rtol=0, atol=1e-11)
    torch.testing.assert_close(ours[3], theirs[3], rtol=0, atol=1e-11)


def test_a_length_scale_that_is_not_one_per_head_is_refused() -> None:
    model = LengthScaledAttention("attnlab")
    model.length_scale = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    with pytest.raises(attnlab.hf.UnsupportedModelError, match=r"length_scaled_toy: .*length_scale of shape"):
        model(torch.zeros(1, 4, D, dtype=torch.float64))
