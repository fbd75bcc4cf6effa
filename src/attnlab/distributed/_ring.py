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

Positions: ``layout`` says which rows of the whole sequence a shard holds: "contiguous",
one run (rank r after ranks 0 … r − 1), or "zigzag", two runs, chunk r and chunk 2P − 1 − r
of 2P (the first ⌈n/2⌉ rows, then the rest), so that causal work is even across ranks.
Causal pairs split into at most a full product and one causal product whose queries and
keys start at the same position, so the engine never sees an empty row.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._validation import ArgumentError, Array, AttnlabError, MissingDependencyError, fail, flag
from ..engine._attention import ENGINES, Engine, Gradients, attention, backward, blocked_engine
from ..engine._problem import make_problem

__all__ = ["BLOCK", "LAYOUTS", "Ring", "ring_backward", "ring_forward", "runs_of", "shard", "unshard"]

LAYOUTS = ("contiguous", "zigzag")
BLOCK = 2048  # rows of keys and values a message carries, and of queries an engine call takes


def runs_of(lengths: list[int], layout: str) -> list[list[tuple[int, int, int]]]:
    """For each rank, its runs of the whole sequence: (row in the shard, position, length)."""
    P = len(lengths)
    if layout == "contiguous":
        starts = np.cumsum([0, *lengths[:-1]])
        return [[(0, int(starts[r]), n)] for r, n in enumerate(lengths)]
    first = [math.ceil(n / 2) for n in lengths]
    second = [n - a for n, a in zip(lengths, first, strict=True)]
    head = np.cumsum([0, *first[:-1]])  # first runs in rank order
    tail_start = sum(first)
    tail = [tail_start + sum(second[r + 1 :]) for r in range(P)]  # second runs in reverse rank order
    return [[(0, int(head[r]), first[r]), (first[r], tail[r], second[r])] for r in range(P)]


def shard(x: Array, world_size: int, rank: int, layout: str, axis: int) -> Array:
    """Rank ``rank``'s rows of the whole sequence ``x`` (along ``axis``)."""
    if layout == "contiguous":
        return np.array_split(x, world_size, axis=axis)[rank]
    chunks = np.array_split(x, 2 * world_size, axis=axis)
    return np.concatenate((chunks[rank], chunks[2 * world_size - 1 - rank]), axis=axis)


def unshard(shards: list[Array], layout: str, axis: int) -> Array:
    """The whole sequence from every rank's shard, in rank order (inverse of :func:`shard`)."""
    if layout == "contiguous":
        return np.concatenate(shards, axis=axis)
    runs = runs_of([s.shape[axis] for s in shards], layout)
    parts = [
        (position, np.take(s, np.arange(offset, offset + n), axis=axis))
        for s, rank_runs in zip(shards, runs, strict=True)
        for offset, position, n in rank_runs
    ]
    return np.concatenate([p for _, p in sorted(parts, key=lambda item: item[0])], axis=axis)


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
    sent: list[int] = field(default_factory=lambda: [0, 0])  # messages and bytes this rank has sent

    def blocks(self, source: int) -> int:
        return math.ceil(self.lengths[source] / BLOCK)

    def peer(self, offset: int) -> int:
        """The global rank of the group member ``offset`` places after this one."""
        member = (self.rank + offset) % self.size
        return member if self.group is None else self.dist.get_global_rank(self.group, member)


def _torch_distributed() -> Any:
    try:
        import torch.distributed as dist
    except ImportError:
        raise MissingDependencyError("ring attention runs on torch.distributed: pip install 'attnlab[torch]'") from None
    if not dist.is_available() or not dist.is_initialized():
        raise ArgumentError(
            "group: expected an initialised torch.distributed process group "
            "(torch.distributed.init_process_group('gloo'), or launch with torchrun), got none",
            "group",
        )
    return dist


