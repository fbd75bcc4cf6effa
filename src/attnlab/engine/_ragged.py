"""Per-sequence key lengths for any engine: a batch whose sequences have key_lengths[b]
keys each, run as one problem per sequence, its keys cut to its length (letters as in
``_problem``).

Sequence b's problem has the keys 0 … key_lengths[b] − 1 only, and with bottom-right
alignment its own diagonal, offset key_lengths[b] − L: the band of the causal rule and the
window, and ALiBi's distances, move by key_lengths[b] − S. Its results fill row b of the
batch's; its keys' gradients are 0 from its length on. A sequence of no key has output 0
and lse −∞ (the sink's logit with sinks), as a row whose keys are all masked. The fused
engine's decode path takes the lengths itself (``fused._decode``) and needs none of this.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import numpy as np

from .._validation import Array
from ._problem import Problem, Saved, sum_to_shape
from ._tiled import kv_batch_shape

__all__ = ["backward", "forward", "sequences"]


def sequences(pb: Problem) -> Iterator[tuple[tuple[int, ...], int, Problem]]:
    """(index into B… without the heads, its key length, that sequence's problem) for every
    sequence of ``pb``; its problem's batch shape is (H,)."""
    assert pb.key_lengths is not None
    batch, kv_batch = pb.batch_shape, kv_batch_shape(pb)
    (L, S), E, Ev = pb.lengths, pb.query.shape[-1], pb.value.shape[-1]
    query = np.broadcast_to(pb.query, (*batch, L, E))
    key = np.broadcast_to(pb.key, (*kv_batch, S, E))
    value = np.broadcast_to(pb.value, (*kv_batch, S, Ev))
    mask = None if pb.mask is None else np.broadcast_to(pb.mask, (*batch, L, S))
    for flat, index in enumerate(np.ndindex(*batch[:-1])):
        length = int(pb.key_lengths[index])
        shift = length - S if pb.rules.bottom_right else 0  # its own diagonal, bottom-right
        yield (
            index,
            length,
            dataclasses.replace(
                pb,
                query=query[index],  # (H, L, E)
                key=key[index][..., :length, :],  # (Hk, length, E)
                value=value[index][..., :length, :],  # (Hk, length, Ev)
                mask=None if mask is None else mask[index][..., :length],  # (H, L, length)
                rules=pb.rules.of_sequence(index, flat, shift),  # per-head values (H,), its own band
                batch_shape=batch[-1:],
                key_lengths=None,
            ),
        )


ForwardResults = tuple[Array, Array, Array | None]
BackwardResults = tuple[Array, Array, Array, Array | None]


def forward(pb: Problem, run_forward: Callable[[Problem], ForwardResults]) -> ForwardResults:
    """(O (B…, L, Ev), lse (B…, L), the weights (B…, L, S) or None) of ``pb`` by
    ``run_forward(problem) -> (O, lse, weights or None)`` on each sequence's problem."""
    L, S = pb.lengths
    dtype = pb.compute_dtype
    output = np.zeros(pb.output_shape, dtype)  # (B…, L, Ev)
    lse = np.empty((*pb.batch_shape, L), dtype)  # (B…, L)
    weights: Array | None = None
    for index, length, sequence in sequences(pb):
        if length == 0:  # no key: as a row whose keys are all masked
            lse[index] = -np.inf if sequence.rules["sinks"] is None else sequence.rules["sinks"][:, None]
            continue
        out, row_lse, row_weights = run_forward(sequence)
        output[index], lse[index] = out, row_lse
        if row_weights is not None:
            if weights is None:
                weights = np.zeros((*pb.batch_shape, L, S), dtype)  # (B…, L, S)
            weights[index][..., :length] = row_weights
    return output, lse, weights


def backward(
    pb: Problem, grad_output: Array, saved: Saved, run_backward: Callable[[Problem, Array, Saved], BackwardResults]
) -> BackwardResults:
    """(dQ (B…, L, E), dK (B…, S, E), dV (B…, S, Ev), one key/value head per query head,
    the float mask's gradient summed to its shape or None), by
    ``run_backward(problem, dO, saved)`` on each sequence's problem."""
    (L, S), E, Ev = pb.lengths, pb.query.shape[-1], pb.value.shape[-1]
    batch, dtype = pb.batch_shape, pb.compute_dtype
    grad_query = np.zeros((*batch, L, E), dtype)
    grad_key, grad_value = np.zeros((*batch, S, E), dtype), np.zeros((*batch, S, Ev), dtype)
    has_float_mask = pb.mask is not None and pb.mask.dtype != bool
    grad_mask = np.zeros((*batch, L, S), dtype) if has_float_mask else None
    for index, length, sequence in sequences(pb):
        if length == 0:
            continue
        part = Saved(*(None if x is None else x[index] for x in saved))  # type: ignore[arg-type]
        dq, dk, dv, dmask = run_backward(sequence, grad_output[index], part)
        grad_query[index] = dq
        grad_key[index][..., :length, :] = dk
        grad_value[index][..., :length, :] = dv
        if grad_mask is not None and dmask is not None:
            grad_mask[index][..., :length] = dmask
    summed = None if grad_mask is None else sum_to_shape(grad_mask, pb.mask.shape)  # type: ignore[union-attr]
    return grad_query, grad_key, grad_value, summed
