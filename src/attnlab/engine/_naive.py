"""The naive engine: the whole (L, S) score matrix of every head at once.

    Z = softcap(scale · Q·Kᵀ) + biases, masked     P = softmax(Z) (with the sinks)
    O = dropout(P)·V

Backward, with δ = rowsum(dP∘P) − dlse (dropout folded into dP; dlse the gradient of
the lse, 0 when not given):

    dV = dropout(P)ᵀ·dO    dP = dropout(dO·Vᵀ)    dZ = P∘(dP − δ)   (the float mask's gradient)
    dX = dZ∘softcap′        dQ = scale · dX·K     dK = scale · dXᵀ·Q

Letters as in ``_problem``; results are in the compute dtype, over the broadcast batch
shape, with the key and value heads expanded for GQA.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import Array
from ._masks import mask_mod_allows, modify_scores_
from ._problem import Engine, Problem, Saved, sum_to_shape
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


def _weights(pb: Problem, key: Array, derivative: bool = False) -> tuple[Array, Array, Array, Array | None]:
    """P = softmax(Z), (B…, L, S), its rows' lse, (B…, L), which rows have no key
    allowed, (B…, L), and softcap's derivative (B…, L, S) when asked for and there is a
    softcap."""
    L, S = pb.lengths
    scores = (pb.query * np.asarray(pb.scale, pb.compute_dtype)) @ np.swapaxes(key, -1, -2)  # scale·Q·Kᵀ, (B…, L, S)
    slices = np.arange(pb.slices).reshape(pb.batch_shape)  # n, (B…)
    rows, cols = slice(0, L), slice(0, S)
    allowed = mask_mod_allows(pb, slices, rows, cols)
    cap_derivative = modify_scores_(pb, scores, pb.mask, slices, rows, cols, allowed, derivative)
    if pb.rules["sinks"] is None:
        weights, lse = softmax_lse_(scores)
        return weights, lse, np.isneginf(lse), cap_derivative
    empty = np.isneginf(scores.max(axis=-1, initial=-np.inf))  # (B…, L)
    weights, lse = softmax_lse_(scores, pb.rules["sinks"][..., None])
    return weights, lse, empty, cap_derivative


def forward(pb: Problem) -> tuple[Array, Array, Array]:
    """Return (O (B…, L, Ev), the weights that multiplied V (B…, L, S), lse (B…, L))."""
    key, value = _expand_heads(pb)
    weights, lse, empty, _ = _weights(pb, key)
    dropout = _dropout(pb)
    if dropout is not None:
        weights *= dropout
    output = weights @ value
    output[empty] = 0.0  # a row whose keys are all masked is 0, whatever the values
    return output, weights, lse


def backward(pb: Problem, grad_output: Array, grad_lse: Array | None) -> tuple[Array, Array, Array, Array | None]:
    """(dQ (B…, L, E), dK (B…, S, E), dV (B…, S, Ev), the float mask's gradient in its
    shape or None) from dO (B…, L, Ev) and dlse (B…, L) or None."""
    key, value = _expand_heads(pb)
    weights, _, _, cap_derivative = _weights(pb, key, derivative=True)
    dropout = _dropout(pb)
    applied = weights if dropout is None else weights * dropout
    grad_value = np.swapaxes(applied, -1, -2) @ grad_output  # dV, (B…, S, Ev)
    grad_weights = grad_output @ np.swapaxes(value, -1, -2)  # dP, (B…, L, S)
    if dropout is not None:
        grad_weights *= dropout
    # δ = Σ_j P·dP − dlse, the sum over the weights themselves (as torch's softmax backward):
    # rowsum(dO∘O) is the same sum in another order, whose rounding a one-hot row at a huge
    # score would multiply into dQ and dK
    delta = (grad_weights * weights).sum(axis=-1)  # δ, (B…, L)
    if grad_lse is not None:
        delta -= grad_lse
    grad_scores = weights * (grad_weights - delta[..., None])  # dZ, (B…, L, S)
    has_float_mask = pb.mask is not None and pb.mask.dtype != bool
    grad_mask = sum_to_shape(grad_scores, pb.mask.shape) if has_float_mask else None  # type: ignore[union-attr]
    if cap_derivative is not None:
        grad_scores *= cap_derivative
    grad_scores *= pb.scale
    grad_query = grad_scores @ key  # dQ, (B…, L, E)
    grad_key = np.swapaxes(grad_scores, -1, -2) @ pb.query  # dK, (B…, S, E)
    return grad_query, grad_key, grad_value, grad_mask


@dataclass(frozen=True)
class NaiveEngine:
    """The naive engine behind ``attnlab.engine.EngineImpl``: it holds the weights, and
    its backward recomputes them (it reads no saved O or lse, only δ). Non-finite inputs give NaN,
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
        self, pb: Problem, grad_output: Array, saved: Saved, threads: int | None
    ) -> tuple[Array, Array, Array, Array | None]:
        """:func:`backward` with ``saved``'s dlse (the forward's O and lse are not used: it
        recomputes the weights, and δ from them); ``threads`` is not used."""
        with np.errstate(all="ignore"):
            return backward(pb, grad_output, saved.grad_lse)


NAIVE = NaiveEngine()
