"""Ring attention over torch.distributed: the algorithm behind ``attnlab.distributed``.

Each of P ranks holds a shard of the sequence: its queries, keys and values for the same
positions. Keys and values travel around the ring (rank r sends to r + 1, receives from
r − 1) while each rank attends its queries to the block it holds, and the partial results
are merged with their log-sum-exps:

    lse = logaddexp(lse₁, lse₂),   O = O₁·e^(lse₁ − lse) + O₂·e^(lse₂ − lse).

Blocks: a shard's keys and values travel in blocks of at most ``BLOCK`` rows, so a rank
holds two blocks at a time (the one it computes with, the one arriving) instead of two
shards. The schedule is lockstep: for block index j, for step t = 0 … P − 1, every rank
computes with block j of source r − t while sending that block on and receiving block j of
source r − t − 1, then waits for both; so every send has its receive posted in the same
step on the neighbour, and the non-blocking pairs cannot deadlock under gloo. A shard with
fewer blocks sends nothing for the missing ones, which every rank knows from the lengths
exchanged at the start. The backward passes each block's dK and dV with it and one step
more, back to the block's owner.

Variants: ``is_causal`` and ``window`` allow one band of global J − I (``variants.Band``,
around the diagonal J − I = offset, offset = S_total − L_total = 0 bottom-right as top-left,
queries and keys being the same positions). A product of query rows from global position
I0 with keys from J0 sees that band shifted by J0 − I0 in its own coordinates (local
j − i = J − I − (J0 − I0)), and ALiBi's |J − (I + offset)| is |j − (i + offset − (J0 − I0))|.
Each product is first cut to the rows and keys that meet the band (a pair that does not meet
it is skipped: no compute, the blocks still travel). When the band's lower edge (the
window's left side) does not cut it, it splits into at most a full product and one causal
product whose queries and keys start at the same position (torch's top-left ``is_causal``,
which the fused engine compiles); otherwise it is one product with the shifted band. Softcap
is per score. The sinks join each row once: the merge starts from O = 0, lse = s_h, a key of
logit s_h and value 0; their gradient −Σ_i e^(s_h − lse_i)·δ_i is summed over the ranks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .._validation import Array
from ..engine._attention import ENGINES, Engine, Gradients, backward, blocked_engine, choose_engine
from ..engine._problem import Problem, make_problem, sum_to_shape
from ..engine.variants import Band, Rules

__all__ = ["BLOCK", "Piece", "Ring", "pieces", "ring_backward", "ring_forward"]

BLOCK = 2048  # rows of keys and values a message carries, and of queries an engine call takes


@dataclass(frozen=True)
class Ring:
    """The process group and what every rank agreed on: the lengths, the runs, the settings."""

    dist: Any  # torch.distributed
    group: Any
    rank: int
    size: int
    lengths: list[int]
    runs: list[list[tuple[int, int, int]]]
    is_causal: bool
    scale: float | None
    enable_gqa: bool
    band: Band  # the global J − I that is_causal and the window allow
    offset: int = 0  # the global diagonal, S_total − L_total bottom-right: 0, as top-left
    softcap: float | None = None
    alibi_slopes: Any = None  # checked: (H,) or (B, H)
    sinks: Any = None  # checked: (H,)
    sent: list[int] = field(default_factory=lambda: [0, 0])  # messages and bytes this rank has sent

    def blocks(self, source: int) -> int:
        return math.ceil(self.lengths[source] / BLOCK)

    def peer(self, offset: int) -> int:
        """The global rank of the group member ``offset`` places after this one."""
        member = (self.rank + offset) % self.size
        return member if self.group is None else self.dist.get_global_rank(self.group, member)


@dataclass(frozen=True)
class Piece:
    """One engine call: this rank's query rows ``rows`` of its shard against the keys
    ``cols`` of a block, whose first key's global position is ``shift`` after the first
    query's. ``kind``: "full" (every key allowed), "causal" (top-left causal, query i
    allowed keys j <= i) or "band" (the ring's band, shifted by ``shift``)."""

    rows: slice
    cols: slice
    shift: int
    kind: Literal["full", "causal", "band"]


def pieces(ring: Ring, source: int, first: int, rows: int) -> Iterator[Piece]:
    """The engine calls between this rank's queries (in chunks of at most BLOCK rows) and
    rows ``first`` … ``first + rows`` of ``source``'s shard, cut to the ring's band."""
    for q_offset, q_position, q_rows in ring.runs[ring.rank]:
        for k_offset, k_position, k_rows in ring.runs[source]:
            lo, hi = max(first, k_offset), min(first + rows, k_offset + k_rows)  # the block's rows in this run
            if lo >= hi or q_rows == 0:
                continue
            keys, key_position = slice(lo - first, hi - first), k_position + lo - k_offset
            for start in range(q_offset, q_offset + q_rows, BLOCK):
                chunk = slice(start, min(start + BLOCK, q_offset + q_rows))
                yield from _cut(ring.band, chunk, key_position - (q_position + start - q_offset), keys)


def _cut(band: Band, rows: slice, shift: int, cols: slice) -> Iterator[Piece]:
    """The pieces of the product of query rows ``rows`` with keys ``cols`` (the first key
    ``shift`` positions after the first query) inside the global ``band``: none when they
    do not meet; else cut to the rows and keys that do, then as ``Piece`` says."""
    local = Band(band.lowest - shift, band.highest - shift)  # j − i of the product = J − I − shift
    length, width = rows.stop - rows.start, cols.stop - cols.start
    i0, i1 = local.queries(slice(0, width), length)  # the rows that may attend a key of cols
    j0, j1 = local.keys(slice(i0, i1), width)  # the keys that those rows may attend
    if i0 >= i1 or j0 >= j1:
        return
    rows, cols = slice(rows.start + i0, rows.start + i1), slice(cols.start + j0, cols.start + j1)
    shift += j0 - i0
    lowest, highest = band.lowest - shift, band.highest - shift  # the band in the cut product's j − i
    if lowest > -(i1 - i0 - 1):  # the lower edge cuts it: one product with the shifted band
        yield Piece(rows, cols, shift, "band")
    elif highest >= j1 - j0 - 1:  # no edge cuts it
        yield Piece(rows, cols, shift, "full")
    else:  # the upper edge alone, at j − i = highest >= 0 (row 0 meets a key): keys < highest seen by every row
        if highest > 0:
            yield Piece(rows, slice(cols.start, cols.start + highest), shift, "full")
        yield Piece(rows, slice(cols.start + highest, cols.stop), shift + highest, "causal")


def _problem(ring: Ring, query: Array, key: Array, value: Array, piece: Piece) -> Problem:
    """The engine's problem of one piece: its rows and keys, the piece's causal rule or the
    ring's band shifted into its coordinates, and ALiBi's diagonal likewise."""
    rules = Rules(is_causal=piece.kind == "causal", softcap=ring.softcap, alibi_slopes=ring.alibi_slopes)
    pb = make_problem(
        query[..., piece.rows, :], key[..., piece.cols, :], value[..., piece.cols, :], None, 0.0, ring.scale,
        ring.enable_gqa, None, rules,
    )  # fmt: skip
    offset = ring.offset - piece.shift  # |J − (I + offset)| = |j − (i + offset − shift)|
    band = pb.rules.band
    if piece.kind == "band":
        band = Band(ring.band.lowest - piece.shift, ring.band.highest - piece.shift)
    return dataclasses.replace(pb, rules=dataclasses.replace(pb.rules, offset=offset, band=band))


def _merge(output: Array, lse: Array, part_output: Array, part_lse: Array) -> None:
    """output, lse ← their merge with a partial result over the same rows, in place."""
    with np.errstate(invalid="ignore"):
        merged = np.logaddexp(lse, part_lse)
        empty = np.isneginf(merged)  # no key seen yet on either side: stays 0 and −∞
        old = np.where(empty, 0.0, np.exp(lse - merged))[..., None]
        new = np.where(empty, 0.0, np.exp(part_lse - merged))[..., None]
    output *= old
    output += part_output * new
    lse[...] = merged


def _exchange(ring: Ring, outgoing: Array | None, incoming_shape: tuple[int, ...] | None, dtype: Any) -> Array | None:
    """Send ``outgoing`` to the next rank and receive a block of ``incoming_shape`` from
    the previous one, both non-blocking, then wait for both."""
    import torch

    requests, received = [], None
    if incoming_shape is not None:
        received = np.empty(incoming_shape, dtype=dtype)  # NumPy's memory, torch's view: one buffer
        requests.append(ring.dist.irecv(torch.from_numpy(received), src=ring.peer(-1), group=ring.group))
    if outgoing is not None:
        message = torch.from_numpy(np.ascontiguousarray(outgoing))
        ring.sent[0] += 1
        ring.sent[1] += outgoing.nbytes
        requests.append(ring.dist.isend(message, dst=ring.peer(1), group=ring.group))
    for request in requests:
        request.wait()
    return received


def _block(x: Array, j: int) -> Array:
    return x[..., j * BLOCK : (j + 1) * BLOCK, :]


def _block_shape(ring: Ring, like: Array, source: int, j: int) -> tuple[int, ...] | None:
    """The shape of block j of ``source``'s shard of an array like ``like``; None: no such block."""
    rows = min(BLOCK, ring.lengths[source] - j * BLOCK)
    return None if rows <= 0 else (*like.shape[:-2], rows, like.shape[-1])


def _pass(ring: Ring, blocks: tuple[Array, ...] | None, likes: tuple[Array, ...], source: int, j: int,
          dtypes: tuple[Any, ...]) -> tuple[Array, ...] | None:  # fmt: skip
    """Send ``blocks`` on and receive block j of ``source`` (arrays like ``likes``), one
    message an array."""
    received = [
        _exchange(ring, None if blocks is None else block, _block_shape(ring, like, source, j), dtype)
        for block, like, dtype in zip(blocks or (None,) * len(likes), likes, dtypes, strict=True)
    ]
    return None if received[0] is None else tuple(r for r in received if r is not None)


def _local(ring: Ring, query: Array, key: Array, value: Array) -> Problem:
    """The problem of this rank's shards: its output shape, dtypes and sinks."""
    return make_problem(query, key, value, None, 0.0, ring.scale, ring.enable_gqa, None, Rules(sinks=ring.sinks))


def ring_forward(ring: Ring, query: Array, key: Array, value: Array, engine: Engine | None) -> tuple[Array, Array]:
    """This rank's output (B…, n, Ev) and lse (B…, n), in the compute dtype, of attention
    over the whole sequence."""
    pb = _local(ring, query, key, value)
    output = np.zeros(pb.output_shape, dtype=pb.compute_dtype)
    lse = np.full(pb.output_shape[:-1], -np.inf, dtype=pb.compute_dtype)
    if pb.rules["sinks"] is not None:  # every row starts with its sink: a key of logit s_h and value 0
        lse[...] = pb.rules["sinks"][..., None]
    dtypes = (key.dtype, value.dtype)
    for j in range(max(ring.blocks(s) for s in range(ring.size))):
        current: tuple[Array, ...] | None = (_block(key, j), _block(value, j)) if j < ring.blocks(ring.rank) else None
        for t in range(ring.size):
            source = (ring.rank - t) % ring.size
            if current is not None:
                _attend(ring, query, current[0], current[1], source, j, output, lse, engine)
            if t < ring.size - 1:  # pass block j of `source` on; take block j of the source before it
                current = _pass(ring, current, (key, value), (source - 1) % ring.size, j, dtypes)
    return output, lse


def _attend(
    ring: Ring, query: Array, key: Array, value: Array, source: int, j: int, output: Array, lse: Array,
    engine: Engine | None,
) -> None:  # fmt: skip
    """Merge this rank's queries against block j of ``source`` into output and lse."""
    for piece in pieces(ring, source, j * BLOCK, key.shape[-2]):
        pb = _problem(ring, query, key, value, piece)
        part_output, part_lse, _ = ENGINES[choose_engine(engine, pb, False)].forward(pb, None)
        _merge(output[..., piece.rows, :], lse[..., piece.rows], part_output, part_lse)


def ring_backward(
    ring: Ring, grad_output: Array, query: Array, key: Array, value: Array, output: Array, lse: Array,
    engine: Engine | None,
) -> Gradients:  # fmt: skip
    """dQ, dK and dV of this rank's shards (and the sinks', summed over the ranks). Each
    block's dK and dV travel with it, and one step more, back to its owner. Every product
    recomputes its weights from the whole sequence's lse and δ = rowsum(dO∘O), so only a
    blocked engine will do."""
    blocked: Engine = engine if engine is not None and ENGINES[engine].blocked else blocked_engine().name
    pb = _local(ring, query, key, value)
    work = pb.compute_dtype
    # float16 inputs: every product in float32, rounded once at the end (not once a block)
    query, key, value, grad_output = (x.astype(work, copy=False) for x in (query, key, value, grad_output))
    exact = output.astype(work, copy=False)
    grad_query = np.zeros(query.shape, dtype=work)
    grad_key, grad_value = np.zeros(key.shape, dtype=work), np.zeros(value.shape, dtype=work)
    likes, dtypes = (key, value, key, value), (key.dtype, value.dtype, work, work)
    for j in range(max(ring.blocks(s) for s in range(ring.size))):
        held: tuple[Array, ...] | None = None
        if j < ring.blocks(ring.rank):  # block j here: k, v and their gradients so far
            k, v = _block(key, j), _block(value, j)
            held = (k, v, np.zeros(k.shape, dtype=work), np.zeros(v.shape, dtype=work))
        for t in range(ring.size):
            source = (ring.rank - t) % ring.size
            if held is not None:
                _attend_backward(ring, query, grad_output, exact, lse, grad_query, held, source, j, blocked)
            if t < ring.size - 1:  # the block goes on with its gradients so far; the one before comes
                held = _pass(ring, held, likes, (source - 1) % ring.size, j, dtypes)
        # the gradients go home: the block held now is the next rank's own (or this rank's, alone)
        if ring.size == 1:
            home = None if held is None else held[2:]
        else:
            home = _pass(ring, None if held is None else held[2:], likes[2:], ring.rank, j, dtypes[2:])
        if home is not None:
            rows = slice(j * BLOCK, j * BLOCK + home[0].shape[-2])
            grad_key[..., rows, :] += home[0]
            grad_value[..., rows, :] += home[1]
    dtype = pb.result_dtype
    grad_sinks = None if pb.rules["sinks"] is None else _sink_gradient(ring, pb, grad_output, exact, lse).astype(dtype)
    dq, dk, dv = (g.astype(dtype, copy=False) for g in (grad_query, grad_key, grad_value))
    return Gradients(dq, dk, dv, sinks=grad_sinks)


def _sink_gradient(ring: Ring, pb: Problem, grad_output: Array, output: Array, lse: Array) -> Array:
    """d s_h = −Σ_i e^(s_h − lse_i)·δ_i over every row of head h, (H,): this rank's rows
    (δ = rowsum(dO∘O), (B…, n)), summed over the ranks (the same on every rank)."""
    import torch

    assert pb.rules["sinks"] is not None
    delta = np.einsum("...le,...le->...l", grad_output, output)  # δ, (B…, n)
    with np.errstate(over="ignore", invalid="ignore"):
        weight = np.exp(pb.rules["sinks"][..., None] - lse)  # the sink's weight in each row, (B…, n)
    per_slice = -(weight * delta).sum(axis=-1).reshape(pb.slices // pb.heads, pb.heads)  # (B…/H, H)
    total = torch.from_numpy(np.ascontiguousarray(sum_to_shape(per_slice, (pb.heads,))))
    ring.dist.all_reduce(total, group=ring.group)
    return total.numpy()


def _attend_backward(
    ring: Ring, query: Array, grad_output: Array, output: Array, lse: Array, grad_query: Array,
    held: tuple[Array, ...], source: int, j: int, engine: Engine,
) -> None:  # fmt: skip
    """Add this rank's queries' part of the gradients for block j of ``source``: to dQ in
    place, and to the block's dK and dV, which travel with it (``held``: k, v, dk, dv)."""
    key, value, grad_key, grad_value = held
    for piece in pieces(ring, source, j * BLOCK, key.shape[-2]):
        rows, columns = piece.rows, piece.cols
        problem = _problem(ring, query, key, value, piece)
        dq, dk, dv = backward(problem, engine, grad_output[..., rows, :], (output[..., rows, :], lse[..., rows]))
        grad_query[..., rows, :] += dq
        grad_key[..., columns, :] += dk
        grad_value[..., columns, :] += dv
