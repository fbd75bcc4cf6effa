"""A small training stack in NumPy, on attnlab's attention and its exact gradients.

Every layer's forward returns its output and a function that carries its backward (the
attention layers also return their weights, when asked, as a third value): given
the gradient of the loss with respect to the output, it adds the gradients of the layer's
parameters to their ``grad`` and returns the gradient with respect to the input (None for
integer inputs). A model calls its layers in order, keeps the backward functions and calls
them in reverse. Shapes: x (B, L, D) for hidden states, ids (B, L) for tokens.

    layer = Linear(4, 3, rng=np.random.default_rng(0))
    y, back = layer(x)                 # y = x·W + b
    dx = back(dy)                      # layer.weight.grad += xᵀ·dy, ...

Layers: Linear, Embedding, LayerNorm, gelu (tanh form), SelfAttention (attnlab's engine
forward and backward), TransformerBlock (BERT's order: attention, residual, LayerNorm,
feed-forward, residual, LayerNorm), RNN (tanh, backpropagation through time);
cross_entropy; AdamW; clip_grad_norm. Randomness only from the Generator passed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._validation import fail
from ..engine._attention import attention

__all__ = [
    "RNN",
    "AdamW",
    "Embedding",
    "LayerNorm",
    "Linear",
    "Module",
    "Parameter",
    "SelfAttention",
    "TransformerBlock",
    "clip_grad_norm",
    "cross_entropy",
    "gelu",
]

Array = np.ndarray
Backward = Callable[..., Any]  # dy (and, for attention, the weights' gradient) -> dx


@dataclass(eq=False)
class Parameter:
    """A trainable array and its gradient (same shape), which backward functions add to."""

    value: Array
    grad: Array = field(init=False)

    def __post_init__(self) -> None:
        self.grad = np.zeros_like(self.value)


class Module:
    """Something with parameters: ``named_parameters()`` finds them in its attributes,
    sub-modules and lists of sub-modules, with dotted names."""

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        for name, value in vars(self).items():
            if isinstance(value, Parameter):
                yield prefix + name, value
            elif isinstance(value, Module):
                yield from value.named_parameters(f"{prefix}{name}.")
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, Module):
                        yield from item.named_parameters(f"{prefix}{name}.{i}.")

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad[...] = 0


def _normal(rng: np.random.Generator, shape: tuple[int, ...], std: float, dtype: Any) -> Array:
    return (rng.standard_normal(shape) * std).astype(dtype)


class Linear(Module):
    """y = x·W + b, W (n_in, n_out)."""

    def __init__(self, n_in: int, n_out: int, *, rng: np.random.Generator, std: float = 0.02,
                 bias: bool = True, dtype: Any = np.float64) -> None:  # fmt: skip
        self.weight = Parameter(_normal(rng, (n_in, n_out), std, dtype))
        self.bias = Parameter(np.zeros(n_out, dtype)) if bias else None

    def __call__(self, x: Array) -> tuple[Array, Backward]:
        y = x @ self.weight.value
        if self.bias is not None:
            y = y + self.bias.value

        def backward(dy: Array) -> Array:
            flat_x, flat_dy = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])  # (…, n) -> (N, n)
            self.weight.grad += flat_x.T @ flat_dy
            if self.bias is not None:
                self.bias.grad += flat_dy.sum(axis=0)
            return dy @ self.weight.value.T

        return y, backward


class Embedding(Module):
    """Row ``ids`` of a (n, D) table."""

    def __init__(self, n: int, dim: int, *, rng: np.random.Generator, std: float = 0.02,
                 dtype: Any = np.float64) -> None:  # fmt: skip
        self.weight = Parameter(_normal(rng, (n, dim), std, dtype))

    def __call__(self, ids: Array) -> tuple[Array, Backward]:
        def backward(dy: Array) -> None:
            np.add.at(self.weight.grad, ids, dy)  # a row used twice gets both gradients

        return self.weight.value[ids], backward


class LayerNorm(Module):
    """(x − mean)/√(var + eps)·γ + β over the last axis."""

    def __init__(self, dim: int, *, eps: float = 1e-12, dtype: Any = np.float64) -> None:
        self.weight = Parameter(np.ones(dim, dtype))
        self.bias = Parameter(np.zeros(dim, dtype))
        self.eps = eps

    def __call__(self, x: Array) -> tuple[Array, Backward]:
        centred = x - x.mean(axis=-1, keepdims=True)
        inv = 1.0 / np.sqrt(np.mean(centred**2, axis=-1, keepdims=True) + self.eps)
        normed = centred * inv

        def backward(dy: Array) -> Array:
            axes = tuple(range(dy.ndim - 1))
            self.weight.grad += (dy * normed).sum(axis=axes)
            self.bias.grad += dy.sum(axis=axes)
            g = dy * self.weight.value
            return inv * (g - g.mean(axis=-1, keepdims=True) - normed * (g * normed).mean(axis=-1, keepdims=True))

        return normed * self.weight.value + self.bias.value, backward


def gelu(x: Array) -> tuple[Array, Backward]:
    """0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), transformers' ``gelu_new``."""
    c = math.sqrt(2.0 / math.pi)
    t = np.tanh(c * (x + 0.044715 * x * x * x))

    def backward(dy: Array) -> Array:
        return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t**2) * c * (1 + 3 * 0.044715 * x**2))

    return 0.5 * x * (1 + t), backward


