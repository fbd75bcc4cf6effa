"""The one module system: Linear, LayerNorm and RMSNorm's backwards against central
differences, and the inference forward of each against its training forward."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.layers import LayerNorm, Linear, Norm, RMSNorm
from oracles import numerical_gradient

MAKERS = [
    lambda rng: Linear(4, 3, rng=rng),
    lambda rng: Linear.of(rng.standard_normal((3, 4)), rng.standard_normal(3)),
    lambda rng: LayerNorm(3),
    lambda rng: RMSNorm(3),
]


@pytest.mark.parametrize("make", MAKERS)
def test_each_backward_matches_central_differences(make):
    rng = np.random.default_rng(0)
    layer = make(rng)
    for p in layer.parameters():
        p.value[...] = rng.standard_normal(p.value.shape)
    x = rng.standard_normal((2, 5, layer.weight.value.shape[-1]))
    dy = rng.standard_normal(layer(x).output.shape)

    def loss():
        return float(np.sum(layer(x).output * dy))

    result = layer(x)
    layer.zero_grad()
    dx = result.backward(dy)
    np.testing.assert_allclose(dx, numerical_gradient(loss, x), atol=1e-7)
    for name, p in layer.named_parameters():
        np.testing.assert_allclose(p.grad, numerical_gradient(loss, p.value), atol=1e-7, err_msg=name)


@pytest.mark.parametrize("rms", [False, True])
def test_a_norms_inference_forward_agrees_with_its_training_forward(rms):
    rng = np.random.default_rng(1)
    norm = Norm.of(rng.standard_normal(6), rng.standard_normal(6), 1e-5, rms=rms)
    x = rng.standard_normal((2, 3, 6))
    np.testing.assert_allclose(norm.infer(x), norm(x).output, rtol=1e-13, atol=1e-13)


def test_a_linear_over_given_arrays_keeps_them_as_views():
    weight = np.arange(12.0).reshape(4, 3)  # stored (in, out), as GPT-2's Conv1D
    layer = Linear.of(weight.T)
    assert np.shares_memory(layer.weight.value, weight)
    np.testing.assert_array_equal(layer.infer(np.ones((1, 4))), np.ones((1, 4)) @ weight)
