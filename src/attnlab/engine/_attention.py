"""The attention call that carries its own backward.

    result = attention(q, k, v, is_causal=True)     # forward: result.output, result.lse
    dq, dk, dv = result.backward(grad_output)       # the exact gradients of that forward

The result holds the validated problem (with its dropout seed, so any ``rng`` replays),
the engine that ran and what that engine's backward needs, like micrograd's
``out._backward`` or ``jax.vjp``. Letters as in ``_problem``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from .._validation import Array, MissingDependencyError, fail, flag, float_array, positive_int
from . import _naive, _ragged, _tiled
from ._problem import Engine, Problem, Saved, make_problem, sum_to_shape
from .fused import _decode
from .fused import _engine as _fused
from .variants import Alignment, MaskMod, Rules
from .variants.sinks import sinks_gradient

__all__ = [
    "DECODE_FROM_BYTES",
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
    "engine_problem",
    "row_scale_backward",
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
        self, pb: Problem, grad_output: Array, saved: Saved, threads: int | None
    ) -> tuple[Array, Array, Array, Array | None]:
        """(dQ (B…, L, E), dK (B…, S, E), dV (B…, S, Ev), the float mask's gradient summed
        to its shape or None) from dO (B…, L, Ev) and the forward's ``saved`` results."""
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
# products are thin when a slice has few queries for its keys, where the naive engine's
# batched products win (decoding, a few queries against a long cache, has the fused
# engine's decode path instead: DECODE_FROM_BYTES below), and when a slice has so
# few scores that the fused engine's cost per slice outweighs them (70,000 heads of 4
# tokens: naive 24 ms, fused 46 ms; of 8 tokens they tie; of 16, fused 132 ms, naive 218).
# A blocked engine is taken regardless when the naive engine's scores would not fit in
# memory comfortably.
FUSED_FROM = 2**18  # scores (B·H·L·S) in all
FUSED_KEYS_PER_QUERY = 64  # at most this many keys S per query of a task, min(L, BLOCK_Q)
FUSED_TASK_FROM = 64  # and at least this many scores per task, min(L, BLOCK_Q)·S
# tiled: scores at E = 64, fewer in proportion for narrower heads (the naive engine's own
# softmax weighs more there), and fewer in proportion to the scores it skips (half when causal)
TILED_FROM = 2**21
TILED_TASK_FROM = 2**17  # scores per task, min(L, BLOCK_Q)·S
NAIVE_MAX_BYTES = 2**31  # the naive engine's score matrix
# The fused engine's decode path (``fused._decode``: a few queries against a long cache,
# read once) from this many bytes of keys and values read in all: below, the naive engine's
# few products cost less than the threads' start
DECODE_FROM_BYTES = 2**20