class SelfAttention(Module):
    """Multi-head self-attention as BERT has it: q, k, v projections, attention on
    attnlab's engine (its exact backward), the heads side by side through an output
    projection. With ``need_weights`` it also returns the weights P (B, H, L, L), and its
    backward then takes their gradient too (a loss on the weights themselves):
    dZ = P∘(dP − rowsum(dP∘P)), dQ += scale·dZ·K, dK += scale·dZᵀ·Q."""

    def __init__(self, dim: int, heads: int, *, rng: np.random.Generator, dtype: Any = np.float64) -> None:
        if dim % heads:
            raise fail("heads", f"a divisor of dim {dim}", heads)
        self.heads = heads
        self.query, self.key, self.value, self.out = (Linear(dim, dim, rng=rng, dtype=dtype) for _ in range(4))

    def __call__(self, x: Array, key_mask: Array | None = None, *, need_weights: bool = False
                 ) -> tuple[Array, Backward, Array | None]:  # fmt: skip
        """x (B, L, D); key_mask (B, L) True for a token (False: padding, unseen)."""
        B, L, D = x.shape
        E = D // self.heads
        projected = [layer(x) for layer in (self.query, self.key, self.value)]
        q, k, v = (y.reshape(B, L, self.heads, E).transpose(0, 2, 1, 3) for y, _ in projected)  # -> (B, H, L, E)
        mask = None if key_mask is None else key_mask[:, None, None, :]  # (B, L) -> (B, 1, 1, L)
        result = attention(q, k, v, attn_mask=mask, need_weights=need_weights)
        merged = result.output.transpose(0, 2, 1, 3).reshape(B, L, D)  # (B, H, L, E) -> (B, L, D)
        y, out_back = self.out(merged)
        scale = 1.0 / math.sqrt(E)

        def backward(dy: Array, d_weights: Array | None = None) -> Array:
            d_merged = out_back(dy).reshape(B, L, self.heads, E).transpose(0, 2, 1, 3)  # (B, L, D) -> (B, H, L, E)
            grads = list(result.backward(np.ascontiguousarray(d_merged)))
            if d_weights is not None:  # through the softmax to the scores, then to q and k
                P = result.weights
                if P is None:
                    raise fail("d_weights", "a forward with need_weights=True", "one without")
                d_scores = P * (d_weights - (d_weights * P).sum(axis=-1, keepdims=True))  # (B, H, L, L)
                grads[0] = grads[0] + scale * d_scores @ k
                grads[1] = grads[1] + scale * np.swapaxes(d_scores, -1, -2) @ q
            dx = np.zeros_like(x)
            for grad, (_, back) in zip(grads, projected, strict=True):
                dx += back(grad.transpose(0, 2, 1, 3).reshape(B, L, D))  # (B, H, L, E) -> (B, L, D)
            return dx

        return y, backward, result.weights


