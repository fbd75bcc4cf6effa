"""Associative recall, the task the experiments train on, and the one-layer models they
compare: a sequence of (key, value) items, then a query key; the answer is its value.

An item is one token, the sum of its key's and its value's embeddings; the query is its
key's embedding alone. One attention step can then solve it: the query's q matches the
item whose k holds the same key, and that item's v carries the value to a linear readout.
Shapes: items (B, n) keys and values, queries (B,), embeddings (B, n + 1, D).

The attention (``attend``) is attnlab's engine for softmax (its exact backward), and written
out here for the normalisations the engine does not offer (linear |z|/Σ|z|, ReLU, sigmoid),
each with its own backward.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import nn
from .._validation import Array, fail
from ..engine._attention import attention

__all__ = ["NORMALIZATIONS", "AttentionModel", "RNNModel", "batch", "batch_maker", "fit"]

NORMALIZATIONS = ("softmax", "linear", "relu", "sigmoid")
TEST_BATCHES = 32  # held-out batches a model is scored on (32 of 32 sequences: 1,024)


@dataclass(frozen=True)
class Batch:
    keys: Array  # (B, n) key ids of the items
    values: Array  # (B, n) value ids
    queries: Array  # (B,) the queried item's key
    answers: Array  # (B,) its value
    position: Array  # (B,) which item


def batch(rng: np.random.Generator, size: int, items: int, keys: int, values: int, *, at: int | None = None) -> Batch:
    """``size`` sequences of ``items`` distinct keys with random values; the query asks for
    item ``at`` (counted from the end, 1 = the last item), or a random one."""
    if items > keys or (at is not None and not 1 <= at <= items):
        raise fail("at", f"a distance in 1..{items} with at most {keys} items", f"at={at}, items={items}")
    key_ids = np.argsort(rng.random((size, keys)), axis=1)[:, :items]  # distinct keys per sequence
    value_ids = rng.integers(0, values, (size, items))
    position = np.full(size, items - at) if at is not None else rng.integers(0, items, size)
    rows = np.arange(size)
    return Batch(key_ids, value_ids, key_ids[rows, position], value_ids[rows, position], position)


def batch_maker(
    size: int, items: int, keys: int = 64, values: int = 16, *, at: int | None = None
) -> Callable[[np.random.Generator], Batch]:
    """``batch`` with these sizes, as a function of the Generator alone."""
    return lambda rng: batch(rng, size, items, keys, values, at=at)


class AttentionModel(nn.Module):
    """Item and query embeddings, one attention step from the query over the items, a
    linear readout. ``scale`` multiplies q·k (None: 1/√d), ``normalization`` turns scores
    into weights, ``value`` is "learned" (v = x·W_v), "input" (v = x) or "key" (v = k)."""

    def __init__(self, keys: int, values: int, dim: int, *, rng: np.random.Generator, scale: float | None = None,
                 normalization: str = "softmax", value: str = "learned") -> None:  # fmt: skip
        if normalization not in NORMALIZATIONS:
            raise fail("normalization", f"one of {', '.join(NORMALIZATIONS)}", repr(normalization))
        if value not in ("learned", "input", "key"):
            raise fail("value", "one of learned, input, key", repr(value))
        self.key_embed = nn.Embedding(keys, dim, rng=rng, std=1.0)
        self.value_embed = nn.Embedding(values, dim, rng=rng, std=1.0)
        self.query = nn.Linear(dim, dim, rng=rng, std=dim**-0.5)
        self.key = nn.Linear(dim, dim, rng=rng, std=dim**-0.5)
        self.value = nn.Linear(dim, dim, rng=rng, std=dim**-0.5) if value == "learned" else None
        self.readout = nn.Linear(dim, values, rng=rng, std=dim**-0.5)
        self.scale = dim**-0.5 if scale is None else scale
        self.normalization, self.value_mode = normalization, value
        self.input_grad: Array | None = None  # the last backward's ∂loss/∂items, (B, n, D)

    def __call__(self, data: Batch) -> tuple[Array, Callable[[Array], None]]:
        """Logits over the values (B, values), and their backward."""
        k_emb, k_back = self.key_embed(data.keys)
        v_emb, v_back = self.value_embed(data.values)
        q_emb, q_back = self.key_embed(data.queries)
        x = k_emb + v_emb  # (B, n, D): the items
        q, q_lin_back = self.query(q_emb[:, None, :])  # (B, 1, D)
        k, k_lin_back = self.key(x)
        if self.value is not None:
            v, v_lin_back = self.value(x)
        else:
            v = x if self.value_mode == "input" else k
        out, attend_back = attend(q, k, v, self.scale, self.normalization)
        logits, r_back = self.readout(out[:, 0])

        def backward(d_logits: Array) -> None:
            dq, dk, dv = attend_back(r_back(d_logits)[:, None, :])
            dx = k_lin_back(dk + (dv if self.value_mode == "key" else 0))
            if self.value is not None:
                dx = dx + v_lin_back(dv)
            elif self.value_mode == "input":
                dx = dx + dv
            q_back(q_lin_back(dq)[:, 0])
            self.input_grad = dx
            k_back(dx)
            v_back(dx)

        return logits, backward


def attend(q: Array, k: Array, v: Array, scale: float, normalization: str) -> tuple[Array, Callable[..., Any]]:
    """Weights g(scale·q·kᵀ) times v: (B, 1, D); its backward gives dq, dk, dv."""
    if normalization == "softmax":  # attnlab's engine and its exact gradients
        result = attention(q, k, v, scale=scale)
        return result.output, lambda d_out: tuple(result.backward(d_out))
    z = scale * (q @ np.swapaxes(k, -1, -2))  # (B, 1, n)
    p, p_back = _normalize(z, normalization)
    out = p @ v

    def backward(d_out: Array) -> tuple[Array, Array, Array]:
        dp = d_out @ np.swapaxes(v, -1, -2)
        dz = p_back(dp) * scale
        return dz @ k, np.swapaxes(dz, -1, -2) @ q, np.swapaxes(p, -1, -2) @ d_out

    return out, backward


def _normalize(z: Array, kind: str) -> tuple[Array, Callable[[Array], Array]]:
    """Weights from scores along the last axis, and the backward dz of a dp."""
    if kind == "sigmoid":  # σ(z), each weight alone: no sum to 1
        p = 1 / (1 + np.exp(-z))
        return p, lambda dp: dp * p * (1 - p)
    f, df = (np.abs(z), np.sign(z)) if kind == "linear" else (np.maximum(z, 0), (z > 0).astype(z.dtype))
    total = f.sum(axis=-1, keepdims=True) + 1e-9  # a row of zeros stays zeros
    p = f / total

    def backward(dp: Array) -> Array:
        return df * (dp - (dp * p).sum(axis=-1, keepdims=True)) / total

    return p, backward


class RNNModel(nn.Module):
    """The same embeddings read in order by a tanh RNN; the last state to the readout."""

    def __init__(self, keys: int, values: int, dim: int, hidden: int, *, rng: np.random.Generator) -> None:
        self.key_embed = nn.Embedding(keys, dim, rng=rng, std=1.0)
        self.value_embed = nn.Embedding(values, dim, rng=rng, std=1.0)
        self.rnn = nn.RNN(dim, hidden, rng=rng)
        self.readout = nn.Linear(hidden, values, rng=rng, std=hidden**-0.5)
        self.inputs: Array | None = None  # the last forward's inputs and their gradient, for ‖∂loss/∂x_t‖
        self.input_grad: Array | None = None

    def __call__(self, data: Batch) -> tuple[Array, Callable[[Array], None]]:
        k_emb, k_back = self.key_embed(data.keys)
        v_emb, v_back = self.value_embed(data.values)
        q_emb, q_back = self.key_embed(data.queries)
        x = np.concatenate((k_emb + v_emb, q_emb[:, None]), axis=1)  # (B, n + 1, D)
        states, rnn_back = self.rnn(x)
        logits, r_back = self.readout(states[:, -1])

        def backward(d_logits: Array) -> None:
            d_states = np.zeros_like(states)
            d_states[:, -1] = r_back(d_logits)
            dx = rnn_back(d_states)
            self.input_grad = dx
            k_back(dx[:, :-1])
            v_back(dx[:, :-1])
            q_back(dx[:, -1])

        return logits, backward


RecallModel = AttentionModel | RNNModel


def recall_loss(model: RecallModel, data: Batch) -> tuple[float, Callable[[], None]]:
    """The cross-entropy of the model's logits against the answers, and its backward."""
    logits, backward = model(data)
    loss, loss_back = nn.cross_entropy(logits, data.answers)
    return loss, lambda: backward(loss_back())


def fit(
    model: RecallModel, make: Callable[[np.random.Generator], Batch], steps: int, *, seed: int, lr: float = 3e-3,
    progress: Callable[[int, float], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Train with nn.train (AdamW, clipping to 1) on fresh batches drawn from ``seed``; the
    loss curve, the accuracy and the loss on TEST_BATCHES held-out batches."""
    rng = np.random.default_rng(seed)
    optimizer = nn.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = nn.train(model, map(make, itertools.repeat(rng)), optimizer, steps, recall_loss, progress=progress)
    tested = [make(np.random.default_rng(seed + 10_000 + n)) for n in range(TEST_BATCHES)]  # held-out sequences
    outputs = [model(data)[0] for data in tested]
    right = sum(
        int((logits.argmax(axis=-1) == data.answers).sum()) for logits, data in zip(outputs, tested, strict=True)
    )
    loss = float(
        np.mean([nn.cross_entropy(logits, data.answers)[0] for logits, data in zip(outputs, tested, strict=True)])
    )
    return {"losses": losses, "accuracy": right / sum(len(d.answers) for d in tested), "test_loss": loss}