@dataclass(frozen=True, eq=False)
class Gradients:
    """The gradients of one attention backward, each in the shape of its input and in the
    inputs' dtype (that of query, key and value). It unpacks as ``dq, dk, dv = grads`` (and indexes as that triple).

    Attributes:
        query: dQ.
        key: dK (GQA groups summed onto their shared head).
        value: dV.
        attn_mask: the gradient of a float ``attn_mask``, summed to its shape; None for a
            bool mask or none.
        sinks: the gradient of ``sinks``, (H,); None without sinks.
        length_scale: the gradient of ``length_scale``'s s, (H,); None without it.
    """

    query: Array
    key: Array
    value: Array
    attn_mask: Array | None = None
    sinks: Array | None = None
    length_scale: Array | None = None

    def __iter__(self) -> Iterator[Array]:
        return iter((self.query, self.key, self.value))

    def __len__(self) -> int:
        return 3

    def __getitem__(self, index: int) -> Array:
        return (self.query, self.key, self.value)[index]


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

    def backward(self, grad_output: ArrayLike, grad_lse: ArrayLike | None = None) -> Gradients:
        """The gradients of Σ grad_output∘O + Σ grad_lse∘lse, each in the shape of its
        input (broadcast dimensions summed, GQA groups summed onto their shared head) and
        in the inputs' dtype: dQ, dK, dV, and those of a float ``attn_mask``, of ``sinks`` and
        of ``length_scale``.

        Args:
            grad_output: dO, of the output's shape (B…, L, Ev) and dtype.
            grad_lse: dlse, of the lse's shape (B…, L), for a caller that uses the lse
                (merging partial results, emulating sinks); None: 0.

        Raises:
            ValueError: ``grad_output`` or ``grad_lse`` is not of its result's shape.
            TypeError: ``grad_output`` is not of the inputs' dtype.
        """
        saved = (self.exact_output, self.lse)
        return backward(self.problem, self.engine, grad_output, saved, self.num_threads, grad_lse)

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
    if _decode.decodes(pb):
        cache = (pb.slices // pb.groups) * S * (pb.query.shape[-1] + pb.value.shape[-1]) * pb.compute_dtype.itemsize
        if (cache >= DECODE_FROM_BYTES or pb.key_lengths is not None) and _fused.available():
            return "fused"
    if scores < FUSED_FROM:
        return "naive"  # without asking whether numba loads: its import takes 0.2 s
    blocked = blocked_engine()
    if scores * pb.compute_dtype.itemsize > NAIVE_MAX_BYTES:
        return blocked.name
    queries = min(L, _tiled.BLOCK_Q)  # per task
    if blocked.compiled and pb.compiles_whole:  # tasks compiled whole
        fits = queries * FUSED_KEYS_PER_QUERY >= S and queries * S >= FUSED_TASK_FROM
        return blocked.name if fits else "naive"
    # the tiled engine, or the fused one running the tiled engine's loop in Python
    # the tiled engine skips the blocks outside the band of is_causal and the window (half when causal)
    skipped = round(L * S / max(pb.visible_scores(), 1), 1)  # to a tenth: causal L = S is 2
    work = scores * 64 / max(min(pb.query.shape[-1], 64), 1) * skipped
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
    causal_alignment: Alignment = "top_left",
    window: tuple[int | None, int | None] | None = None,
    softcap: float | None = None,
    alibi_slopes: ArrayLike | None = None,
    sinks: ArrayLike | None = None,
    mask_mod: MaskMod | None = None,
    key_lengths: ArrayLike | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    dropout_p: float = 0.0,
    rng: int | np.random.Generator | None = None,
    need_weights: bool = False,
    engine: Engine | None = None,
    num_threads: int | None = None,
    rules: Rules | None = None,
) -> Attention:
    """O = dropout(softmax(Z))·V with Z = softcap(scale·Q·Kᵀ) + float mask + ALiBi, −∞
    where a mask rules a key out, as an :class:`Attention` result that can give its own
    gradients.

    Positions are measured from the diagonal: d = j − (i + offset) for query i and key j,
    offset 0 with ``causal_alignment="top_left"`` and S − L with ``"bottom_right"``. A row
    with no key allowed gives output 0 and lse −∞ (the sink's logit with sinks). The
    dropout mask is drawn once and replayed by :meth:`Attention.backward`.

    Args:
        query: Q, (B…, L, E); the last batch dimension is the H query heads.
        key: K, (B…, S, E).
        value: V, (B…, S, Ev); the batch dimensions of the three broadcast together.
        attn_mask: None, or an array that broadcasts to (B…, L, S): bool (True: may
            attend, torch's polarity) or float (added to the scores, with a gradient).
            Keyword-only, as every argument after the three arrays.
        is_causal: query i attends to keys d <= 0 only; combined with every other mask.
        causal_alignment: "top_left" (torch's ``is_causal``) or "bottom_right"
            (flash-attn's, torch's ``causal_lower_right``): the diagonal of
            ``is_causal``, ``window`` and ALiBi.
        window: (left, right): query i attends to keys −left <= d <= right only; None on
            a side is unbounded.
        softcap: c > 0: scale·Q·Kᵀ becomes c·tanh(scale·Q·Kᵀ / c) before any bias.
        alibi_slopes: (H,) or (B, H): adds −slope·|d| to the scores.
        sinks: (H,): one logit per query head that joins every row's softmax and is then
            dropped: lse = log(Σ_j e^{Z_ij} + e^{sink}).
        mask_mod: FlexAttention's ``mask_mod(batch, head, q_idx, kv_idx)``, called on
            integer NumPy arrays that broadcast together (batch indexes the flattened
            dimensions before the heads), returning a bool array of their shape: True
            where the query may attend the key. Blocks it rules out are skipped.
        key_lengths: the keys of each sequence in a padded cache, integers in [0, S] of
            shape B… without the heads ((B,) for (B, H, L, E) inputs), flash-attn's
            ``cache_seqlens``: sequence b attends to its keys j < key_lengths[b] only
            (those after are never read and have gradient 0), and with
            ``causal_alignment="bottom_right"`` its diagonal is that of its own length,
            offset key_lengths[b] − L (its last query sees its last key). None: every
            sequence has S. Not with dropout.
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
        rules: the variants as one ``engine.variants.Rules`` (a variant registered from
            outside the package goes in its ``extra``), in place of their keywords, which
            must then be left at their defaults; None: built from the keywords.

    Returns:
        An :class:`Attention`: ``output`` (B…, L, Ev), ``lse`` (B…, L), ``weights``, and
        ``backward(grad_output, grad_lse=None)``.

    Raises:
        ValueError: a shape, length, probability, engine, negative window side,
            softcap, alignment, ALiBi or sinks shape that cannot be used, key lengths
            outside [0, S] or not of the sequences' shape, or with dropout, a ``mask_mod``
            that does not return a bool array of the block's shape.
        TypeError: an argument of the wrong type or dtype (flags must be bools).
    """
    given = Rules(is_causal=is_causal, causal_alignment=causal_alignment, window=window, softcap=softcap,
                  alibi_slopes=alibi_slopes, sinks=sinks, mask_mod=mask_mod)  # fmt: skip
    pb = make_problem(
        query, key, value, attn_mask, dropout_p, scale, enable_gqa, rng, given.unless(rules), key_lengths=key_lengths
    )  # fmt: skip
    need_weights = flag("need_weights", need_weights)
    threads = _threads(num_threads)
    chosen = choose_engine(engine, pb, need_weights)
    output, lse, all_weights = _forward(ENGINES[chosen], engine_problem(pb)[0], threads)
    weights = all_weights.astype(pb.result_dtype, copy=False) if need_weights and all_weights is not None else None
    output.flags.writeable = lse.flags.writeable = False  # the backward's: see Attention.output
    return Attention(pb, chosen, lse, weights, threads, exact_output=output)