class TransformerBlock(Module):
    """BERT's layer: h = LN(x + Attn(x)); y = LN(h + W₂·gelu(W₁·h))."""

    def __init__(self, dim: int, heads: int, hidden: int, *, rng: np.random.Generator, dtype: Any = np.float64,
                 eps: float = 1e-12) -> None:  # fmt: skip
        self.attention = SelfAttention(dim, heads, rng=rng, dtype=dtype)
        self.attention_norm = LayerNorm(dim, eps=eps, dtype=dtype)
        self.up = Linear(dim, hidden, rng=rng, dtype=dtype)
        self.down = Linear(hidden, dim, rng=rng, dtype=dtype)
        self.output_norm = LayerNorm(dim, eps=eps, dtype=dtype)

    def __call__(self, x: Array, key_mask: Array | None = None, *, need_weights: bool = False
                 ) -> tuple[Array, Backward, Array | None]:  # fmt: skip
        """y and its backward(dy, d_weights=None); the attention weights with ``need_weights``."""
        a, attention_back, weights = self.attention(x, key_mask, need_weights=need_weights)
        h, norm1_back = self.attention_norm(x + a)
        u, up_back = self.up(h)
        g, gelu_back = gelu(u)
        m, down_back = self.down(g)
        y, norm2_back = self.output_norm(h + m)

        def backward(dy: Array, d_weights: Array | None = None) -> Array:
            d_sum = norm2_back(dy)
            dh = d_sum + up_back(gelu_back(down_back(d_sum)))
            d_first = norm1_back(dh)
            return d_first + attention_back(d_first, d_weights)

        return y, backward, weights


class RNN(Module):
    """hₜ = tanh(xₜ·W + hₜ₋₁·U + b), h₀ = 0; the outputs (B, L, H), backward through time."""

    def __init__(self, n_in: int, n_hidden: int, *, rng: np.random.Generator, dtype: Any = np.float64) -> None:
        self.input = Linear(n_in, n_hidden, rng=rng, std=1 / math.sqrt(n_in), dtype=dtype)
        self.recurrent = Parameter(_normal(rng, (n_hidden, n_hidden), 1 / math.sqrt(n_hidden), dtype))

    def __call__(self, x: Array) -> tuple[Array, Backward]:
        B, L, _ = x.shape
        inputs, input_back = self.input(x)  # (B, L, H): xₜ·W + b for every t at once
        states = np.zeros((B, L + 1, inputs.shape[-1]), dtype=inputs.dtype)  # h₀ … h_L
        for t in range(L):
            states[:, t + 1] = np.tanh(inputs[:, t] + states[:, t] @ self.recurrent.value)

        def backward(dy: Array) -> Array:
            d_inputs = np.zeros_like(inputs)
            carried = np.zeros_like(states[:, 0])  # ∂loss/∂hₜ from the steps after t
            for t in reversed(range(L)):
                d_pre = (dy[:, t] + carried) * (1 - states[:, t + 1] ** 2)  # through tanh
                d_inputs[:, t] = d_pre
                self.recurrent.grad += states[:, t].T @ d_pre
                carried = d_pre @ self.recurrent.value.T
            return input_back(d_inputs)

        return states[:, 1:], backward


def cross_entropy(logits: Array, targets: Array) -> tuple[float, Backward]:
    """The mean of −log softmax(logits)[target] over the rows (…, C); targets (…,) ints,
    −1 for rows that do not count."""
    flat, labels = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)  # (…, C) -> (N, C)
    counted = labels >= 0
    shifted = flat - flat.max(axis=-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    n = max(int(counted.sum()), 1)
    loss = -float(log_p[counted, labels[counted]].sum()) / n

    def backward(scale: Any = 1.0) -> Array:
        grad = np.exp(log_p)
        grad[counted, labels[counted]] -= 1.0
        grad[~counted] = 0.0
        return (grad * (scale / n)).reshape(logits.shape)

    return loss, backward


def clip_grad_norm(parameters: list[Parameter], max_norm: float) -> float:
    """Scale every gradient by min(1, max_norm / (‖all gradients‖ + 1e-6)), as
    torch.nn.utils.clip_grad_norm_; returns the norm before."""
    total = math.sqrt(sum(float(np.sum(p.grad**2)) for p in parameters))
    factor = max_norm / (total + 1e-6)
    if factor < 1:
        for p in parameters:
            p.grad *= factor
    return total


class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW:
    θ ← θ − lr·(m̂/(√v̂ + eps) + weight_decay·θ)."""

    def __init__(self, parameters: list[Parameter], *, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01) -> None:  # fmt: skip
        self.parameters, self.lr, self.betas, self.eps, self.weight_decay = parameters, lr, betas, eps, weight_decay
        self.moments = [(np.zeros_like(p.value), np.zeros_like(p.value)) for p in parameters]
        self.steps = 0

    def step(self) -> None:
        self.steps += 1
        b1, b2 = self.betas
        for p, (m, v) in zip(self.parameters, self.moments, strict=True):
            p.value *= 1 - self.lr * self.weight_decay
            m *= b1
            m += (1 - b1) * p.grad
            v *= b2
            v += (1 - b2) * p.grad**2
            m_hat, v_hat = m / (1 - b1**self.steps), v / (1 - b2**self.steps)
            p.value -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)
