"""The decode path's numba kernels: a few queries against a long key/value cache, read
once (``_decode`` schedules them; letters as in ``_problem``).

The cache is cut into units of at most DECODE_CHUNK keys of one key/value head. A unit
reads its keys and values once, for the M = G·L query rows of its head's group (the G
query heads that share it, L queries each), and leaves a partial softmax: per row its
maximum m, its sum l = Σ_j e^(Z_j − m) and acc = Σ_j e^(Z_j − m)·V_j. The units of a head
are then merged by their lse in a fixed order (``merge``), so the bits never depend on
how the units were shared among threads. Nothing here holds the GIL.

Arrays: ``queries`` = each head's rows scaled, scale·Q (Nk, M, E), and transposed
(Nk, E, M); the keys
and values as flat arrays of their memory, ``cache`` = (key, key_heads, value,
value_heads): head h's key row j (E elements) starts at key_heads[h] + j·E, its value row
(Ev elements) at value_heads[h] + j·Ev, so that a cache's view is read where it lies,
uncopied; ``units`` (U, 3): (head, first key, stop); the partials m, l (U, M) and acc
(U, M, Ev); ``shifts`` (Nk,): how far each head's diagonal lies from the problem's
(key_length − S with bottom-right alignment and ragged lengths, else 0); ``variant`` as
``_tasks._variant``'s.
"""

from __future__ import annotations

import numpy as np

from ._kernels import (
    _constants,
    _exp,
    _in_dtype_of,
    _modified_row_max,
    _row_max,
    _row_sum,
    compile_,
)

__all__ = ["GEMV_ROWS", "decode_units", "merge"]


@compile_
def _shifted(variant, n, shift):  # type: ignore[no-untyped-def]
    """slice n's modifiers (``_kernels._slice_modifiers``) with the band and the diagonal
    moved by ``shift``: those of a sequence of fewer keys, bottom-right aligned."""
    (lowest, highest), offset = variant[0], variant[1]
    return (lowest + shift, highest + shift), offset + shift, variant[2], (variant[3][0], variant[3][1][n])


@compile_
def _weighted_values(value, first, start, count, scores, acc):  # type: ignore[no-untyped-def]
    """acc (M, Ev) ← scores (M, count) · (values start … start + count of the head whose
    rows start at ``first``): four value rows at a time, each read once for every query
    row, acc_e += ((p₀·v₀ₑ + p₁·v₁ₑ) + p₂·v₂ₑ) + p₃·v₃ₑ, two query rows at a time."""
    rows, width = acc.shape[0], acc.shape[1]
    for r in range(rows):
        for e in range(width):
            acc[r, e] = 0
    quads = count - count % 4
    for j in range(0, quads, 4):
        at = first + (start + j) * width
        v0, v1 = value[at : at + width], value[at + width : at + 2 * width]
        v2, v3 = value[at + 2 * width : at + 3 * width], value[at + 3 * width : at + 4 * width]
        for r in range(0, rows - 1, 2):
            p0, p1, p2, p3 = scores[r, j], scores[r, j + 1], scores[r, j + 2], scores[r, j + 3]
            w0, w1, w2, w3 = scores[r + 1, j], scores[r + 1, j + 1], scores[r + 1, j + 2], scores[r + 1, j + 3]
            out, other = acc[r], acc[r + 1]
            for e in range(width):
                a, b, c, d = v0[e], v1[e], v2[e], v3[e]
                out[e] += p0 * a + p1 * b + p2 * c + p3 * d
                other[e] += w0 * a + w1 * b + w2 * c + w3 * d
        if rows % 2:
            r = rows - 1
            p0, p1, p2, p3 = scores[r, j], scores[r, j + 1], scores[r, j + 2], scores[r, j + 3]
            out = acc[r]
            for e in range(width):
                out[e] += p0 * v0[e] + p1 * v1[e] + p2 * v2[e] + p3 * v3[e]
    for j in range(quads, count):
        at = first + (start + j) * width
        v = value[at : at + width]
        for r in range(rows):
            p = scores[r, j]
            out = acc[r]
            for e in range(width):
                out[e] += p * v[e]


# Up to this many rows per key/value head, each row's products are GEMVs of its own: the
# first reads the unit's keys (or values) from memory, the others from L2. Measured on one
# core, 8 heads of 8192 keys, E = 128: 4 rows 6.2 ms against 7.8 for BLAS's (2048 × 128)·
# (128 × 4) and ``_weighted_values``; 8 rows 10.5 against 9.1.
GEMV_ROWS = 4