def engine_problem(pb: Problem) -> tuple[Problem, Array | None]:
    """The problem the engines run, and m (B…, L), the multiplier of its query rows:
    ``pb`` with Q's rows times the product of its variants' row scales
    (``Variant.row_scale``), which every engine, compiled or not, so takes as it is;
    (``pb``, None) without one."""
    scales = [scale for scale in (v.row_scale(value, pb) for v, value in pb.rules.variants) if scale is not None]
    if not scales:
        return pb, None
    multiplier = functools.reduce(np.multiply, scales)  # m, (B…, L)
    L, E = pb.query.shape[-2:]
    query = np.broadcast_to(pb.query, (*pb.batch_shape, L, E)) * multiplier[..., None]  # m_i·q_i, (B…, L, E)
    return dataclasses.replace(pb, query=query), multiplier


def row_scale_backward(pb: Problem, multiplier: Array | None, grad_scaled: Array) -> tuple[Array, dict[str, Array]]:
    """dQ from dQ' (B…, L, E), the gradient of the engines' query rows Q' = m∘Q
    (:func:`engine_problem`): m∘dQ'; and the gradients of the row-scaling variants' values
    by name, in the inputs' dtype, from dL/dm_i = q_i·dq'_i. (dQ', {}) without a row scale."""
    if multiplier is None:
        return grad_scaled, {}
    grad_scale = np.einsum("...le,...le->...l", np.broadcast_to(pb.query, grad_scaled.shape), grad_scaled)  # (B…, L)
    of_variants = {}
    for variant, value in pb.rules.variants:
        grad = variant.row_scale_gradient(value, pb, grad_scale)
        if grad is not None:
            of_variants[variant.name] = grad.astype(pb.result_dtype, copy=False)
    return grad_scaled * multiplier[..., None], of_variants


