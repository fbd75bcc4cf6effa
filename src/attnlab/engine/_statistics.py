"""Statistics of the attention weights, exact, from the tiled engine's tiles: never the
(L, S) matrix (letters as in ``_problem``).

For slice n (a batch entry and query head), query i and key j, with Z_ij the engine's
scores (the same rules in the same order, ``_masks``) and s_h the sink's logit (−∞
without sinks):

    lse_i        = log(Σ_j e^(Z_ij) + e^(s_h))                    the engine's lse
    P_ij         = e^(Z_ij − lse_i)                               the weights of the real keys
    entropy_i    = −Σ_j P_ij·log P_ij                             (0·log 0 = 0)
    max_weight_i = max_j P_ij
    top_k        the top_k keys of largest P_ij among those row i may attend (Z_ij > −∞),
                 weights descending, ties to the lower key index; −1 (weight 0) past them
    sink_share_i = Σ_{j < sink_keys} P_ij                         the first keys
    local_share_i = Σ_{stop_i − local_keys <= j} P_ij             the last keys it may see
    sinks_weight_i = e^(s_h − lse_i)                              the sink's own weight (0 without)
    received_j   = Σ_i P_ij                                       the attention key j receives
    distance_b   = Σ_{i, j: d_ij in bin b} P_ij,  d_ij = (i + offset) − j

stop_i is one past the last key that the band (``is_causal`` and ``window`` on the
diagonal of ``causal_alignment``) lets query i see, within its sequence's keys:
min(S_b, i + highest + 1), S_b = key_lengths[b] (S without). The sink is a key of the
softmax but no key of the text: its weight is ``sinks_weight``, in no other statistic
(a row's P_ij then sum to 1 − sinks_weight_i). d_ij is key j's distance behind query i's
diagonal (offset as in ``variants``: 0 top-left, S_b − L bottom-right), negative for a
key ahead of it; its bins, log-spaced, are d = 0 alone, then ±[2^(k−1), 2^k − 1] for
k = 1 … K, K = bit_length(L + S) (``distance_bins``).

Each block of queries takes two passes over its blocks of keys, the forward's
(``_tiled.forward_block_q`` × ``_tiled.BLOCK_K``, blocks outside the band skipped): the
first is the forward's online softmax (m_i, l_i and the sink joined last, so lse is the
tiled engine's, bit for bit), the second recomputes each block's Z and takes
log P = (Z − m) − log l, which keeps every digit where |lse| is large, and adds the block
into every statistic. Memory: O(L·top_k + S + K) per slice and a few blocks, never (L, S).

Two engines, chosen as ``attention`` chooses among the blocked ones (``engine=``): "tiled",
this module's loop with NumPy's kernels (the second pass 64 rows at a time); "fused", both
passes compiled (``fused._statistics_kernels``, each row into every statistic in cache)
where the fused engine compiles the problem whole, else this loop with the fused online
softmax and the compiled ``add_block``. They agree up to float rounding.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._validation import Array, fail, float_array, is_integer, positive_int
from . import _ragged, _tiled
from ._attention import blocked_engine, choose_engine, engine_problem
from ._problem import Engine, Problem, make_problem
from ._threads import run
from .fused import _engine as _fused
from .fused._statistics_tasks import add_block, statistics_tasks
from .variants import Rules

__all__ = [
    "BATCHED",
    "CHUNK",
    "LOCAL_KEYS",
    "SINK_KEYS",
    "TOP_K",
    "AttentionStatistics",
    "attention_row",
    "attention_statistics",
    "distance_bins",
]

TOP_K, SINK_KEYS, LOCAL_KEYS = 8, 4, 64  # the statistics' default sizes, for every caller

# The second pass adds a block into the statistics this many query rows at a time: the
# temporaries of 64 × BLOCK_K stay a few times smaller than the block itself.
CHUNK = 64
_NOT_SEEN = -1.0  # a top-k candidate's weight where the row may not attend the key (P >= 0 elsewhere)


@dataclass(frozen=True)
class AttentionStatistics:
    """The statistics of one attention call's weights (formulas in the module's docstring),
    in the compute dtype (float32 for float16 inputs); B… the broadcast batch shape, query
    heads last (GQA: one entry per query head).

    A row whose keys are all masked has lse −∞ (the sink's logit with sinks, its
    ``sinks_weight`` then 1), entropy, weights and shares 0, and top keys −1; a row with
    a NaN score has NaN statistics (its lse, as the engines give it) and top keys −1.

    Attributes:
        lse: (B…, L), the engine's log-sum-exp of each row.
        entropy: (B…, L), −Σ_j P_ij·log P_ij over the real keys, in nats.
        max_weight: (B…, L), max_j P_ij.
        top_keys: (B…, L, top_k) int64, keys by weight descending, ties to the lower index,
            −1 past the keys the row may attend.
        top_weights: (B…, L, top_k), their weights (0 past them).
        sink_share: (B…, L), the weight on keys j < sink_keys.
        local_share: (B…, L), the weight on the last local_keys keys the query may see.
        sinks_weight: (B…, L), the ``sinks`` logit's weight, e^(s_h − lse_i) (0 without sinks).
        received: (B…, S), Σ_i P_ij over every query (0 for a key no query sees).
        distance: (B…, 2K + 1), Σ P_ij by the bin of d = (i + offset) − j.
        distance_bins: (2K + 1, 2) int64, each bin's first and last d (:func:`distance_bins`).
        sink_keys: the s of ``sink_share``.
        local_keys: the w of ``local_share``.
    """

    lse: Array
    entropy: Array
    max_weight: Array
    top_keys: Array
    top_weights: Array
    sink_share: Array
    local_share: Array
    sinks_weight: Array
    received: Array
    distance: Array
    distance_bins: Array
    sink_keys: int
    local_keys: int

    def __getitem__(self, index: int | tuple[int, ...]) -> AttentionStatistics:
        """The statistics of the batch entry ``index`` (an index or a tuple of them into
        B…): every array of :data:`BATCHED` indexed so, the bins and the sizes kept."""
        return replace(self, **{name: getattr(self, name)[index] for name in BATCHED})


# AttentionStatistics' arrays over the batch B… (the bins and the sizes are not)
BATCHED = (
    "lse", "entropy", "max_weight", "top_keys", "top_weights", "sink_share", "local_share", "sinks_weight",
    "received", "distance",
)  # fmt: skip


def distance_bins(lengths: tuple[int, int]) -> Array:
    """The bins of d = (i + offset) − j for an (L, S) problem, (2K + 1, 2) int64 of
    [first, last] (inclusive), K = bit_length(L + S) (|d| < L + S at any offset):
    −[2^(K−1), 2^K − 1], …, −[1, 1], [0, 0], [1, 1], [2, 3], …, [2^(K−1), 2^K − 1]."""
    K = (lengths[0] + lengths[1]).bit_length()
    positive = np.array([[2 ** (k - 1), 2**k - 1] for k in range(1, K + 1)], dtype=np.int64).reshape(K, 2)
    return np.concatenate([-positive[::-1, ::-1], np.zeros((1, 2), np.int64), positive])  # (2K + 1, 2)


def _distance_bin(distance: Array, K: int) -> Array:
    """The bin (index into :func:`distance_bins`) of each integer distance d: K + sign(d)·k,
    k = bit_length(|d|) (frexp's exponent: |d| = f·2^k, f in [0.5, 1))."""
    return K + np.sign(distance) * np.frexp(np.abs(distance))[1]


@functools.lru_cache(maxsize=8)
def _diagonals(rows: int, cols: int) -> Array:
    """The diagonal of each cell of a (rows, cols) chunk, (rows, cols) int64, read-only:
    r − c + cols − 1, from 0 (the top-right cell) to rows + cols − 2 (the bottom-left)."""
    diagonal = np.subtract.outer(np.arange(rows), np.arange(cols)) + cols - 1  # (rows, cols)
    diagonal.flags.writeable = False
    return diagonal


@dataclass(frozen=True)
class _Results:
    """The statistics being made, (n, …) over n slices (the fields of AttentionStatistics)."""

    lse: Array  # (n, L)
    entropy: Array  # (n, L)
    max_weight: Array  # (n, L)
    top_keys: Array  # (n, L, top_k)
    top_weights: Array  # (n, L, top_k), _NOT_SEEN until the end
    sink_share: Array  # (n, L)
    local_share: Array  # (n, L)
    sinks_weight: Array  # (n, L)
    received: Array  # (n, S)
    distance: Array  # (n, 2K + 1), float64 (np.bincount's) until the end

    @classmethod
    def empty(cls, n: int, lengths: tuple[int, int], top_k: int, dtype: np.dtype) -> _Results:
        """Every row as one with no key: lse −∞, the rest 0, top keys −1."""
        L, S = lengths
        zeros = functools.partial(np.zeros, dtype=dtype)
        return cls(
            np.full((n, L), -np.inf, dtype),
            zeros((n, L)),
            zeros((n, L)),
            np.full((n, L, top_k), -1, np.int64),
            np.full((n, L, top_k), _NOT_SEEN, dtype),
            zeros((n, L)),
            zeros((n, L)),
            zeros((n, L)),
            zeros((n, S)),
            np.zeros((n, len(distance_bins(lengths))), np.float64),
        )

    def part(self, slices: slice, keys: int) -> _Results:
        """Views of the slices ``slices`` and their first ``keys`` keys (a sequence's)."""
        views = {f.name: getattr(self, f.name)[slices] for f in fields(self)}
        return _Results(**{**views, "received": self.received[slices, :keys]})

    def compiled(self) -> tuple[Array, ...]:
        """The statistics that the compiled pass adds into, in its order (``fused._statistics_kernels``)."""
        return (self.entropy, self.max_weight, self.top_keys, self.top_weights, self.sink_share,
                self.local_share, self.received, self.distance)  # fmt: skip


_KERNELS = {"tiled": _tiled.NUMPY, "fused": _fused.KERNELS}  # the first pass's online softmax, by engine


def _statistics_engine(engine: Any, pb: Problem) -> Engine:
    """The engine that computes the statistics: ``engine`` ("tiled" or "fused"), or None
    for the fastest here (fused where numba loads, else tiled: ``blocked_engine``).

    Raises:
        ValueError: any other engine ("naive" too: the statistics are made by blocks).
        MissingDependencyError: "fused" without numba.
    """
    if engine is None:
        return blocked_engine().name
    if not isinstance(engine, str) or engine not in _KERNELS:
        raise fail("engine", f"one of {tuple(_KERNELS)} or None (the statistics are made by blocks)", repr(engine))
    return choose_engine(engine, pb, need_weights=False)


@dataclass(frozen=True)
class _Pass:
    """What every slice's task reads: the problem (keys cut to a sequence's), the sizes
    of the statistics, and the results it writes (slice n at row n)."""

    pb: Problem
    top_k: int
    sink_keys: int
    local_keys: int
    bins: int  # K
    results: _Results
    engine: Engine  # "tiled": NumPy's kernels; "fused": the compiled ones (``fused._statistics_kernels``)

    @property
    def limits(self) -> tuple[int, ...]:
        """The sizes as the compiled pass takes them: (sink_keys, local_keys, the band's
        highest j − i, S, offset, K)."""
        rules = self.pb.rules
        return (self.sink_keys, self.local_keys, int(rules.band.highest), self.pb.lengths[1], int(rules.offset),
                self.bins)  # fmt: skip


def _merge_top(weights: Array, keys: Array, candidates: Array, seen: Array, cols: slice) -> None:
    """Merge a block's ``candidates`` (l, c) at keys ``cols`` (all after the kept ones;
    ``seen`` (l, c) those the rows may attend) into the top_k kept (weights, keys)
    (l, top_k), in place, sorted by weight descending then key ascending. Only a candidate
    above a row's k-th kept weight can enter (one equal to it has a higher key); where a
    row has more than top_k such, only those at or above the block's own k-th largest.
    The few that remain and the rows' kept ones are sorted by (row, −weight, key) and each
    row keeps its first top_k: ties go to the lower keys."""
    top_k = weights.shape[1]
    enter = (candidates > weights[:, -1:]) & seen  # (l, c); the k-th kept is −1 while fewer are kept
    count = enter.sum(axis=1)  # (l,)
    crowded = np.flatnonzero(count > top_k)
    if crowded.size:  # the block's k-th largest seen weight of those rows
        ranked = np.where(seen[crowded], candidates[crowded], _NOT_SEEN)  # (r, c)
        kth = np.partition(ranked, ranked.shape[1] - top_k, axis=1)[:, ranked.shape[1] - top_k]  # (r,)
        enter[crowded] &= ranked >= kth[:, None]
    rows, columns = np.nonzero(enter)  # row-major: each row's in key order
    if rows.size == 0:
        return
    changed = np.unique(rows)  # (m,) the rows with a new key
    row = np.concatenate([np.repeat(changed, top_k), rows])  # (m·top_k + e,)
    weight = np.concatenate([weights[changed].ravel(), candidates[rows, columns]])
    key = np.concatenate([keys[changed].ravel(), columns + cols.start])
    order = np.lexsort((key, -weight, row))  # by row, then weight descending, then key ascending
    starts = np.searchsorted(row[order], changed)  # each changed row's first place in the order, (m,)
    first = order[(starts[:, None] + np.arange(top_k)).ravel()]  # its first top_k, (m·top_k,)
    weights[changed] = weight[first].reshape(-1, top_k)  # (m, top_k)
    keys[changed] = key[first].reshape(-1, top_k)  # (m·top_k,) -> (m, top_k)


def _row_softmax(
    pb: Problem, s: _tiled.Slice, q_scaled: Array, rows: slice, sink: float | None, engine: Engine
) -> tuple[Array, Array]:
    """(m, l) of the query rows ``rows`` (l,) by the forward's online softmax (``engine``'s
    kernels), the sink joined last (``_tiled._forward_block``): lse = m + log l."""
    count = rows.stop - rows.start
    row_max = np.full(count, -np.inf, dtype=q_scaled.dtype)  # m, (l,)
    row_sum = np.zeros(count, dtype=q_scaled.dtype)  # l, (l,)
    for cols in _tiled.key_blocks(pb, rows, True):
        block = _tiled.block_scores(pb, s, q_scaled, rows, cols, True)
        if block is not None:
            _KERNELS[engine].online_softmax_(block[0], row_max, row_sum)
    if sink is not None:
        row_max, row_sum, _ = _tiled.join_sink(row_max, row_sum, sink)
    return row_max, row_sum


def _rows_task(job: _Pass, s: _tiled.Slice, rows: slice, sink: float | None) -> None:
    """Every statistic of the query rows ``rows`` of slice ``s``: the first pass for m and
    l, the second turning each block of Z into log P and adding it into the statistics
    CHUNK rows at a time (so that their temporaries stay a fraction of the block's)."""
    pb, out, n = job.pb, job.results, s.n
    q_scaled = s.q[rows] * np.asarray(pb.scale, dtype=s.q.dtype)  # (l, E)
    row_max, row_sum = _row_softmax(pb, s, q_scaled, rows, sink, job.engine)
    out.lse[n, rows] = row_max + np.log(row_sum)
    shift = np.where(np.isneginf(row_max), 0.0, row_max)  # a row with no key: P = e^(−∞) = 0
    low = np.log(np.where(row_sum > 0, row_sum, 1.0))  # log l, (l,)
    if sink is not None:
        out.sinks_weight[n, rows] = np.exp((sink - shift) - low)
    for cols in _tiled.key_blocks(pb, rows, True):
        block = _tiled.block_scores(pb, s, q_scaled, rows, cols, True)
        if block is None:
            continue
        log_weights = block[0]  # Z, (l, c)
        log_weights -= shift[:, None]
        log_weights -= low[:, None]  # log P = (Z − m) − log l
        if job.engine == "fused":
            add_block(log_weights, n, rows, cols, job.limits, out.compiled())
            continue
        for part in _tiled.blocks(rows.stop - rows.start, CHUNK):
            chunk = slice(rows.start + part.start, rows.start + part.stop)
            _add_chunk(job, n, chunk, cols, log_weights[part])


def _add_chunk(job: _Pass, n: int, rows: slice, cols: slice, log_weights: Array) -> None:
    """Add the weights of the query rows ``rows`` and keys ``cols`` of slice n, given as
    log P (l, c) (−∞ where the key is masked; overwritten), into every statistic."""
    out, offset = job.results, job.pb.rules.offset
    query, key = np.arange(rows.start, rows.stop), np.arange(cols.start, cols.stop)  # i (l,), j (c,)
    weights = np.exp(log_weights)  # P, (l, c)
    seen = log_weights > -np.inf  # the keys the rows may attend (False for NaN too), (l, c)
    _merge_top(out.top_weights[n, rows], out.top_keys[n, rows], weights, seen, cols)
    np.maximum(out.max_weight[n, rows], weights.max(axis=1), out=out.max_weight[n, rows])
    out.received[n, cols] += weights.sum(axis=0)
    if cols.start < job.sink_keys:
        out.sink_share[n, rows] += weights[:, : job.sink_keys - cols.start].sum(axis=1)
    stop = np.clip(query + job.pb.rules.band.highest + 1, 0, job.pb.lengths[1])  # stop_i, (l,)
    local_from = stop - job.local_keys  # (l,)
    if cols.stop > local_from.min():
        first = max(int(local_from.min()) - cols.start, 0)  # the block's first column any row counts
        local = key[first:] >= local_from[:, None]  # (l, c − first)
        out.local_share[n, rows] += np.where(local, weights[:, first:], 0.0).sum(axis=1)
    diagonals = weights.shape[0] + weights.shape[1] - 1
    by_diagonal = np.bincount(_diagonals(*weights.shape).ravel(), weights.ravel(), minlength=diagonals)  # Σ P by i − j
    nearest = rows.start + offset - cols.stop + 1  # the least d = (i + offset) − j of the chunk, on diagonal 0
    bins = _distance_bin(np.arange(nearest, nearest + diagonals), job.bins)  # each diagonal's bin, (diagonals,)
    out.distance[n] += np.bincount(bins, by_diagonal, minlength=out.distance.shape[1])
    np.copyto(log_weights, 0.0, where=~seen)  # P·log P = 0 where P = 0 for a masked key
    log_weights *= weights  # P·log P, (l, c)
    out.entropy[n, rows] -= log_weights.sum(axis=1)


def _tasks(job: _Pass, threads: int | None) -> list[_tiled.Task]:
    """One task per slice of ``job.pb``, writing its results at the slice's row of
    ``job.results``: its blocks of queries one after another, since they all add into its
    ``received`` and ``distance``. The fused engine's compiled tasks where it compiles the
    problem whole (no attention mask, no mask function: ``fused._statistics_tasks``), else
    this loop, with the fused engine's kernels where it is the engine."""
    pb, results = job.pb, job.results
    if job.engine == "fused":
        compiled = statistics_tasks(pb, job.limits, results.compiled(), results.lse, results.sinks_weight, threads)
        if compiled is not None:
            return compiled
    sinks = pb.per_slice(pb.rules["sinks"])
    row_blocks = _tiled.blocks(pb.lengths[0], _tiled.forward_block_q(pb))

    def slice_task(s: _tiled.Slice) -> None:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # −∞ scores; log 0 of a row with no key
            for rows in row_blocks:
                _rows_task(job, s, rows, None if sinks is None else float(sinks[s.n]))

    return [functools.partial(slice_task, s) for s in _tiled.slice_views(pb, pb.value)]


def _weights_problem(
    query: ArrayLike, key: ArrayLike, attn_mask: ArrayLike | None, key_lengths: ArrayLike | None,
    scale: float | None, enable_gqa: bool, rules: Rules,
) -> Problem:  # fmt: skip
    """The problem of the weights softmax(Z) of :func:`attnlab.attention` with these
    arguments: no values, no dropout, Q's rows scaled by the row-scaling variants
    (``length_scale``) as the engines run them."""
    key = float_array("key", key)
    no_values = key[..., :0]  # (B…, S, 0): the problem's V, which no statistic reads
    pb = make_problem(query, key, no_values, attn_mask, 0.0, scale, enable_gqa, None, rules, key_lengths=key_lengths)
    return engine_problem(pb)[0]


def attention_row(
    query: ArrayLike,
    key: ArrayLike,
    row: int,
    *,
    attn_mask: ArrayLike | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    rules: Rules | None = None,
    **variants: Any,
) -> Array:
    """One query's whole row of the weights softmax(Z) of :func:`attnlab.attention` with the
    same arguments (no values, no dropout), computed for that row alone, in every slice:
    P_ij = e^(Z_ij − lse_i) for i = ``row`` and every key j, by the tiles' Z and the
    forward's online softmax with the sink joined last, as :func:`attention_statistics`
    computes them (0 for a key the row may not attend; the row sums to 1 − its
    ``sinks_weight``). O(S·E) work and O(S) memory per slice, never (L, S).

    Args:
        query: Q, (B…, L, E).
        key: K, (B…, S, E).
        row: i, the query's index in 0..L − 1 (its position in the rules: the causal band,
            the window, ``length_scale``'s n_i, are those of row i of the whole problem).
        attn_mask, scale, enable_gqa, rules, variants: as :func:`attention_statistics`'s.

    Returns:
        The weights (B…, S) in the compute dtype.

    Raises:
        ValueError: what :func:`attnlab.attention` refuses, or a ``row`` outside 0..L − 1.
        TypeError: an argument of the wrong type or dtype.
    """
    pb = _weights_problem(query, key, attn_mask, None, scale, enable_gqa, Rules.of(**variants).unless(rules))
    L, S = pb.lengths
    if not is_integer(row) or not 0 <= row < L:
        raise fail("row", f"a query index in 0..{L - 1}", repr(row))
    weights = np.zeros((pb.slices, S), pb.compute_dtype)  # (n, S)
    sinks = pb.per_slice(pb.rules["sinks"])
    rows = slice(int(row), int(row) + 1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # −∞ scores; log 0 of a row with no key
        for s in _tiled.slice_views(pb, pb.value):
            q_scaled = s.q[rows] * np.asarray(pb.scale, dtype=s.q.dtype)  # (1, E)
            row_max, row_sum = _row_softmax(
                pb, s, q_scaled, rows, None if sinks is None else float(sinks[s.n]), "tiled"
            )
            shift = np.where(np.isneginf(row_max), 0.0, row_max)  # a row with no key: P = e^(−∞) = 0
            low = np.log(np.where(row_sum > 0, row_sum, 1.0))  # log l, (1,)
            for cols in _tiled.key_blocks(pb, rows, True):
                block = _tiled.block_scores(pb, s, q_scaled, rows, cols, True)
                if block is not None:
                    weights[s.n, cols] = np.exp((block[0][0] - shift[0]) - low[0])  # P = e^((Z − m) − log l)
    return weights.reshape(*pb.batch_shape, S)  # (n, S) -> (B…, S)


def attention_statistics(
    query: ArrayLike,
    key: ArrayLike,
    *,
    attn_mask: ArrayLike | None = None,
    key_lengths: ArrayLike | None = None,
    scale: float | None = None,
    enable_gqa: bool = False,
    rules: Rules | None = None,
    top_k: int = TOP_K,
    sink_keys: int = SINK_KEYS,
    local_keys: int = LOCAL_KEYS,
    engine: Engine | None = None,
    num_threads: int | None = None,
    **variants: Any,
) -> AttentionStatistics:
    """The statistics of the weights softmax(Z) of :func:`attnlab.attention` with the same
    arguments (no values, no dropout: the weights before it), exact, from the tiles
    (formulas in the module's docstring): per query, its lse, entropy, largest weight, top
    keys, sink and local shares and the sink's weight; per key, the attention it receives;
    per slice, the weight by distance from the diagonal. Never the (L, S) weights:
    O(L·top_k + S) memory per slice and a few blocks.

    Args:
        query: Q, (B…, L, E).
        key: K, (B…, S, E).
        attn_mask, key_lengths, scale, enable_gqa, rules: as :func:`attnlab.attention`'s.
        top_k: how many keys of largest weight each query keeps (>= 1).
        sink_keys: s, the first keys whose weight is ``sink_share`` (>= 1).
        local_keys: w, the last keys a query may see whose weight is ``local_share`` (>= 1).
        engine: "fused" (the compiled pass, ``fused._statistics_kernels``; with an
            attention mask or a mask function, the loop below with compiled kernels, as
            the fused engine runs attention then), "tiled" (NumPy), or None: fused where
            numba loads, else tiled. The same statistics up to float rounding.
        num_threads: threads (one task per slice); default as :func:`attnlab.attention`'s.
        variants: the variants by keyword (``is_causal=True, window=(64, 0)``, any field of
            :class:`attnlab.Rules` or a registered variant's name such as ``length_scale``:
            ``Rules.of(**variants)``), or none with ``rules``.

    Returns:
        An :class:`AttentionStatistics`.

    Raises:
        ValueError: what :func:`attnlab.attention` refuses, a count below 1, a variant
            no Rules field or registered variant names, or an engine other than those.
        MissingDependencyError: ``engine="fused"`` without numba.
        TypeError: an argument of the wrong type or dtype.
    """
    top_k, sink_keys, local_keys = (
        positive_int(name, x) for name, x in (("top_k", top_k), ("sink_keys", sink_keys), ("local_keys", local_keys))
    )
    threads = None if num_threads is None else positive_int("num_threads", num_threads)
    pb = _weights_problem(query, key, attn_mask, key_lengths, scale, enable_gqa, Rules.of(**variants).unless(rules))
    chosen = _statistics_engine(engine, pb)
    L, S = pb.lengths
    results = _Results.empty(pb.slices, (L, S), top_k, pb.compute_dtype)
    bins = (L + S).bit_length()  # K
    if pb.key_lengths is None:
        tasks = _tasks(_Pass(pb, top_k, sink_keys, local_keys, bins, results, chosen), threads)
    else:
        tasks, H = [], pb.heads
        for flat, (_, length, sequence) in enumerate(_ragged.sequences(pb)):
            part = results.part(slice(flat * H, (flat + 1) * H), length)
            if length > 0:
                tasks += _tasks(_Pass(sequence, top_k, sink_keys, local_keys, bins, part, chosen), threads)
            elif sequence.rules["sinks"] is not None:  # no key: the sink takes the whole row
                part.lse[...] = sequence.rules["sinks"][:, None]
                part.sinks_weight[...] = 1.0
    run(tasks, threads)
    unseen = results.top_weights == _NOT_SEEN
    results.top_weights[unseen] = 0.0
    results.top_keys[unseen] = -1
    batch = pb.batch_shape
    made = {f.name: getattr(results, f.name) for f in fields(results)}
    made["distance"] = made["distance"].astype(pb.compute_dtype)
    return AttentionStatistics(
        **{name: x.reshape(*batch, *x.shape[1:]) for name, x in made.items()},  # (n, …) -> (B…, …)
        distance_bins=distance_bins((L, S)),
        sink_keys=sink_keys,
        local_keys=local_keys,
    )