def agree(
    name: str, arrays: dict[str, Any], shared: dict[str, Any], group: Any, check: Callable[[], dict[str, Any]]
) -> Ring:
    """Check this rank's arguments (``check`` returns the settings it parsed), then exchange
    them with every rank, so that every rank raises the same error (naming the rank at
    fault) or none does: no rank is left waiting. ``shared``: what the ranks must agree on."""
    dist = _torch_distributed()
    error, parsed = None, {}
    try:
        parsed = check()
    except (AttnlabError, ValueError, TypeError) as e:  # any bad argument: said on every rank, never a rank gone
        error = str(e)
    settings = {key: repr(value) for key, value in shared.items()}
    shapes = {key: _shape(a) for key, a in arrays.items()}
    dtypes = {key: str(getattr(a, "dtype", type(a).__name__)) for key, a in arrays.items()}
    mine = {"error": error, "shapes": shapes, "dtypes": dtypes, "settings": settings}
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    every = _all_gather_json(dist, group, size, mine)
    failed = [(r, m["error"]) for r, m in enumerate(every) if m["error"]]
    if failed:
        raise ArgumentError(f"{name}: rank {failed[0][0]} of {size}: {failed[0][1]}")
    for part in ("settings", "dtypes"):
        if any(m[part] != every[0][part] for m in every):
            r = next(r for r, m in enumerate(every) if m[part] != every[0][part])
            raise ArgumentError(f"{name}: the ranks disagree: rank 0 has {every[0][part]}, rank {r} {every[r][part]}")
    query_shape = every[0]["shapes"]["query"]

    def beside_rows(shape: tuple[int, ...]) -> tuple[int, ...]:
        return (*shape[:-2], *shape[-1:])  # every dimension but the sequence's

    for r, m in enumerate(every):
        if any(beside_rows(s) != beside_rows(every[0]["shapes"][k]) for k, s in m["shapes"].items() if s):
            raise ArgumentError(
                f"{name}: the ranks disagree on the batch, head or width dimensions: rank 0 has "
                f"{every[0]['shapes']}, rank {r} {m['shapes']}; only the sequence axis may differ"
            )
    lengths = [m["shapes"]["query"][-2] for m in every]
    del query_shape
    return Ring(
        dist, group, rank, size, lengths, runs_of(lengths, parsed["layout"]), parsed["is_causal"], parsed["scale"],
        parsed["enable_gqa"],
    )  # fmt: skip


def _shape(x: Any) -> list[int] | None:
    """The shape of ``x`` as an array, or None when it is not one (a ragged list)."""
    try:
        return list(np.shape(x))
    except ValueError:
        return None


def _all_gather_json(dist: Any, group: Any, size: int, value: Any) -> list[Any]:
    """Every rank's ``value`` (JSON-able), in rank order: as bytes in tensors, not pickle."""
    import torch

    data = np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)
    lengths = [torch.zeros(1, dtype=torch.int64) for _ in range(size)]
    dist.all_gather(lengths, torch.tensor([len(data)]), group=group)
    longest = max(int(n) for n in lengths)
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[: len(data)] = torch.from_numpy(data.copy())
    gathered = [torch.zeros(longest, dtype=torch.uint8) for _ in range(size)]
    dist.all_gather(gathered, padded, group=group)
    return [json.loads(bytes(g.numpy()[: int(n)])) for g, n in zip(gathered, lengths, strict=True)]


def check_shards(query: Any, key: Any, value: Any, is_causal: Any, scale: Any, enable_gqa: Any) -> None:
    """This rank's own arguments: what an attention call over them checks, and one length."""
    make_problem(query, key, value, None, 0.0, is_causal, scale, enable_gqa, None)  # raises what it finds
    if np.shape(query)[-2] < 1:
        raise fail("query", "a shard of at least one row on every rank", f"shape {np.shape(query)}")
    if np.shape(key)[-2] != np.shape(query)[-2]:
        raise fail("key", f"the query shard's {np.shape(query)[-2]} rows (the same positions)", f"{np.shape(key)[-2]}")


def _pairs(ring: Ring, source: int, first: int, rows: int) -> Iterator[tuple[slice, slice, bool]]:
    """The products between this rank's queries and rows ``first`` … ``first + rows`` of
    ``source``'s shard: (query rows of the shard, key rows of the block, causal); causal
    ones start their queries and keys at the same position."""
    for q_offset, q_position, q_rows in ring.runs[ring.rank]:
        for k_offset, k_position, k_rows in ring.runs[source]:
            lo, hi = max(first, k_offset), min(first + rows, k_offset + k_rows)  # the block's rows in this run
            if lo >= hi or q_rows == 0:
                continue
            k0, k1 = k_position + lo - k_offset, k_position + hi - k_offset  # their positions
            q0, q1 = q_position, q_position + q_rows
            block = slice(lo - first, hi - first)
            if not ring.is_causal:
                yield slice(q_offset, q_offset + q_rows), block, False
                continue
            start = max(q0, k0)  # queries before the block's first key see none of it
            if start >= q1:
                continue
            queries = slice(q_offset + start - q0, q_offset + q_rows)
            seen = min(k1, start) - k0  # keys before the first such query: all of them seen
            if seen > 0:
                yield queries, slice(block.start, block.start + seen), False
            if k1 > start:  # the keys from `start` on: a causal product starting at the same position
                yield queries, slice(block.start + max(seen, 0), block.stop), True


