"""The naive engine: the whole (L, S) score matrix of every head at once.

    Z = scale · Q·Kᵀ + mask     P = softmax(Z)     O = dropout(P)·V

Backward, with δ = rowsum(dO∘O) = rowsum(dP∘P) (dropout folded into dP):

    dV = dropout(P)ᵀ·dO    dP = dropout(dO·Vᵀ)    dZ = P∘(dP − δ)
    dQ = scale · dZ·K      dK = scale · dZᵀ·Q

Letters as in ``_problem``; results are in the compute dtype, over the broadcast batch
shape, with the key and value heads expanded for GQA.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import Array
from ._masks import mask_scores_
from ._problem import Engine, Problem
from ._softmax import softmax_lse_

__all__ = ["NAIVE", "NaiveEngine", "backward", "forward"]


def _dropout(pb: Problem) -> Array | None:
    """keep / (1 − p) over (B…, L, S), or None without dropout."""
    if pb.dropout_seed is None:
        return None
    L, S = pb.lengths
    factor = np.empty((*pb.batch_shape, L, S), dtype=pb.compute_dtype)
    for n, index in enumerate(np.ndindex(*pb.batch_shape)):
        factor[index] = pb.dropout(n, slice(0, L), slice(0, S))
    return factor


def _expand_heads(pb: Problem) -> tuple[Array, Array]:
    """Key and value with each of their Hk heads repeated for its G query heads."""
    if pb.groups == 1:
        return pb.key, pb.value
    return np.repeat(pb.key, pb.groups, axis=-3), np.repeat(pb.value, pb.groups, axis=-3)


def _weights(pb: Problem, key: Array) -> tuple[Array, Array]:
    """P = softmax(scale · Q·Kᵀ + mask), (B…, L, S), and its rows' lse, (B…, L)."""
    scores = (pb.query * np.asarray(pb.scale, pb.compute_dtype)) @ np.swapaxes(key, -1, -2)  # Z, (B…, L, S)
    mask_scores_(scores, pb.mask, pb.is_causal)
    return softmax_lse_(scores)


def forward(pb: Problem) -> tuple[Array, Array, Array]:
    """Return (O (B…, L, Ev), the weights that multiplied V (B…, L, S), lse (B…, L))."""
    key, value = _expand_heads(pb)
    weights, lse = _weights(pb, key)
    dropout = _dropout(pb)
    if dropout is not None:
        weights *= dropout
    output = weights @ value
    output[np.isneginf(lse)] = 0.0  # a row whose keys are all masked is 0, whatever the values
    return output, weights, lse


def backward(pb: Problem, grad_output: Array) -> tuple[Array, Array, Array]:
    """(dQ (B…, L, E), dK (B…, S, E), dV (B…, S, Ev)) from dO (B…, L, Ev)."""
    key, value = _expand_heads(pb)
    weights, _ = _weights(pb, key)
    dropout = _dropout(pb)
    applied = weights if dropout is None else weights * dropout
    grad_value = np.swapaxes(applied, -1, -2) @ grad_output  # dV, (B…, S, Ev)
    grad_weights = grad_output @ np.swapaxes(value, -1, -2)  # dP, (B…, L, S)
    if dropout is not None:
        grad_weights *= dropout
    delta = (grad_weights * weights).sum(axis=-1, keepdims=True)  # δ, (B…, L, 1)
    grad_scores = weights * (grad_weights - delta)  # dZ, (B…, L, S)
    grad_scores *= pb.scale
    grad_query = grad_scores @ key  # dQ, (B…, L, E)
    grad_key = np.swapaxes(grad_scores, -1, -2) @ pb.query  # dK, (B…, S, E)
    return grad_query, grad_key, grad_value


@dataclass(frozen=True)
class NaiveEngine:
    """The naive engine behind ``attnlab.engine.EngineImpl``: it holds the weights, and
    its backward recomputes them (it reads no saved O or lse). Non-finite inputs give NaN,
    never a NumPy warning."""

    name: Engine = "naive"
    blocked: bool = False
    requirement: str | None = None

    def available(self) -> bool:
        """True: NumPy is all it needs."""
        return True

    def forward(self, pb: Problem, threads: int | None) -> tuple[Array, Array, Array]:
        """(O (B…, L, Ev), lse (B…, L), the weights (B…, L, S)), in the compute dtype, on one thread."""
        with np.errstate(all="ignore"):
            output, weights, lse = forward(pb)
        return output, lse, weights

    def backward(
        self, pb: Problem, grad_output: Array, saved: tuple[Array, Array] | None, threads: int | None
    ) -> tuple[Array, Array, Array]:
        """:func:`backward`; ``saved`` and ``threads`` are not used."""
        with np.errstate(all="ignore"):
            return backward(pb, grad_output)


NAIVE = NaiveEngine()
