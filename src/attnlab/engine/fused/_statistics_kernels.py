"""The compiled statistics pass (``attnlab.engine.attention_statistics`` on the fused
engine); imported on first use only, as ``_kernels``, whose exponential, row maximum,
row sum, score modifiers and products it shares. Letters as in ``_problem``.

Per row i of a block of scores Z (keys from ``first_key``), given its shift m'_i and
log l'_i (the online softmax's, the sink joined), every statistic in one visit of the
row while it is in cache (``_add_row``):

    x_j = (Z_j − m') − log l'   (log P, −∞ for a masked key);   P_j = e^(x_j)
    entropy_i −= Σ_j P_j·x_j (masked keys 0);  max_weight_i = max(max_weight_i, max_j P_j)
    received_j += P_j;  sink_share_i += Σ_{j < sink_keys} P_j
    local_share_i += Σ_{j >= stop_i − local_keys} P_j
    distance_b += Σ P_j over the run of keys whose d = (i + offset) − j falls in bin b
                  (a run per bin: d changes by one per key, so a bin is a run of keys)
    top-k: a key of P_j above the k-th kept weight (and not masked) is inserted into the
           kept (weights descending), after the kept ones of equal weight: keys arrive in
           increasing order, so ties keep the lower key, and a key equal to the k-th is
           not taken.

``statistics`` runs both passes of a task's slices compiled, as ``_kernels.attend``
runs the forward: pass 1 is the forward's online softmax over the same blocks (so the
lse is the fused engine's, bit for bit), pass 2 recomputes each block's Z by BLAS and
adds its rows. ``add_block`` adds one block of log P from Python (the tiled engine's
loop, for problems with an attention mask or a mask function).

The output tuple ``out``: (entropy (N, L), max_weight (N, L), top_keys (N, L, k) int64,
top_weights (N, L, k), sink_share (N, L), local_share (N, L), received (N, S),
distance (N, 2K + 1) float64); top_weights start at −1 (no key kept). ``limits``:
(sink_keys, local_keys, the band's highest j − i, S, offset, K).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._kernels import (
    _CACHE,
    _band_columns,
    _band_keys,
    _constants,
    _exp,
    _matrix,
    _modified_row_max,
    _online_softmax_row,
    _product,
    _row_max,
    _row_sum,
    _scaled_rows,
    _slice_modifiers,
    _unmodified,
    _wide_vectors,
    compile_,
    online_softmax,
)

__all__ = ["add_block", "statistics"]

compile_sum = njit(nogil=True, cache=_CACHE, error_model="numpy", fastmath={"reassoc", "nsz", "contract"})


@compile_
def _log_weights_(row, weights, shift, low):  # type: ignore[no-untyped-def]
    """row_j ← x_j = (row_j − shift) − low (log P) and weights_j ← e^(x_j) (P)."""
    _wide_vectors()
    for j in range(row.shape[0]):
        x = (row[j] - shift) - low
        row[j] = x
        weights[j] = _exp(x, row)


@compile_sum
def _entropy_terms(logs, weights):  # type: ignore[no-untyped-def]
    """Σ_j P_j·x_j over the keys with x_j > −∞ (P·log P = 0 for a masked key)."""
    _wide_vectors()
    zero, minus_inf = _constants(logs)[6:]
    total = zero
    for j in range(logs.shape[0]):
        total += weights[j] * (logs[j] if logs[j] > minus_inf else zero)
    return total


@compile_
def _add_(total, part):  # type: ignore[no-untyped-def]
    """total_j += part_j, two vectors of one length."""
    _wide_vectors()
    for j in range(total.shape[0]):
        total[j] += part[j]


@compile_
def _bit_length(d):  # type: ignore[no-untyped-def]
    """The bits of a positive integer d: k with 2^(k−1) <= d < 2^k."""
    k = 0
    while d > 0:
        d >>= 1
        k += 1
    return k


@compile_
def _add_distance_(weights, start, stop, diagonal, bins, distance):  # type: ignore[no-untyped-def]
    """distance (2K + 1,) += the weights of columns start … stop − 1 by the bin of
    d = diagonal − j (``diagonal``: d of column 0), one run of columns per bin:
    K + sign(d)·bit_length(|d|)."""
    j = start
    while j < stop:
        d = diagonal - j
        if d == 0:
            index, end = bins, j + 1
        elif d > 0:  # d falls as j grows: the run ends where d drops below 2^(k−1)
            k = _bit_length(d)
            index, end = bins + k, diagonal - (1 << (k - 1)) + 1
        else:  # the run ends where −d passes 2^k − 1
            k = _bit_length(-d)
            index, end = bins - k, diagonal + (1 << k)
        end = min(end, stop)
        distance[index] += _row_sum(weights[j:end])
        j = end


@compile_
def _insert_top_(logs, weights, first_key, start, stop, top_keys, top_weights):  # type: ignore[no-untyped-def]
    """The kept top keys and weights (k,) of a row, weights descending and ties by the
    lower key, with columns start … stop − 1 (keys first_key + j, after the kept ones)
    inserted where above the k-th kept weight (masked keys, x = −∞, never)."""
    last = top_weights.shape[0] - 1
    minus_inf = _constants(logs)[7]
    floor = top_weights[last]
    for j in range(start, stop):
        p = weights[j]
        if p > floor and logs[j] > minus_inf:
            place = last
            while place > 0 and top_weights[place - 1] < p:  # after the kept ones of equal weight
                top_weights[place] = top_weights[place - 1]
                top_keys[place] = top_keys[place - 1]
                place -= 1
            top_weights[place] = p
            top_keys[place] = first_key + j
            floor = top_weights[last]


@compile_
def _add_row(row, weights, shift, low, n, query, first_key, columns, limits, out):  # type: ignore[no-untyped-def]
    """Row ``query`` of slice n, Z (keys from ``first_key``; overwritten by log P), into
    every statistic of ``out`` (the module's docstring); ``weights`` a work row of its
    length; ``columns`` the (start, stop) of its keys that the band lets it see (the others
    weigh 0)."""
    entropy, max_weight, top_keys, top_weights, sink_share, local_share, received, distance = out
    sink_keys, local_keys, highest, keys, offset, bins = limits
    count = row.shape[0]
    _log_weights_(row, weights, shift, low)
    entropy[n, query] -= _entropy_terms(row, weights)
    top = _row_max(weights)
    if top > max_weight[n, query] or top != top:  # NaN wins, as NumPy's maximum
        max_weight[n, query] = top
    _add_(received[n, first_key : first_key + count], weights)
    if first_key < sink_keys:
        sink_share[n, query] += _row_sum(weights[: min(sink_keys - first_key, count)])
    local_from = min(max(query + highest + 1, 0), keys) - local_keys - first_key  # stop_i − w, as a column
    if local_from < count:
        local_share[n, query] += _row_sum(weights[max(local_from, 0) :])
    start, stop = columns
    _add_distance_(weights, start, stop, query + offset - first_key, bins, distance[n])
    _insert_top_(row, weights, first_key, start, stop, top_keys[n, query], top_weights[n, query])


@compile_
def add_block(log_weights, n, first_query, first_key, limits, out):  # type: ignore[no-untyped-def]
    """A block of log P (l, c) (−∞ where masked; overwritten) of slice n, queries from
    ``first_query`` and keys from ``first_key``, into the statistics ``out``."""
    weights = np.empty(log_weights.shape[1], log_weights.dtype)
    zero = _constants(log_weights)[6]
    for i in range(log_weights.shape[0]):
        _add_row(
            log_weights[i], weights, zero, zero, n, first_query + i, first_key, (0, log_weights.shape[1]), limits, out
        )


@compile_
def statistics(blas, arrays, groups, slices, variant, skip, scale, blocks, work, limits, out, lse, sinks_weight):  # type: ignore[no-untyped-def]
    """Every statistic of slices ``slices`` (first, stop), all their rows, into ``out``,
    lse (N, L) and sinks_weight (N, L); arrays = (query (N, L, E), key (N / groups, S, E)),
    the other arguments as ``_kernels.attend``'s, ``work`` = (scaled queries (block_q·E,),
    scores (block_q·block_k,), a row (block_k,), m, l (block_q,), rescale (block_q,)).
    For each slice n and each block of queries Q_i:

        pass 1: m, l by the online softmax over the blocks of keys met (``attend``'s);
                the sink joins (``_finish_rows``): m', l';  lse_i = m' + log l'
        pass 2: Z = q·K_jᵀ again, modified as in pass 1; each row into the statistics
                with shift m' (0 for a row with no key) and log l' (0 for l' = 0)"""
    _wide_vectors()
    query, key = arrays
    block_q, block_k = blocks
    q_work, scores_work, weights_work, row_max, row_sum, rescale = work
    E, L, S = query.shape[2], query.shape[1], key.shape[1]
    zero, minus_inf = _constants(q_work)[6:]
    for n in range(slices[0], slices[1]):
        k = key[n // groups]
        modifiers, sink = _slice_modifiers(variant, n), (variant[4][0], variant[4][1][n])
        for first in range(0, L, block_q):
            stop = min(first + block_q, L)
            count = stop - first
            q = _matrix(q_work, count, E)
            _scaled_rows(query, n, first, scale, q)
            row_max[:] = minus_inf
            row_sum[:] = 0
            keys_from, keys_to = _band_keys(variant[0], skip, first, stop, S)
            for grid in range(keys_from - keys_from % block_k, keys_to, block_k):  # pass 1, as attend's
                start, end = max(grid, keys_from), min(grid + block_k, keys_to)
                block = _matrix(scores_work, count, end - start)
                _product(blas, q, k[start:end].T, block)
                if _unmodified(modifiers, (first, stop), (start, end)):
                    online_softmax(block, row_max[:count], row_sum[:count], rescale[:count])
                else:
                    for i in range(count):
                        top = _modified_row_max(block[i], first + i, start, modifiers)
                        _online_softmax_row(block[i], i, top, row_max, row_sum, rescale)
            for i in range(count):  # the sink joins last, as _finish_rows; m', log l' into row_max, row_sum
                top, total = row_max[i], row_sum[i]
                if sink[0]:
                    joined = sink[1] if sink[1] > top else top
                    total = total * _exp(top - joined, row_max) + _exp(sink[1] - joined, row_max)
                    top = joined
                lse[n, first + i] = top + np.log(total)
                row_max[i] = zero if top == minus_inf else top
                row_sum[i] = np.log(total) if total > zero else zero
                if sink[0]:
                    sinks_weight[n, first + i] = _exp((sink[1] - row_max[i]) - row_sum[i], row_max)
            for grid in range(keys_from - keys_from % block_k, keys_to, block_k):  # pass 2
                start, end = max(grid, keys_from), min(grid + block_k, keys_to)
                block = _matrix(scores_work, count, end - start)
                _product(blas, q, k[start:end].T, block)
                plain = _unmodified(modifiers, (first, stop), (start, end))
                for i in range(count):
                    if not plain:
                        _modified_row_max(block[i], first + i, start, modifiers)
                    columns = _band_columns(modifiers[0], first + i, start, end - start)
                    weights = weights_work[: end - start]
                    _add_row(block[i], weights, row_max[i], row_sum[i], n, first + i, start, columns, limits, out)