def _forward(impl: EngineImpl, pb: Problem, threads: int | None) -> tuple[Array, Array, Array | None]:
    """``impl``'s forward of ``pb``; with key lengths, one sequence at a time unless the
    fused engine's decode path takes them (``_ragged``)."""
    if pb.key_lengths is None or (impl is _fused.FUSED and _decode.decodes(pb)):
        return impl.forward(pb, threads)
    return _ragged.forward(pb, lambda sequence: impl.forward(sequence, threads))


def backward(
    pb: Problem,
    engine: Engine,
    grad_output: ArrayLike,
    saved: tuple[Array, Array] | None,
    num_threads: Any = None,
    grad_lse: ArrayLike | None = None,
) -> Gradients:
    """The gradients of attention over ``pb``; see :meth:`Attention.backward`. ``saved`` is
    the forward's (O, lse) in the compute dtype, which the blocked engines start from
    (None: recomputed; the naive engine recomputes the weights in any case).

    The sinks' gradient needs no engine: with P_sink = e^{s − lse_i} the sink's weight in
    row i, d sink = −Σ_i P_sink·δ_i, summed over the slices of each head. Nor does a row
    scale's (:func:`engine_problem`): the engines give dQ' of Q' = m∘Q, so dQ = m∘dQ' and
    dL/dm_i = q_i·dq'_i, from which its variant's gradient follows (``row_scale_gradient``)."""
    threads = _threads(num_threads)
    grad_output = float_array("grad_output", grad_output)
    if grad_output.shape != pb.output_shape:
        raise fail("grad_output", f"the output's shape {pb.output_shape}", f"shape {grad_output.shape}")
    if grad_output.dtype != pb.result_dtype:
        raise fail("grad_output", f"dtype {pb.result_dtype} as the inputs", f"dtype {grad_output.dtype}", TypeError)
    grad_output = grad_output.astype(pb.compute_dtype, copy=False)
    impl = ENGINES[engine]
    run, multiplier = engine_problem(pb)
    output, lse = _forward(impl, run, threads)[:2] if saved is None else saved
    delta = np.einsum("...le,...le->...l", grad_output, output)  # rowsum(dO∘O), (B…, L)
    d_lse = None
    if grad_lse is not None:
        d_lse = float_array("grad_lse", grad_lse, min_ndim=1).astype(pb.compute_dtype, copy=False)
        if d_lse.shape != lse.shape:
            raise fail("grad_lse", f"the lse's shape {lse.shape}", f"shape {d_lse.shape}")
        delta -= d_lse
    saved_results = Saved(output, lse, delta, d_lse)
    if pb.key_lengths is None:
        grad_query, grad_key, grad_value, grad_mask = impl.backward(run, grad_output, saved_results, threads)
    else:
        grad_query, grad_key, grad_value, grad_mask = _ragged.backward(
            run, grad_output, saved_results, lambda sequence, d_out, part: impl.backward(sequence, d_out, part, threads)
        )
    grad_query, of_variants = row_scale_backward(pb, multiplier, grad_query)
    if pb.groups > 1:  # sum each group of G query heads back onto its key/value head
        *batch, H, S, E = grad_key.shape
        grad_key = grad_key.reshape(*batch, H // pb.groups, pb.groups, S, E).sum(axis=-3)  # (B…, Hk, S, E)
        grad_value = grad_value.reshape(*batch, H // pb.groups, pb.groups, S, -1).sum(axis=-3)  # (B…, Hk, S, Ev)
    grad_sinks = None
    sinks = pb.rules["sinks"]
    if sinks is not None:
        grad_sinks = sinks_gradient(sinks, lse, delta, pb.slices, pb.heads)
    result = pb.result_dtype
    grad_query, grad_key, grad_value = (  # the engine's own arrays: summed (a copy) only where broadcast
        (grad if grad.shape == x.shape else sum_to_shape(grad, x.shape)).astype(result, copy=False)
        for grad, x in zip((grad_query, grad_key, grad_value), (pb.query, pb.key, pb.value), strict=True)
    )
    return Gradients(
        grad_query,
        grad_key,
        grad_value,
        attn_mask=None if grad_mask is None else grad_mask.astype(result, copy=False),
        sinks=None if grad_sinks is None else grad_sinks.astype(result, copy=False),
        **of_variants,
    )
