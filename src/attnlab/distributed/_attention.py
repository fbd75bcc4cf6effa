"""Attention over a sequence split across processes: ring attention on torch.distributed.

Each rank passes its shard of the queries, keys and values, (B…, n_r, E) with n_r ≥ 1 rows
of the same positions, and gets its shard of the output of attention over the whole
sequence; see ``attnlab.distributed._ring`` (the schedule), ``._agreement`` and docs/distributed.md for the algorithm::

    import torch.distributed as dist
    from attnlab import distributed

    dist.init_process_group("gloo")                        # torchrun sets the rank and world
    q, k, v = (distributed.shard(x, dist.get_world_size(), dist.get_rank()) for x in (Q, K, V))
    out, lse = distributed.ring_attention(q, k, v, is_causal=True, return_lse=True)
    dq, dk, dv = distributed.ring_attention_backward(d_out, q, k, v, out, lse, is_causal=True)

Every rank checks its arguments and the ranks exchange them before any work, so a bad shard
on one rank is an error on every rank (naming the rank), never a hang. Needs torch
(``pip install 'attnlab[torch]'``) for torch.distributed; the arithmetic is attnlab's engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, overload

import numpy as np
from numpy.typing import ArrayLike

from .._validation import Array, array_of, fail, float_array, is_integer
from ..engine._attention import ENGINES, Engine, Gradients
from ..engine.variants import Alignment, Rules
from . import _agreement, _ring, _shards

__all__ = ["LAYOUTS", "ring_attention", "ring_attention_backward", "shard", "unshard"]

LAYOUTS = _shards.LAYOUTS
Layout = Literal["contiguous", "zigzag"]


@overload
def ring_attention(
    query: ArrayLike, key: ArrayLike, value: ArrayLike, *, is_causal: bool = ..., scale: float | None = ...,
    enable_gqa: bool = ..., group: Any = ..., layout: Layout = ..., return_lse: Literal[False] = ...,
    engine: Engine | None = ..., window: tuple[int | None, int | None] | None = ...,
    causal_alignment: Alignment = ..., softcap: float | None = ..., alibi_slopes: ArrayLike | None = ...,
    sinks: ArrayLike | None = ..., attn_mask: None = ..., mask_mod: None = ..., rules: Rules | None = ...,
) -> Array: ...  # fmt: skip
@overload
def ring_attention(
    query: ArrayLike, key: ArrayLike, value: ArrayLike, *, is_causal: bool = ..., scale: float | None = ...,
    enable_gqa: bool = ..., group: Any = ..., layout: Layout = ..., return_lse: Literal[True],
    engine: Engine | None = ..., window: tuple[int | None, int | None] | None = ...,
    causal_alignment: Alignment = ..., softcap: float | None = ..., alibi_slopes: ArrayLike | None = ...,
    sinks: ArrayLike | None = ..., attn_mask: None = ..., mask_mod: None = ..., rules: Rules | None = ...,
) -> tuple[Array, Array]: ...  # fmt: skip
def ring_attention(
    query: ArrayLike, key: ArrayLike, value: ArrayLike, *, is_causal: bool = False, scale: float | None = None,
    enable_gqa: bool = False, group: Any = None, layout: Layout = "contiguous", return_lse: bool = False,
    engine: Engine | None = None, window: tuple[int | None, int | None] | None = None,
    causal_alignment: Alignment = "top_left", softcap: float | None = None, alibi_slopes: ArrayLike | None = None,
    sinks: ArrayLike | None = None, attn_mask: None = None, mask_mod: None = None, rules: Rules | None = None,
) -> Array | tuple[Array, Array]:  # fmt: skip
    """This rank's shard of softmax(Z) · V over the whole sequence, with
    Z = softcap(scale · Q·Kᵀ) + ALiBi, −∞ where is_causal or the window rule a key out, as
    :func:`attnlab.attention` computes it over the whole sequence (global positions I, J).

    Args:
        query: this rank's shard of the queries, (B…, n, E), with n ≥ 1 rows (positions), as
            :func:`attnlab.scaled_dot_product_attention` takes it. Every rank must pass the
            same dimensions but n, and the same dtype and settings.
        key: this rank's shard of the keys, (B…, n, E), the same n rows as ``query``
            (``enable_gqa``: fewer heads).
        value: this rank's shard of the values, (B…, n, Ev), the same n rows as ``query``.
        is_causal: position I attends to positions J <= I + offset of the whole sequence;
            the positions follow from ``layout`` and the shard lengths, which the ranks
            exchange.
        scale: multiplies Q·Kᵀ; default 1/√E.
        enable_gqa: grouped-query attention (key and value with H / G heads).
        layout: "contiguous" (rank r holds the r-th run of rows) or "zigzag" (chunks r and
            2P − 1 − r of 2P: even causal work); :func:`shard` cuts a sequence either way.
        group: the torch.distributed process group (None: the default one).
        return_lse: also return log(Σ_J exp(Z_IJ) (+ e^{sink})) of each row, (B…, n), in
            the compute dtype, which :func:`ring_attention_backward` needs.
        engine: attnlab's engine for each block product (None: the fastest for it).
        window: (left, right): query I attends to keys −left <= J − (I + offset) <= right
            only (global positions; None on a side: unbounded); combined with is_causal.
        causal_alignment: "top_left" or "bottom_right": the diagonal of is_causal, window
            and ALiBi, offset = 0 or S_total − L_total; that is 0 too, the queries and keys
            being the same positions, so both give the same result.
        softcap: c > 0: scale·Q·Kᵀ becomes c·tanh(scale·Q·Kᵀ / c) before any bias.
        alibi_slopes: (H,) or (B, H): adds −slope·|J − (I + offset)| to the scores.
        sinks: (H,): one logit per query head joined to every row's softmax, then dropped:
            lse = log(Σ_J e^{Z_IJ} + e^{sink}).
        attn_mask: refused unless None (a mask over the whole sequence would undo the
            ring's memory saving): use is_causal and window.
        mask_mod: refused unless None (the ranks cannot check that they share a function).
        rules: the variants as one ``engine.variants.Rules`` in place of their keywords
            (not both); a mask function and variants from outside the package are refused.

    Returns:
        The output shard (B…, n, Ev) in the inputs' dtype, and the lse with ``return_lse``.

    Raises:
        ArgumentError: on every rank, when any rank's arguments are bad (a negative window
            side, a softcap <= 0, an unknown alignment, ALiBi slopes or sinks of the wrong
            shape, an ``attn_mask`` or a ``mask_mod``) or the ranks disagree; the message
            names the rank. Also when no process group is initialised.
        ArgumentTypeError: on every rank, when a rank's argument has the wrong type (a
            torch tensor with ``requires_grad``: pass ``tensor.detach()``).
        RingError: on every rank, when a rank failed otherwise (any exception: its type and
            message, on one line), or when the ranks are at different ring calls (a rank
            that skipped one): the call's sequence number on the group is the guard.
        MissingDependencyError: torch is not installed.
    """
    arrays = {"query": query, "key": key, "value": value}
    given = Rules(is_causal=is_causal, causal_alignment=causal_alignment, window=window, softcap=softcap,
                  alibi_slopes=alibi_slopes, sinks=sinks, mask_mod=mask_mod)  # fmt: skip
    rules = given.unless(rules)
    ring = _agree("ring_attention", arrays, rules, scale, enable_gqa, layout, group, engine=engine,
                  attn_mask=attn_mask)  # fmt: skip
    q, k, v = (float_array(name, x) for name, x in arrays.items())
    output, lse = _ring.ring_forward(ring, q, k, v, engine)
    result = output.astype(q.dtype, copy=False)
    return (result, lse) if return_lse else result


def ring_attention_backward(
    grad_output: ArrayLike,
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    output: ArrayLike,
    lse: ArrayLike,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    group: Any = None,
    layout: Layout = "contiguous",
    engine: Engine | None = None,
    window: tuple[int | None, int | None] | None = None,
    causal_alignment: Alignment = "top_left",
    softcap: float | None = None,
    alibi_slopes: ArrayLike | None = None,
    sinks: ArrayLike | None = None,
    attn_mask: None = None,
    mask_mod: None = None,
    rules: Rules | None = None,
) -> Gradients:
    """dQ, dK and dV of this rank's shards, from the gradient of its output shard and the
    forward's output and lse (:func:`ring_attention` with ``return_lse=True``), and the
    sinks' gradient −Σ_I e^{sink − lse_I}·rowsum(dO∘O)_I over the whole sequence. dK and dV
    travel around the ring with their blocks and come back to the rank that holds them.

    Args:
        grad_output: dO of this rank's output shard, (B…, l, Ev).
        query: this rank's query shard, (B…, l, E), as given to the forward.
        key: this rank's key shard, (B…, l, E).
        value: this rank's value shard, (B…, l, Ev).
        output: the forward's output shard.
        lse: the forward's lse shard, (B…, l).
        is_causal: the forward's causal flag (over the whole sequence's positions).
        scale: the forward's scale; default 1/√E.
        enable_gqa: the forward's grouped-query flag.
        group: the torch.distributed process group (None: the default group).
        layout: "contiguous" or "zigzag", how the rows were shared (:func:`shard`).
        engine: a blocked engine ("tiled" or "fused"); None picks one.
        window: the forward's window.
        causal_alignment: the forward's alignment.
        softcap: the forward's softcap.
        alibi_slopes: the forward's ALiBi slopes.
        sinks: the forward's sinks.
        attn_mask: refused unless None, as in the forward.
        mask_mod: refused unless None, as in the forward.
        rules: the forward's variants as one ``engine.variants.Rules``, in place of their
            keywords (not both).

    Returns:
        :class:`attnlab.Gradients`: ``query``, ``key`` and ``value`` of this rank's shards;
        ``sinks`` (H,), the whole sequence's (the same on every rank: sum it over no other
        rank), or None without sinks.

    Raises:
        ArgumentError: as :func:`ring_attention`, and when grad_output, output or lse do not
            fit the shards.
        ArgumentTypeError: as :func:`ring_attention`.
        RingError: as :func:`ring_attention`.
    """
    arrays = {"query": query, "key": key, "value": value, "grad_output": grad_output, "output": output}
    given = Rules(is_causal=is_causal, causal_alignment=causal_alignment, window=window, softcap=softcap,
                  alibi_slopes=alibi_slopes, sinks=sinks, mask_mod=mask_mod)  # fmt: skip
    rules = given.unless(rules)
    ring = _agree("ring_attention_backward", arrays, rules, scale, enable_gqa, layout, group,
                  lambda: _check_saved(query, key, value, grad_output, output, lse, enable_gqa), engine,
                  attn_mask)  # fmt: skip
    q, k, v, d_out, out = (float_array(name, x) for name, x in arrays.items())
    return _ring.ring_backward(ring, d_out, q, k, v, out, np.asarray(lse), engine)


def _agree(
    name: str, arrays: dict[str, Any], rules: Rules, scale: Any, enable_gqa: Any, layout: Any, group: Any,
    more: Any = None, engine: Any = None, attn_mask: Any = None,
) -> _ring.Ring:  # fmt: skip
    """The ranks' agreement on one call (:func:`._agreement.agree`), its ``rules`` whole."""

    def check() -> dict[str, Any]:
        settings = _agreement.settings(rules, attn_mask, scale, enable_gqa, layout)
        if engine not in (None, *ENGINES):
            raise fail("engine", f"one of {', '.join(ENGINES)} or None", repr(engine))
        _agreement.check_shards(arrays["query"], arrays["key"], arrays["value"], rules, scale, enable_gqa)
        if more is not None:
            more()
        return settings

    shared = {"is_causal": rules.is_causal, "scale": scale, "enable_gqa": enable_gqa, "layout": layout,
              **_agreement.shared(rules)}  # fmt: skip
    return _agreement.agree(name, arrays, shared, group, check)


