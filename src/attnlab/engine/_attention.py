"""The attention call that carries its own backward.

    result = attention(q, k, v, is_causal=True)     # forward: result.output, result.lse
    dq, dk, dv = result.backward(grad_output)       # the exact gradients of that forward

The result holds the validated problem (with its dropout seed, so any ``rng`` replays),
the engine that ran and what that engine's backward needs, like micrograd's
``out._backward`` or ``jax.vjp``. Letters as in ``_problem``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np
from numpy.typing import ArrayLike

from .._validation import Array, MissingDependencyError, fail, flag, float_array, positive_int
from . import _naive, _tiled
from ._problem import Engine, Problem, make_problem
from .fused import _engine as _fused

__all__ = [
    "ENGINES",
    "FUSED_FROM",
    "FUSED_KEYS_PER_QUERY",
    "NAIVE_MAX_BYTES",
    "TILED_FROM",
    "TILED_TASK_FROM",
    "Attention",
    "Engine",
    "EngineImpl",
    "Gradients",
    "attention",
    "backward",
    "blocked_engine",
    "choose_engine",
]


class EngineImpl(Protocol):
    """One engine behind :func:`attention` and :func:`backward`, which look it up by name
    in ``ENGINES`` (one signature, many backends, as transformers' attention functions).
    Results are in the compute dtype over the broadcast batch shape, with the key and
    value heads expanded for GQA; letters as in ``_problem``."""

    @property
    def name(self) -> Engine:
        """The ``engine=`` value that asks for it."""
        ...

    @property
    def blocked(self) -> bool:
        """Whether it runs by blocks of keys: it never holds the (L, S) weights, and its
        backward starts from the forward's O and lse."""
        ...

    @property
    def requirement(self) -> str | None:
        """What it needs installed, said when it is not available (None: nothing)."""
        ...

    def available(self) -> bool:
        """Whether it can run here (its optional dependencies load)."""
        ...

    def forward(self, pb: Problem, threads: int | None) -> tuple[Array, Array, Array | None]:
        """(O (B…, L, Ev), lse (B…, L), the weights (B…, L, S), None if it never holds them)."""
        ...

    def backward(
        self, pb: Problem, grad_output: Array, saved: tuple[Array, Array] | None, threads: int | None
    ) -> tuple[Array, Array, Array]:
        """(dQ (B…, L, E), dK (B…, S, E), dV (B…, S, Ev)) from dO (B…, L, Ev), given the
        forward's (O, lse) as ``saved`` or None (recomputed where the engine needs them)."""
        ...


def _registry(*engines: EngineImpl) -> dict[Engine, EngineImpl]:
    return {engine.name: engine for engine in engines}


ENGINES = _registry(_naive.NAIVE, _tiled.TILED, _fused.FUSED)
_BLOCKED_FASTEST_FIRST: tuple[_tiled.BlockedEngine, ...] = (_fused.FUSED, _tiled.TILED)
# engine=None's cost model, fitted to the table of `attnlab bench --engine-table`
# (docs/engine-choice.json). The naive engine pays nothing per slice but holds every score;
# a blocked engine computes faster (its exponentials run on every core, in cache) once
# there are enough scores in all: few for the fused one, whose tasks are compiled whole
# when there is no mask and no dropout, more for the tiled one (and the fused one with a
# mask or dropout), which pays about 40 µs of Python per task (one slice's block of up to
# BLOCK_Q queries) and so also needs enough scores per task. The fused engine's
# products are thin when a slice has few queries for its keys (decoding: one query against
# a long cache), where the naive engine's batched products win. A blocked engine is taken
# regardless when the naive engine's scores would not fit in memory comfortably.
FUSED_FROM = 2**18  # scores (B·H·L·S) in all
FUSED_KEYS_PER_QUERY = 64  # at most this many keys S per query of a task, min(L, BLOCK_Q)
# tiled: scores at E = 64, fewer in proportion for narrower heads (the naive engine's own
# softmax weighs more there), and half as many when causal (the tiled engine skips half)
TILED_FROM = 2**21
TILED_TASK_FROM = 2**17  # scores per task, min(L, BLOCK_Q)·S
NAIVE_MAX_BYTES = 2**31  # the naive engine's score matrix


class Gradients(NamedTuple):
    """dQ, dK and dV, each in the shape and dtype of its input."""

    query: Array
    key: Array
    value: Array


@dataclass(frozen=True, repr=False)
class Attention:
    """One attention forward: its results, and :meth:`backward` for its gradients.

    Attributes:
        output: O, (B…, L, Ev), in the inputs' dtype, the caller's to change. The result
            keeps references to q, k and v: changing them in place before ``backward``
            changes the gradients (copy them first if you must).
        lse: log Σ_j exp(Z_ij) of each row, (B…, L), in the compute dtype (float32 for
            float16 inputs, so that the backward keeps every digit); −inf for a row
            whose keys are all masked. Read-only: the backward uses it.
        weights: the weights that multiplied V (after dropout), (B…, L, S), in the
            inputs' dtype; None unless ``need_weights=True``.
        problem: the validated arguments, including the dropout seed drawn for this call.
        engine: "naive", "tiled" or "fused", the engine that ran.
        num_threads: the blocked engines' thread count (None: the default).
        exact_output: O in the compute dtype, read-only: what the backward starts from
            (``output`` is its copy in the inputs' dtype).
    """

    problem: Problem
    engine: Engine
    lse: Array
    weights: Array | None
    num_threads: int | None
    exact_output: Array = field(repr=False)  # O in the compute dtype, read-only: what the backward's δ needs

    @functools.cached_property
    def output(self) -> Array:
        """O in the inputs' dtype: the caller's own copy, which the backward never reads."""
        return self.exact_output.astype(self.problem.result_dtype, copy=True)

    def backward(self, grad_output: ArrayLike) -> Gradients:
        """dQ, dK, dV of Σ grad_output∘O, each in the shape and dtype of its input
        (broadcast dimensions summed, GQA groups summed onto their shared head).

        Args:
            grad_output: dO, of the output's shape (B…, L, Ev) and dtype.

        Raises:
            ValueError: ``grad_output`` is not of the output's shape.
            TypeError: ``grad_output`` is not of the inputs' dtype.
        """
        return backward(self.problem, self.engine, grad_output, (self.exact_output, self.lse), self.num_threads)

    def __repr__(self) -> str:
        shape = "×".join(map(str, self.problem.output_shape))
        return f"Attention(output {shape} {self.problem.result_dtype}, engine={self.engine!r})"


def blocked_engine() -> _tiled.BlockedEngine:
    """The fastest blocked engine that is available here: fused, else tiled."""
    return next(engine for engine in _BLOCKED_FASTEST_FIRST if engine.available())


def _fastest(pb: Problem) -> Engine:
    """The cost model above, for a call that does not need the weights."""
    L, S = pb.lengths
    scores = pb.slices * L * S
    if scores < FUSED_FROM:
        return "naive"  # without asking whether numba loads: its import takes 0.2 s
    blocked = blocked_engine()
    if scores * pb.compute_dtype.itemsize > NAIVE_MAX_BYTES:
        return blocked.name
    queries = min(L, _tiled.BLOCK_Q)  # per task
    if blocked.compiled and pb.plain:  # tasks compiled whole
        return blocked.name if queries * FUSED_KEYS_PER_QUERY >= S else "naive"
    # the tiled engine, or the fused one running the tiled engine's loop in Python
    work = scores * 64 / max(min(pb.query.shape[-1], 64), 1) * (2 if pb.is_causal else 1)
    return blocked.name if work >= TILED_FROM and queries * S >= TILED_TASK_FROM else "naive"


def choose_engine(engine: Any, pb: Problem, need_weights: bool) -> Engine:
    """The engine asked for, or the faster one for these shapes (the cost model above;
    docs/design.md, "Engines"), by its name in ``ENGINES``.

    Raises:
        ValueError: an engine not in ``ENGINES``, or a blocked one with ``need_weights``.
        MissingDependencyError: an engine whose dependencies are not installed.
    """
    if engine is None:
        return "naive" if need_weights else _fastest(pb)
    if not isinstance(engine, str) or engine not in ENGINES:  # a str: the registry is a dict
        raise fail("engine", f"one of {tuple(ENGINES)} or None", repr(engine))
    asked = ENGINES[engine]
    if asked.blocked and need_weights:
        raise fail(
            "need_weights",
            f"False with engine={engine!r} (it never holds the (L, S) weights; use engine='naive' or None)",
            True,
        )
    if not asked.available():
        raise MissingDependencyError(f"engine={engine!r} needs {asked.requirement}")
    return asked.name


def _threads(num_threads: Any) -> int | None:
    return None if num_threads is None else positive_int("num_threads", num_threads)


def attention(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    *,
    attn_mask: ArrayLike | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    dropout_p: float = 0.0,
    rng: int | np.random.Generator | None = None,
    need_weights: bool = False,
    engine: Engine | None = None,
    num_threads: int | None = None,
) -> Attention:
    """O = dropout(softmax(scale · Q·Kᵀ + mask))·V, as an :class:`Attention` result that
    can give its own gradients.

    The dropout mask is drawn once and replayed by :meth:`Attention.backward`.

    Args:
        query: Q, (B…, L, E).
        key: K, (B…, S, E).
        value: V, (B…, S, Ev); the batch dimensions of the three broadcast together.
        attn_mask: None, or an array that broadcasts to (B…, L, S): bool (True: may
            attend, torch's polarity) or float (added to the scores). Keyword-only, as
            every argument after the three arrays.
        is_causal: query i attends to keys 0..i only (top-left aligned, as torch);
            combined with ``attn_mask`` when both are given.
        scale: multiplies Q·Kᵀ; default 1/√E.
        enable_gqa: grouped-query attention: H query heads over Hk key/value heads, H a
            multiple of Hk.
        dropout_p: probability of zeroing each weight (kept ones scaled by 1/(1 − p)); default 0.
        rng: the dropout's randomness: a ``numpy.random.Generator``, an int seed, or None
            (fresh entropy).
        need_weights: keep the (B…, L, S) weights that multiplied V (``result.weights``).
        engine: "naive", "tiled" or "fused"; None picks the faster for the shapes.
        num_threads: threads of the blocked engines; default ``ATTNLAB_NUM_THREADS``, else
            the machine's cores (the same bits for any number).

    Returns:
        An :class:`Attention`: ``output`` (B…, L, Ev), ``lse`` (B…, L), ``weights``, and
        ``backward(grad_output)``.

    Raises:
        ValueError: a shape, length, probability or engine that cannot be used.
        TypeError: an argument of the wrong type or dtype (flags must be bools).
    """
    pb = make_problem(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, rng)
    need_weights = flag("need_weights", need_weights)
    threads = _threads(num_threads)
    chosen = choose_engine(engine, pb, need_weights)
    output, lse, all_weights = ENGINES[chosen].forward(pb, threads)
    weights = all_weights.astype(pb.result_dtype, copy=False) if need_weights and all_weights is not None else None
    output.flags.writeable = lse.flags.writeable = False  # the backward's: see Attention.output
    return Attention(pb, chosen, lse, weights, threads, exact_output=output)


def _sum_to_shape(grad: Array, shape: tuple[int, ...]) -> Array:
    """Undo broadcasting: sum ``grad`` over the dimensions that ``shape`` broadcast along."""
    grad = grad.sum(axis=tuple(range(grad.ndim - len(shape))))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=stretched, keepdims=True) if stretched else grad