@compile_
def _scores(queries, keys, head, scores, transposed):  # type: ignore[no-untyped-def]
    """scores (M, count) ← K_u·q_r for each row r of the head's queries: GEMVs of
    queries[0][head] (M, E) for M <= GEMV_ROWS, else one product with queries[1][head]
    (E, M) into ``transposed`` (count, M), copied."""
    rows = scores.shape[0]
    if rows <= GEMV_ROWS:
        for r in range(rows):
            np.dot(keys, queries[0][head, r], scores[r])  # GEMV
        return
    np.dot(keys, queries[1][head], transposed)
    for r in range(rows):
        for j in range(scores.shape[1]):
            scores[r, j] = transposed[j, r]


@compile_
def _unit(queries, cache, u, units, shifts, variant, groups, length, modified, work, partials):  # type: ignore[no-untyped-def]
    """Unit u's partial softmax (m, l, acc of each of its rows) into ``partials``: the
    scores K_u·q (``_scores``), then, per row in cache, the variants, the row maximum m,
    exp(Z − m) and l, then Σ P·V, GEMVs for M <= GEMV_ROWS, else ``_weighted_values``
    (BLAS's small products are slower there: 3.5 against 1.6 ms for M = 4)."""
    key, key_heads, value, value_heads = cache
    part_max, part_sum, part_acc = partials
    head, start, stop = units[u, 0], units[u, 1], units[u, 2]
    count, width, rows = stop - start, queries[1].shape[1], queries[1].shape[2]
    keys = key[key_heads[head] + start * width : key_heads[head] + stop * width].reshape((count, width))
    values_width = part_acc.shape[2]
    at = value_heads[head]
    values = value[at + start * values_width : at + stop * values_width].reshape((count, values_width))
    scores = work[0][: rows * count].reshape((rows, count))  # Z, then P, (M, count)
    _scores(queries, keys, head, scores, work[1][: rows * count].reshape((count, rows)))
    zero, minus_inf = _constants(scores)[6:]
    for r in range(rows):
        row = scores[r]
        if modified:
            n = head * groups + r // length
            top = _modified_row_max(row, r % length, start, _shifted(variant, n, shifts[head]))
        else:
            top = _row_max(row)
        shift = zero if top == minus_inf else top
        for j in range(count):
            row[j] = _exp(row[j] - shift, row)
        part_max[u, r] = top
        part_sum[u, r] = _row_sum(row)
    if rows <= GEMV_ROWS:
        for r in range(rows):
            np.dot(scores[r], values, part_acc[u, r])  # GEMV
    else:
        _weighted_values(value, at, start, count, scores, part_acc[u])


@compile_
def decode_units(queries, cache, units, first, stop, shifts, variant, groups, length, modified, chunk, partials):  # type: ignore[no-untyped-def]
    """The partials of units first … stop − 1 (see the module's docstring); ``length``: L,
    ``modified``: whether any row's scores are modified (softcap, ALiBi, a band that cuts
    a unit)."""
    size = queries[0].shape[1] * chunk
    work = (np.empty(size, queries[0].dtype), np.empty(size, queries[0].dtype))
    for u in range(first, stop):
        _unit(queries, cache, u, units, shifts, variant, groups, length, modified, work, partials)


@compile_
def merge(partials, head_units, groups, length, variant, unscale, out, lse):  # type: ignore[no-untyped-def]
    """out (N, L, Ev) and lse (N, L) from the partials of each head's units, units
    head_units[h] … head_units[h + 1] − 1 of head h, merged in order of their keys:

        m = max_u m_u;  l = Σ_u e^(m_u − m)·l_u;  acc = Σ_u e^(m_u − m)·acc_u
        the sink s joins last: m' = max(m, s), κ = e^(m − m'), l' = κ·l + e^(s − m')
        O = unscale·κ·acc / l' (0 where l = 0: no key allowed);  lse = m' + log l'"""
    part_max, part_sum, part_acc = partials
    heads, rows, width = head_units.shape[0] - 1, part_max.shape[1], part_acc.shape[2]
    zero, minus_inf = _constants(out)[6:]
    one = _in_dtype_of(1.0, out)
    acc = np.empty(width, out.dtype)
    for h in range(heads):
        for r in range(rows):
            n, i = h * groups + r // length, r % length
            top = minus_inf
            for u in range(head_units[h], head_units[h + 1]):
                m = part_max[u, r]
                top = m if m > top or m != m else top  # a NaN maximum stays NaN
            shift = zero if top == minus_inf else top
            total = zero
            acc[:] = 0
            for u in range(head_units[h], head_units[h + 1]):
                factor = _exp(part_max[u, r] - shift, out)
                total += factor * part_sum[u, r]
                for e in range(width):
                    acc[e] += factor * part_acc[u, r, e]
            empty = total == 0
            kept = one
            if variant[4][0]:
                sink = variant[4][1][n]
                joined = sink if sink > top else top
                kept = _exp(top - joined, out)
                total = total * kept + _exp(sink - joined, out)
                top = joined
            for e in range(width):
                out[n, i, e] = zero if empty else unscale * (acc[e] * kept / total)
            lse[n, i] = top + np.log(total)