def _check_saved(query: Any, key: Any, value: Any, grad_output: Any, output: Any, lse: Any, enable_gqa: Any) -> None:
    """grad_output and output of the forward's output shape, lse of its rows."""
    from ..engine._problem import make_problem

    pb = make_problem(query, key, value, None, 0.0, None, enable_gqa, None)
    for name, x in (("grad_output", grad_output), ("output", output)):
        array = float_array(name, x)
        if array.shape != pb.output_shape:
            raise fail(name, f"the output shard's shape {pb.output_shape}", f"shape {array.shape}")
        if array.dtype != pb.result_dtype:
            raise fail(name, f"dtype {pb.result_dtype}, the shards'", f"dtype {array.dtype}", TypeError)
    if float_array("lse", lse, min_ndim=1).shape != pb.output_shape[:-1]:
        raise fail("lse", f"shape {pb.output_shape[:-1]} (one per output row)", f"shape {np.shape(lse)}")


def shard(x: ArrayLike, world_size: int, rank: int, layout: Layout = "contiguous", axis: int = -2) -> Array:
    """Rank ``rank``'s rows of the whole sequence ``x`` along ``axis`` (the sequence axis
    of (B…, L, E)): the r-th of P near-equal runs ("contiguous"), or chunks r and
    2P − 1 − r of 2P ("zigzag").

    Args:
        x: the whole sequence, (B…, L, E).
        world_size: P, the number of ranks.
        rank: r, in 0..P − 1.
        layout: "contiguous" or "zigzag".
        axis: the sequence axis (default −2).

    Raises:
        ArgumentError: world_size, rank, layout or axis out of range.
        ArgumentTypeError: an axis that is not an integer.
    """
    x = array_of("x", x)
    if not is_integer(world_size) or world_size < 1:
        raise fail("world_size", "a positive integer", repr(world_size))
    if not is_integer(rank) or not 0 <= rank < world_size:
        raise fail("rank", f"an integer in 0..{world_size - 1}", repr(rank))
    if layout not in LAYOUTS:
        raise fail("layout", f"one of {', '.join(LAYOUTS)}", repr(layout))
    return _shards.shard(x, int(world_size), int(rank), layout, _axis(axis, x.ndim))


