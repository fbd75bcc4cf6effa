"""attnlab.nn's training: cross_entropy, clip_grad_norm (torch's), AdamW (torch's arithmetic)
and ``train``, the one training loop the experiments and builtin:coref's model use."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import numpy as np

from .._validation import Array, fail, real_number
from ..layers._module import Forward, Module, Parameter

__all__ = ["AdamW", "clip_grad_norm", "cross_entropy", "train"]

BatchT = TypeVar("BatchT")
ModuleT = TypeVar("ModuleT", bound=Module)


def cross_entropy(logits: Array, targets: Array) -> Forward:
    """The mean of −log softmax(logits)[target] over the rows, and its backward.

    Args:
        logits: (…, C).
        targets: (…,) ints in 0..C − 1, −1 for rows that do not count.

    Returns:
        A :class:`~attnlab.layers.Forward` (loss, backward): backward() gives d loss / d
        logits, (…, C).

    Raises:
        ArgumentError: ``targets``' shape is not logits' without its last axis, or a
            target outside −1..C − 1 (torch refuses those too).
        ArgumentTypeError: ``targets`` not integers.
    """
    targets = np.asarray(targets)
    if targets.dtype.kind not in "iu":
        raise fail("targets", "an array of integers", f"dtype {targets.dtype}", TypeError)
    if targets.shape != logits.shape[:-1]:
        raise fail("targets", f"shape {logits.shape[:-1]} (logits' without its last axis)", f"shape {targets.shape}")
    classes = logits.shape[-1]
    if targets.size and (targets.min() < -1 or targets.max() >= classes):
        raise fail("targets", f"ids in 0..{classes - 1}, or −1 for a row not counted",
                   f"{targets.min()}..{targets.max()}")  # fmt: skip
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

    return Forward(loss, backward)


def clip_grad_norm(parameters: list[Parameter], max_norm: float) -> float:
    """Scale every gradient by min(1, max_norm / (‖all gradients‖ + 1e-6)), as
    torch.nn.utils.clip_grad_norm_; returns the norm before.

    Args:
        parameters: the parameters whose gradients are scaled, in place.
        max_norm: the largest norm of all the gradients together, a finite number >= 0.

    Raises:
        ArgumentError: ``max_norm`` negative or not finite.
    """
    max_norm = real_number("max_norm", max_norm, minimum=0.0)
    total = math.sqrt(sum(float(np.sum(p.grad**2)) for p in parameters))
    factor = max_norm / (total + 1e-6)
    if factor < 1:
        for p in parameters:
            p.grad *= factor
    return total


def _betas(betas: Any) -> tuple[float, float]:
    """(β₁, β₂), each a number in [0, 1), as torch.optim.AdamW requires."""
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise fail("betas", "a pair (β₁, β₂)", repr(betas), TypeError)
    pair = tuple(real_number(f"betas[{i}]", b) for i, b in enumerate(betas))
    for i, b in enumerate(pair):
        if not 0 <= b < 1:
            raise fail(f"betas[{i}]", "a number in [0, 1)", repr(betas[i]))
    return pair[0], pair[1]


class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW:
    θ ← θ − lr·(m̂/(√v̂ + eps) + weight_decay·θ).

    Args:
        parameters: what it trains.
        lr: the learning rate (default 1e-3).
        betas: the moments' decays (β₁, β₂) (default (0.9, 0.999)).
        eps: added to √v̂ (default 1e-8).
        weight_decay: the decoupled decay (default 0.01).

    Raises:
        ArgumentError: as torch.optim.AdamW: ``lr``, ``eps`` or ``weight_decay`` negative or
            not finite, or a β outside [0, 1).
        ArgumentTypeError: any of them not a real number, ``betas`` not a pair.
    """

    def __init__(self, parameters: list[Parameter], *, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01) -> None:  # fmt: skip
        self.parameters = parameters
        self.lr = real_number("lr", lr, minimum=0.0)
        self.betas = _betas(betas)
        self.eps = real_number("eps", eps, minimum=0.0)
        self.weight_decay = real_number("weight_decay", weight_decay, minimum=0.0)
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


def train(
    model: ModuleT,
    batches: Iterable[BatchT],
    optimizer: AdamW,
    steps: int,
    loss_fn: Callable[[ModuleT, BatchT], tuple[float, Callable[[], object]]],
    *,
    max_grad_norm: float = 1.0,
    learning_rate: Callable[[int], float] | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> list[float]:
    """``steps`` steps of gradient descent, one batch each; the loss of every step.

    A step: ``loss, backward = loss_fn(model, batch)`` (the forward and the loss), the
    optimizer's learning rate set to ``learning_rate(step)`` when given, the gradients
    zeroed, ``backward()`` (which adds the model's gradients), clip_grad_norm to
    ``max_grad_norm``, ``optimizer.step()``, then ``progress(step, loss)`` when given.

    Args:
        model: the module trained.
        batches: one batch a step.
        optimizer: an :class:`AdamW` over the model's parameters.
        steps: the number of steps.
        loss_fn: (model, batch) -> (loss, backward).
        max_grad_norm: the gradients' norm is clipped to it (default 1).
        learning_rate: step -> the learning rate of that step (None: the optimizer's).
        progress: called as progress(step, loss) after each step.

    Raises:
        ArgumentError: ``batches`` runs out before ``steps``, or ``learning_rate(step)``
            is negative or not finite.
    """
    losses: list[float] = []
    batch_iterator = iter(batches)
    for step in range(steps):
        try:
            batch = next(batch_iterator)
        except StopIteration:
            raise fail("batches", f"{steps} batches", f"{step}") from None
        loss, backward = loss_fn(model, batch)
        if learning_rate is not None:
            optimizer.lr = real_number("learning_rate(step)", learning_rate(step), minimum=0.0)
        model.zero_grad()
        backward()
        clip_grad_norm(model.parameters(), max_grad_norm)
        optimizer.step()
        losses.append(loss)
        if progress is not None:
            progress(step, loss)
    return losses
