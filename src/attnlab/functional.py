"""Scaled dot-product attention and its exact backward, with PyTorch's semantics.

    Attention(Q, K, V) = dropout(softmax(scale · Q·Kᵀ + mask)) · V

Shapes (see ``_problem`` for the letters): query (B…, L, E), key (B…, S, E),
value (B…, S, Ev) -> output (B…, L, Ev). The batch dimensions broadcast as in NumPy.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from . import _naive, _tiled
from ._problem import Problem, make_problem
from ._softmax import softmax
from ._validation import fail, float_array, positive_int

__all__ = ["scaled_dot_product_attention", "scaled_dot_product_attention_backward", "softmax"]

Engine = Literal["naive", "tiled"]
ENGINES = ("naive", "tiled")
# engine=None picks the tiled engine from this many scores (B·H·L·S) on: below it the
# naive engine's one large GEMM beats the tiles' overhead (measured in docs/benchmarks.md)
TILED_FROM = 2**22


def _threads(num_threads: int | None) -> int | None:
    return None if num_threads is None else positive_int("num_threads", num_threads)


def _choose_engine(engine: str | None, pb: Problem, return_weights: bool) -> str:
    """The engine asked for, or the faster one for these shapes (see docs/benchmarks.md)."""
    if engine is None:
        L, S, _ = pb.shape
        return "naive" if return_weights or math.prod(pb.batch_shape) * L * S < TILED_FROM else "tiled"
    if engine not in ENGINES:
        raise fail("engine", f"one of {ENGINES} or None", repr(engine))
    if engine == "tiled" and return_weights:
        raise fail(
            "return_weights",
            "False with engine='tiled' (the tiled engine never holds the (L, S) weights; use engine='naive' or None)",
            True,
        )
    return engine


def scaled_dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    return_weights: bool = False,
    return_lse: bool = False,
    rng: int | np.random.Generator | None = None,
    engine: Engine | None = None,
    num_threads: int | None = None,
) -> Any:
    """softmax(scale · Q·Kᵀ + mask) · V, as ``torch.nn.functional.scaled_dot_product_attention``.

    Args:
        query: (B…, L, E).
        key: (B…, S, E).
        value: (B…, S, Ev). Batch dimensions of the three broadcast together.
        attn_mask: None, or an array that broadcasts to (B…, L, S): bool, where True
            means *may attend* (torch's SDPA polarity), or float, added to the scores.
        dropout_p: probability of zeroing each attention weight; kept weights are
            scaled by 1/(1 − dropout_p). Default 0.
        is_causal: mask keys j > i for query i, aligned top-left as in torch (query i
            sees keys 0..i even when L != S). Combined with ``attn_mask`` when both are
            given: a key is attended only if the mask AND the causal rule allow it.
        scale: multiplies Q·Kᵀ; default 1/√E.
        enable_gqa: grouped-query attention: query has H heads (dimension −3), key and
            value Hk heads with H a multiple of Hk; query head h uses key head h // (H/Hk).
        return_weights: also return the weights that multiplied V, (B…, L, S) (after
            dropout, as torch's MultiheadAttention returns them).
        return_lse: also return log Σ_j exp(scores_ij) of each row, (B…, L).
        rng: dropout randomness: a ``numpy.random.Generator``, or an int seed that gives
            the same mask every time (pass the same one to the backward). None draws
            fresh OS entropy.
        engine: "naive" (the whole (L, S) score matrix at once) or "tiled" (blocks of
            keys with an online softmax: O(L·Ev) extra memory, multi-threaded); None
            picks the faster for the shapes given (naive when weights are asked for).
        num_threads: threads of the tiled engine; default the ``ATTNLAB_NUM_THREADS``
            environment variable, else the machine's cores. Results are the same bits
            for any number.

    Returns:
        output (B…, L, Ev), followed by the weights and/or the lse when asked for, in
        that order. Same dtype as the inputs (float16 is computed in float32).

    A query row whose keys are all masked gives output 0, weights 0 and lse −inf
    (never NaN).
    """
    pb = make_problem(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, rng)
    threads = _threads(num_threads)
    if _choose_engine(engine, pb, return_weights) == "naive":
        with np.errstate(all="ignore"):  # non-finite inputs give NaN, never a warning
            output, weights, lse = _naive.forward(pb)
    else:
        output, lse = _tiled.forward(pb, threads)
    results = [output]
    if return_weights:
        results.append(weights)
    if return_lse:
        results.append(lse)
    results = [r.astype(pb.dtype, copy=False) for r in results]
    return results[0] if len(results) == 1 else tuple(results)


def _sum_to_shape(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Undo broadcasting: sum ``grad`` over the dimensions that ``shape`` broadcast along."""
    grad = grad.sum(axis=tuple(range(grad.ndim - len(shape))))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=stretched, keepdims=True) if stretched else grad


def _reduce_grads(
    pb: Problem, grads: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The engine's gradients (broadcast shapes, GQA heads expanded) in the inputs' shapes and dtype."""
    grad_query, grad_key, grad_value = grads
    if pb.groups > 1:  # sum each group of G query heads back onto its key/value head
        *batch, heads, S, E = grad_key.shape
        grad_key = grad_key.reshape(*batch, heads // pb.groups, pb.groups, S, E).sum(axis=-3)  # (B…, Hk, S, E)
        grad_value = grad_value.reshape(*batch, heads // pb.groups, pb.groups, S, -1).sum(axis=-3)  # (B…, Hk, S, Ev)
    return (
        _sum_to_shape(grad_query, pb.query.shape).astype(pb.dtype, copy=False),
        _sum_to_shape(grad_key, pb.key.shape).astype(pb.dtype, copy=False),
        _sum_to_shape(grad_value, pb.value.shape).astype(pb.dtype, copy=False),
    )


def scaled_dot_product_attention_backward(
    grad_output: Any,
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    dropout_p: float = 0.0,
    rng: int | None = None,
    engine: Engine | None = None,
    num_threads: int | None = None,
    output: Any = None,
    lse: Any = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of ``scaled_dot_product_attention`` for query, key and value.

    With P = softmax(S), S = scale · Q·Kᵀ + mask, O = P·V (dropout aside):

        dV = Pᵀ·dO,   dP = dO·Vᵀ,   dS = P∘(dP − rowsum(dO∘O)),
        dQ = scale · dS·K,   dK = scale · dSᵀ·Q.

    Arguments are those of the forward; ``grad_output`` has the output's shape
    (B…, L, Ev). With dropout, pass the forward's ``dropout_p`` and the same int seed
    as ``rng``: the mask is redrawn bit for bit. Each gradient has the shape of its
    input (broadcast dimensions summed, GQA groups summed onto their shared head) and
    its dtype. Fully-masked rows give zero, finite gradients.

    The tiled engine starts from the forward's ``output`` and ``lse`` (from
    ``return_lse=True``): pass them, or it recomputes them.
    """
    if isinstance(rng, np.random.Generator):
        raise fail(
            "rng", "the int seed the forward used (a Generator cannot replay its draw)", "a Generator", TypeError
        )
    if dropout_p and rng is None:
        raise fail("rng", "the forward's int seed when dropout_p > 0", None, TypeError)
    pb = make_problem(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, rng)
    L, _, Ev = pb.shape
    expected = (*pb.batch_shape, L, Ev)
    grad_output = float_array("grad_output", grad_output)
    if grad_output.shape != expected:
        raise fail("grad_output", f"the output's shape {expected}", f"shape {grad_output.shape}")
    if grad_output.dtype != pb.dtype:
        raise fail("grad_output", f"dtype {pb.dtype} as the inputs", f"dtype {grad_output.dtype}", TypeError)
    grad_output = grad_output.astype(pb.query.dtype, copy=False)
    if _choose_engine(engine, pb, False) == "naive":
        with np.errstate(all="ignore"):
            grads = _naive.backward(pb, grad_output)
    else:
        if output is not None and lse is not None:
            output = float_array("output", output).astype(pb.query.dtype, copy=False)
            lse = float_array("lse", lse, min_ndim=1).astype(pb.query.dtype, copy=False)
            if output.shape != expected or lse.shape != expected[:-1]:
                raise fail(
                    "output, lse",
                    f"the forward's shapes {expected} and {expected[:-1]}",
                    f"{output.shape} and {lse.shape}",
                )
        else:
            output = lse = None
        grads = _tiled.backward(pb, grad_output, output, lse, threads=_threads(num_threads))
    return _reduce_grads(pb, grads)