def unshard(shards: Sequence[ArrayLike], layout: Layout = "contiguous", axis: int = -2) -> Array:
    """The whole sequence from every rank's shard, in rank order: the inverse of :func:`shard`.

    Args:
        shards: every rank's shard, in rank order.
        layout: the layout :func:`shard` used, "contiguous" or "zigzag".
        axis: the sequence axis (default −2).

    Raises:
        ArgumentError: an unknown layout, no shards, an axis out of range, shards of
            different shapes (but along ``axis``), or shards whose lengths along ``axis`` are
            not those :func:`shard` gives for their total and count in ``layout``.
        ArgumentTypeError: an axis that is not an integer.
    """
    if layout not in LAYOUTS:
        raise fail("layout", f"one of {', '.join(LAYOUTS)}", repr(layout))
    if not len(shards):
        raise fail("shards", "one shard per rank", "none")
    arrays = [array_of(f"shards[{r}]", s) for r, s in enumerate(shards)]
    seq = _axis(axis, min(a.ndim for a in arrays))
    others = {(a.ndim, a.shape[:seq] + a.shape[seq + 1 :]) for a in arrays}
    if len(others) > 1:  # NumPy's concatenate would name no argument
        shapes = ", ".join(str(a.shape) for a in arrays[:8]) + (", …" if len(arrays) > 8 else "")
        raise fail("shards", f"arrays of one shape but along axis {axis} (the sequence)", f"shapes {shapes}")
    lengths = [a.shape[seq] for a in arrays]
    expected = _shards.shard_lengths(sum(lengths), len(arrays), layout)
    if lengths != expected:  # any other cut would be rebuilt in a wrong order, silently
        raise fail(
            "shards",
            f"lengths {_listed(expected)} along axis {axis} (shard's cut of {sum(lengths)} rows "
            f"for {len(arrays)} ranks, {layout})",
            f"lengths {_listed(lengths)}",
        )
    return _shards.unshard(arrays, layout, seq)


def _listed(lengths: list[int]) -> str:
    """``lengths`` as a list, its first 8 and an ellipsis when longer."""
    return "[" + ", ".join(map(str, lengths[:8])) + (", …" if len(lengths) > 8 else "") + "]"


def _axis(axis: Any, ndim: int) -> int:
    """``axis`` as an axis of an array of ``ndim`` dimensions, counted from 0 (NumPy's
    rule: −ndim <= axis < ndim), refused as :func:`attnlab.softmax` refuses one."""
    if not is_integer(axis):
        raise fail("axis", "an integer", repr(axis), TypeError)
    if not -ndim <= axis < ndim:
        raise fail("axis", f"an integer in [{-ndim}, {ndim}) (an axis of the {ndim}-dimensional array)", repr(axis))
    return int(axis) % ndim