def backward(
    pb: Problem,
    engine: Engine,
    grad_output: ArrayLike,
    saved: tuple[Array, Array] | None,
    num_threads: Any = None,
) -> Gradients:
    """The gradients of attention over ``pb``; see :meth:`Attention.backward`. ``saved`` is
    the forward's (O, lse) in the compute dtype, which the tiled engine starts from (None:
    it recomputes them; the naive engine recomputes the weights in any case)."""
    threads = _threads(num_threads)
    grad_output = float_array("grad_output", grad_output)
    if grad_output.shape != pb.output_shape:
        raise fail("grad_output", f"the output's shape {pb.output_shape}", f"shape {grad_output.shape}")
    if grad_output.dtype != pb.result_dtype:
        raise fail("grad_output", f"dtype {pb.result_dtype} as the inputs", f"dtype {grad_output.dtype}", TypeError)
    grad_output = grad_output.astype(pb.compute_dtype, copy=False)
    grad_query, grad_key, grad_value = ENGINES[engine].backward(pb, grad_output, saved, threads)
    if pb.groups > 1:  # sum each group of G query heads back onto its key/value head
        *batch, H, S, E = grad_key.shape
        grad_key = grad_key.reshape(*batch, H // pb.groups, pb.groups, S, E).sum(axis=-3)  # (B…, Hk, S, E)
        grad_value = grad_value.reshape(*batch, H // pb.groups, pb.groups, S, -1).sum(axis=-3)  # (B…, Hk, S, Ev)
    return Gradients(
        *(
            _sum_to_shape(grad, x.shape).astype(pb.result_dtype, copy=False)
            for grad, x in zip((grad_query, grad_key, grad_value), (pb.query, pb.key, pb.value), strict=True)
        )
    )
