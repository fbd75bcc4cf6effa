"""Scaled dot-product attention with PyTorch's semantics, and its exact backward.

    Attention(Q, K, V) = dropout(softmax(scale · Q·Kᵀ + mask)) · V

``attention`` returns a result that carries its own backward; the two torch-shaped
functions below are thin wrappers over it. Shapes (letters in ``attnlab.engine._problem``):
query (B…, L, E), key (B…, S, E), value (B…, S, Ev) -> output (B…, L, Ev); the batch
dimensions broadcast as in NumPy.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np
from numpy.typing import ArrayLike

from ._exceptions import deprecated
from ._validation import Array, fail, flag, float_array, probability
from .engine._attention import Attention, Engine, Gradients, attention, backward, choose_engine
from .engine._problem import make_problem
from .engine._softmax import softmax
from .engine.variants import Alignment, MaskMod, Rules

__all__ = [
    "Attention",
    "Gradients",
    "attention",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
    "softmax",
]


class _Unset(enum.Enum):
    """The default of an argument whose absence must be told from every value, None included."""

    UNSET = "unset"

    def __repr__(self) -> str:
        return self.value


_UNSET = _Unset.UNSET


if TYPE_CHECKING:
    from typing_extensions import TypedDict, Unpack

    class _Options(TypedDict, total=False):
        """The keyword-only arguments of :func:`scaled_dot_product_attention` that leave
        the type of its result alone (the overloads' common tail)."""

        window: tuple[int | None, int | None] | None
        causal_alignment: Alignment
        softcap: float | None
        alibi_slopes: ArrayLike | None
        sinks: ArrayLike | None
        mask_mod: MaskMod | None
        key_lengths: ArrayLike | None
        rng: int | np.random.Generator | None
        engine: Engine | None
        num_threads: int | None
        rules: Rules | None


# the result's type from need_weights and return_lse (return_weights: need_weights' old name)
@overload
def scaled_dot_product_attention(
    query: ArrayLike, key: ArrayLike, value: ArrayLike, attn_mask: ArrayLike | None = ..., dropout_p: float = ...,
    is_causal: bool = ..., scale: float | None = ..., enable_gqa: bool = ..., *,
    need_weights: Literal[False] | _Unset = ..., return_lse: Literal[False] = ..., **options: Unpack[_Options],
) -> Array: ...  # fmt: skip
@overload
def scaled_dot_product_attention(
    query: ArrayLike, key: ArrayLike, value: ArrayLike, attn_mask: ArrayLike | None = ..., dropout_p: float = ...,
    is_causal: bool = ..., scale: float | None = ..., enable_gqa: bool = ..., *,
    need_weights: Literal[True], return_lse: Literal[False] = ..., **options: Unpack[_Options],
) -> tuple[Array, Array]: ...  # fmt: skip
@overload
def scaled_dot_product_attention(
    query: ArrayLike, key: ArrayLike, value: ArrayLike, attn_mask: ArrayLike | None = ..., dropout_p: float = ...,
    is_causal: bool = ..., scale: float | None = ..., enable_gqa: bool = ..., *,
    need_weights: Literal[False] | _Unset = ..., return_lse: Literal[True], **options: Unpack[_Options],
) -> tuple[Array, Array]: ...  # fmt: skip
@overload
def scaled_dot_product_attention(
    query: ArrayLike, key: ArrayLike, value: ArrayLike, attn_mask: ArrayLike | None = ..., dropout_p: float = ...,
    is_causal: bool = ..., scale: float | None = ..., enable_gqa: bool = ..., *,
    need_weights: Literal[True], return_lse: Literal[True], **options: Unpack[_Options],
) -> tuple[Array, Array, Array]: ...  # fmt: skip
@overload
def scaled_dot_product_attention(
    query: ArrayLike, key: ArrayLike, value: ArrayLike, attn_mask: ArrayLike | None = ..., dropout_p: float = ...,
    is_causal: bool = ..., scale: float | None = ..., enable_gqa: bool = ..., *,
    return_lse: bool = ..., return_weights: bool, **options: Unpack[_Options],
) -> Array | tuple[Array, ...]: ...  # fmt: skip
def scaled_dot_product_attention(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    attn_mask: ArrayLike | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    window: tuple[int | None, int | None] | None = None,
    causal_alignment: Alignment = "top_left",
    softcap: float | None = None,
    alibi_slopes: ArrayLike | None = None,
    sinks: ArrayLike | None = None,
    mask_mod: MaskMod | None = None,
    key_lengths: ArrayLike | None = None,
    need_weights: bool | _Unset = _UNSET,
    return_lse: bool = False,
    rng: int | np.random.Generator | None = None,
    engine: Engine | None = None,
    num_threads: int | None = None,
    return_weights: bool | _Unset = _UNSET,
    rules: Rules | None = None,
) -> Array | tuple[Array, ...]:
    """softmax(scale · Q·Kᵀ + mask) · V, as ``torch.nn.functional.scaled_dot_product_attention``,
    and the variants of flash-attn and FlexAttention (keyword-only; see :func:`attention`).

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
        window: (left, right): query i attends to keys −left <= j − (i + offset) <= right
            only; None on a side is unbounded (the offset: see ``causal_alignment``).
        causal_alignment: "top_left" (offset 0, torch's ``is_causal``) or "bottom_right"
            (offset S − L, flash-attn's and torch's ``causal_lower_right``).
        softcap: c > 0: the scores become c·tanh(scale·Q·Kᵀ / c) before any bias.
        alibi_slopes: (H,) or (B, H): adds −slope·|j − (i + offset)| to the scores.
        sinks: (H,): one logit per query head joined to every row's softmax, then dropped.
        mask_mod: FlexAttention's ``mask_mod(batch, head, q_idx, kv_idx) -> bool array``,
            called on broadcast integer NumPy arrays; True where the query may attend.
        key_lengths: the keys of each sequence of a padded KV cache, integers in [0, S]
            of shape B… without the heads ((B,) for (B, H, L, E) inputs): flash-attn's
            ``cache_seqlens``. Sequence b sees its keys j < key_lengths[b] only (those
            after are never read), and with ``causal_alignment="bottom_right"`` its
            diagonal is at its own length: its last query sees key key_lengths[b] − 1.
        need_weights: also return the weights that multiplied V, (B…, L, S) (after
            dropout, as torch's MultiheadAttention returns them); default False.
        return_lse: also return log Σ_j exp(scores_ij) of each row, (B…, L), in the
            compute dtype (float32 for float16 inputs).
        rng: dropout randomness: a ``numpy.random.Generator``, or an int seed that gives
            the same mask every time (pass the same one to the backward). None draws
            fresh OS entropy.
        engine: "naive" (the whole (L, S) score matrix at once), "tiled" (blocks of
            keys with an online softmax: O(L·Ev) extra memory, multi-threaded) or "fused"
            (the tiled engine compiled by numba: ``attnlab[fast]``); None picks the faster
            for the shapes given (naive when weights are asked for).
        num_threads: threads of the blocked engines; default the ``ATTNLAB_NUM_THREADS``
            environment variable, else the machine's cores. Results are the same bits
            for any number.
        return_weights: the deprecated name of ``need_weights`` (a DeprecationWarning;
            removed in the next release).
        rules: the variants as one ``engine.variants.Rules``, in place of their keywords
            (not both), as :func:`attention` takes it.

    Returns:
        output (B…, L, Ev), followed by the weights and/or the lse when asked for, in
        that order. Same dtype as the inputs (float16 is computed in float32).
        A query row whose keys are all masked gives output 0, weights 0 and lse −inf
        (the sink's logit with sinks).

    Raises:
        ValueError: shapes that do not fit together, a probability outside [0, 1), an
            unknown engine, weights asked of a blocked engine (tiled or fused), a variant
            that cannot be used (as :func:`attention`).
        TypeError: an argument of the wrong type or dtype (flags must be bools), both
            ``need_weights`` and ``return_weights``.
    """
    need_weights, return_lse = _need_weights(need_weights, return_weights), flag("return_lse", return_lse)
    result = attention(
        query,
        key,
        value,
        attn_mask=attn_mask,
        dropout_p=dropout_p,
        is_causal=is_causal,
        causal_alignment=causal_alignment,
        window=window,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        sinks=sinks,
        mask_mod=mask_mod,
        key_lengths=key_lengths,
        scale=scale,
        enable_gqa=enable_gqa,
        need_weights=need_weights,
        rng=rng,
        engine=engine,
        num_threads=num_threads,
        rules=rules,
    )
    results = [result.output]
    if result.weights is not None:
        results.append(result.weights)
    if return_lse:
        results.append(result.lse.copy())  # the result keeps its own, read-only
    return results[0] if len(results) == 1 else tuple(results)


def _need_weights(need_weights: Any, return_weights: Any) -> bool:
    """``need_weights`` (default False), or in its place ``return_weights``, its name until
    this release, with a DeprecationWarning. Both given is a TypeError naming both."""
    if return_weights is _UNSET:
        return flag("need_weights", False if need_weights is _UNSET else need_weights)
    if need_weights is not _UNSET:
        raise fail(
            "need_weights, return_weights",
            "one of them (return_weights is need_weights' deprecated name)",
            "both",
            TypeError,
        )
    deprecated("scaled_dot_product_attention's return_weights", "need_weights (torch's name)", stacklevel=3)
    return flag("return_weights", return_weights)


def scaled_dot_product_attention_backward(
    grad_output: ArrayLike, query: ArrayLike, key: ArrayLike, value: ArrayLike, attn_mask: ArrayLike | None = None,
    is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False, *,
    window: tuple[int | None, int | None] | None = None, causal_alignment: Alignment = "top_left",
    softcap: float | None = None, alibi_slopes: ArrayLike | None = None, sinks: ArrayLike | None = None,
    mask_mod: MaskMod | None = None, key_lengths: ArrayLike | None = None, dropout_p: float = 0.0,
    rng: int | None = None, engine: Engine | None = None, num_threads: int | None = None,
    output: ArrayLike | None = None, lse: ArrayLike | None = None, grad_lse: ArrayLike | None = None,
    rules: Rules | None = None,
) -> Gradients:  # fmt: skip
    """Gradients of ``scaled_dot_product_attention`` for query, key and value, and for a
    float ``attn_mask`` and ``sinks`` when given.

    With P = softmax(Z), Z = softcap(scale · Q·Kᵀ) + biases, O = P·V (dropout aside):

        dV = Pᵀ·dO,   dP = dO·Vᵀ,   dZ = P∘(dP − rowsum(dO∘O) + dlse)   (= d attn_mask),
        dX = dZ∘softcap′,   dQ = scale · dX·K,   dK = scale · dXᵀ·Q.

    With dropout, pass the forward's ``dropout_p`` and the same int seed as ``rng``: the
    mask is redrawn bit for bit (``attention(...).backward`` needs no seed and takes any
    rng).

    Args:
        grad_output: dO, of the output's shape (B…, L, Ev).
        query: (B…, L, E), as given to the forward.
        key: (B…, S, E), as given to the forward.
        value: (B…, S, Ev), as given to the forward.
        attn_mask: the forward's mask (None, bool: True may attend, or float, added).
        is_causal: the forward's causal flag.
        scale: the forward's scale; default 1/√E.
        enable_gqa: the forward's grouped-query flag.
        window: the forward's window (keyword-only from here on).
        causal_alignment: the forward's causal alignment.
        softcap: the forward's softcap.
        alibi_slopes: the forward's ALiBi slopes.
        sinks: the forward's sink logits (their gradient is ``grads.sinks``).
        mask_mod: the forward's mask function.
        key_lengths: the forward's keys per sequence (their gradients are 0 from there on).
        dropout_p: the forward's dropout probability.
        rng: the int seed the forward's dropout used (a Generator cannot replay its draw).
        engine: "naive", "tiled" or "fused"; None picks one.
        num_threads: threads of the blocked engines (default as the forward).
        output: the forward's output (B…, L, Ev); with ``lse``, what the tiled and fused
            engines start from (pass both, or neither and they are recomputed; always
            recomputed for float16, whose results were rounded).
        lse: the forward's log-sum-exp (B…, L), from ``return_lse=True``.
        grad_lse: the gradient of the lse (B…, L), for a caller that used it; None: 0.
        rules: the forward's variants as one ``engine.variants.Rules``, in place of their
            keywords (not both).

    Returns:
        :class:`Gradients`, which unpacks as (grad_query, grad_key, grad_value), each in
        the shape of its input (broadcast dimensions summed, GQA groups summed onto their
        shared head) and its dtype; ``.attn_mask`` and ``.sinks`` hold those gradients
        (None when not given). Fully-masked rows give zero, finite gradients.

    Raises:
        ValueError: as the forward, and a ``grad_output``, ``output``, ``lse`` or
            ``grad_lse`` of the wrong shape.
        TypeError: as the forward, a Generator as ``rng`` (it cannot replay its draw),
            no ``rng`` with dropout, a ``grad_output`` of another dtype.
    """
    if isinstance(rng, np.random.Generator):
        raise fail(
            "rng", "the int seed the forward used (a Generator cannot replay its draw)", "a Generator", TypeError
        )
    if probability("dropout_p", dropout_p) and rng is None:
        raise fail("rng", "the forward's int seed when dropout_p > 0", None, TypeError)
    if (output is None) != (lse is None):
        raise fail("output, lse", "both of the forward's results or neither", "only one of them")
    given = Rules(is_causal=is_causal, causal_alignment=causal_alignment, window=window, softcap=softcap,
                  alibi_slopes=alibi_slopes, sinks=sinks, mask_mod=mask_mod)  # fmt: skip
    pb = make_problem(
        query, key, value, attn_mask, dropout_p, scale, enable_gqa, rng, given.unless(rules), key_lengths=key_lengths
    )  # fmt: skip
    saved = None
    # float16's output and lse were rounded to float16: the backward recomputes them in float32
    if output is not None and pb.result_dtype != np.float16:
        output = float_array("output", output).astype(pb.compute_dtype, copy=False)
        lse = float_array("lse", lse, min_ndim=1).astype(pb.compute_dtype, copy=False)
        if output.shape != pb.output_shape or lse.shape != pb.output_shape[:-1]:
            raise fail(
                "output, lse",
                f"the forward's shapes {pb.output_shape} and {pb.output_shape[:-1]}",
                f"{output.shape} and {lse.shape}",
            )
        saved = (output, lse)
    return backward(pb, choose_engine(engine, pb, False), grad_output, saved, num_threads, grad_lse)
