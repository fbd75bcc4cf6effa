"""attnlab as transformers' attention backend, training: the attention dropout runs (the
weights' zeros at rate p, the kept ones scaled by 1/(1 − p)), repeats under
``torch.manual_seed``, and its backward is the gradient of the function the forward drew
(central finite differences, the same seed before each evaluation)."""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_zoo import ARCHS, batch, main_output, oracle_attention  # noqa: E402

import attnlab.hf  # noqa: E402
from attnlab.hf import _backend  # noqa: E402

P = 0.3


class Training(torch.nn.Module):
    """A stand-in attention module in training mode (bidirectional)."""

    def __init__(self) -> None:
        super().__init__()
        self.is_causal = False
        self.config = type("Config", (), {"model_type": "stand_in"})()


def inputs(generator_seed: int = 0) -> list[Any]:
    generator = torch.Generator().manual_seed(generator_seed)
    return [torch.randn(1, 4, 32, 8, generator=generator, dtype=torch.float64) for _ in range(3)]  # (B, H, L|S, E)


def test_the_weights_are_zeroed_at_rate_p_and_the_rest_scaled():
    q, k, v = inputs()
    torch.manual_seed(11)
    output, weights = _backend.attention_forward(Training(), q, k, v, None, dropout=P, output_attentions=True)
    _, clean = oracle_attention(Training().eval(), q, k, v, None)
    n = weights.numel()  # 4096 weights, none 0 before the dropout
    zeros = int((weights == 0).sum())
    assert abs(zeros - P * n) <= 5 * math.sqrt(n * P * (1 - P))  # the binomial count within 5 standard deviations
    kept = weights != 0
    assert torch.allclose(weights[kept], clean[kept] / (1 - P), rtol=1e-12, atol=0)
    assert torch.allclose(output, (weights @ v).transpose(1, 2), rtol=1e-12, atol=1e-14)  # the weights that met V


def test_a_seed_repeats_the_dropout_and_another_changes_it():
    q, k, v = inputs()
    runs = []
    for seed in (5, 5, 6):
        torch.manual_seed(seed)
        runs.append(_backend.attention_forward(Training(), q, k, v, None, dropout=P)[0])
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], runs[2])


def test_evaluation_mode_drops_nothing_under_any_of_five_seeds():
    q, k, v = inputs()
    clean = oracle_attention(Training().eval(), q, k, v, None)[0]
    for seed in range(5):
        torch.manual_seed(seed)
        output, _ = _backend.attention_forward(Training().eval(), q, k, v, None, dropout=P)
        assert torch.allclose(output, clean, rtol=1e-12, atol=1e-14), seed


def test_the_backward_is_the_gradient_of_the_dropped_function():
    tensors = [x.requires_grad_() for x in inputs()]
    weights = torch.randn(1, 32, 4, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def loss(q: Any, k: Any, v: Any) -> Any:
        torch.manual_seed(9)  # the same dropout mask at every evaluation
        return (_backend.attention_forward(Training(), q, k, v, None, dropout=P)[0] * weights).sum()

    loss(*tensors).backward()
    step = 1e-6
    directions = torch.Generator().manual_seed(2)
    for index, tensor in enumerate(tensors):
        direction = torch.randn(tensor.shape, generator=directions, dtype=torch.float64)
        with torch.no_grad():
            moved = [
                [x + sign * step * direction if i == index else x for i, x in enumerate(tensors)] for sign in (1, -1)
            ]
            numeric = (loss(*moved[0]) - loss(*moved[1])) / (2 * step)
        analytic = (tensor.grad * direction).sum()
        assert abs(numeric - analytic) <= 1e-6 * abs(analytic)


def test_a_model_trains_through_the_dropout_with_its_gradient():
    """GPT-2 with attention dropout 0.3 (and no other), in train(): autograd's directional
    derivative along a random direction of every parameter equals the central difference,
    the seed fixed before each forward; the outputs differ from the eval() ones (the dropout
    ran). GPT-2 is float64 throughout (llama's RMSNorm computes in float32 even in a
    float64 model: a difference quotient of it is rounding noise)."""
    arch = ARCHS["gpt2"]
    model, data = arch.build(torch.float64, attn=attnlab.hf.NAME), batch(arch, "right")
    for block in model.transformer.h:
        block.attn.attn_dropout.p = P
    model.train()
    projection = torch.randn(2, 8, 97, generator=torch.Generator().manual_seed(4), dtype=torch.float64)

    def loss() -> Any:
        torch.manual_seed(21)
        return (main_output(model(**data.inputs)) * projection)[data.keep].sum()

    model.zero_grad(set_to_none=True)
    loss().backward()
    generator = torch.Generator().manual_seed(5)
    directions = {
        n: torch.randn(p.shape, generator=generator, dtype=torch.float64) for n, p in model.named_parameters()
    }
    analytic = sum((p.grad * directions[n]).sum() for n, p in model.named_parameters() if p.grad is not None)
    step, values = 1e-6, []
    with torch.no_grad():
        for sign in (1, -1, 0):
            for n, p in model.named_parameters():
                p.add_(sign * step * directions[n])
            values.append(loss())
            for n, p in model.named_parameters():
                p.sub_(sign * step * directions[n])
        numeric = (values[0] - values[1]) / (2 * step)
        model.eval()
        assert abs(values[2] - (main_output(model(**data.inputs)) * projection)[data.keep].sum()) > 1e-3
    assert abs(numeric - analytic) <= 1e-6 * abs(analytic)