def _chunks(rows: slice) -> Iterator[slice]:
    """Query rows in chunks of at most BLOCK."""
    for start in range(rows.start, rows.stop, BLOCK):
        yield slice(start, min(start + BLOCK, rows.stop))


def _split(queries: slice, keys: slice, causal: bool) -> Iterator[tuple[slice, slice, bool]]:
    """A product in query chunks of at most BLOCK rows; a causal one's later chunks see the
    keys before their first row in full, and the rest causally, from the same position."""
    for chunk in _chunks(queries):
        if not causal:
            yield chunk, keys, False
            continue
        before = chunk.start - queries.start  # keys of the product before this chunk's first query
        if before > 0:
            yield chunk, slice(keys.start, min(keys.stop, keys.start + before)), False
        if keys.start + before < keys.stop:
            yield chunk, slice(keys.start + before, keys.stop), True


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


def _local(ring: Ring, query: Array, key: Array, value: Array) -> Any:
    """The problem of this rank's shards: its output shape and dtypes."""
    return make_problem(query, key, value, None, 0.0, False, ring.scale, ring.enable_gqa, None)


def ring_forward(ring: Ring, query: Array, key: Array, value: Array, engine: Engine | None) -> tuple[Array, Array]:
    """This rank's output (B…, n, Ev) and lse (B…, n), in the compute dtype, of attention
    over the whole sequence."""
    pb = _local(ring, query, key, value)
    output = np.zeros(pb.output_shape, dtype=pb.compute_dtype)
    lse = np.full(pb.output_shape[:-1], -np.inf, dtype=pb.compute_dtype)
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
    for queries, keys, causal in _pairs(ring, source, j * BLOCK, key.shape[-2]):
        for rows, columns, is_causal in _split(queries, keys, causal):
            part = attention(
                query[..., rows, :], key[..., columns, :], value[..., columns, :], is_causal=is_causal,
                scale=ring.scale, enable_gqa=ring.enable_gqa, engine=engine,
            )  # fmt: skip
            _merge(output[..., rows, :], lse[..., rows], part.exact_output, part.lse)


def ring_backward(
    ring: Ring, grad_output: Array, query: Array, key: Array, value: Array, output: Array, lse: Array,
    engine: Engine | None,
) -> Gradients:  # fmt: skip
    """dQ, dK and dV of this rank's shards. Each block's dK and dV travel with it, and one
    step more, back to its owner. Every product recomputes its weights from the whole
    sequence's lse and δ = rowsum(dO∘O), so only a blocked engine will do."""
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
    return Gradients(*(g.astype(dtype, copy=False) for g in (grad_query, grad_key, grad_value)))


def _attend_backward(
    ring: Ring, query: Array, grad_output: Array, output: Array, lse: Array, grad_query: Array,
    held: tuple[Array, ...], source: int, j: int, engine: Engine,
) -> None:  # fmt: skip
    """Add this rank's queries' part of the gradients for block j of ``source``: to dQ in
    place, and to the block's dK and dV, which travel with it (``held``: k, v, dk, dv)."""
    key, value, grad_key, grad_value = held
    for queries, keys, causal in _pairs(ring, source, j * BLOCK, key.shape[-2]):
        for rows, columns, is_causal in _split(queries, keys, causal):
            problem = make_problem(
                query[..., rows, :], key[..., columns, :], value[..., columns, :], None, 0.0, is_causal, ring.scale,
                ring.enable_gqa, None,
            )  # fmt: skip
            dq, dk, dv = backward(problem, engine, grad_output[..., rows, :], (output[..., rows, :], lse[..., rows]))
            grad_query[..., rows, :] += dq
            grad_key[..., columns, :] += dk
            grad_value[..., columns, :] += dv


def settings(is_causal: Any, scale: Any, enable_gqa: Any, layout: Any) -> dict[str, Any]:
    """The arguments every rank must agree on, checked."""
    if layout not in LAYOUTS:
        raise fail("layout", f"one of {', '.join(LAYOUTS)}", repr(layout))
    is_causal, enable_gqa = flag("is_causal", is_causal), flag("enable_gqa", enable_gqa)
    return {"is_causal": is_causal, "scale": scale, "enable_gqa": enable_gqa, "layout": layout}
