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
    _wide_vectors,
    compile_,
)

__all__ = ["WEIGHTED_ROWS", "decode_units", "merge"]


@compile_
def _shifted(variant, n, shift):  # type: ignore[no-untyped-def]
    """slice n's modifiers (``_kernels._slice_modifiers``) with the band and the diagonal
    moved by ``shift``: those of a sequence of fewer keys, bottom-right aligned."""
    (lowest, highest), offset = variant[0], variant[1]
    return (lowest + shift, highest + shift), offset + shift, variant[2], (variant[3][0], variant[3][1][n])


@compile_
def _weighted_values(values, scores, acc):  # type: ignore[no-untyped-def]
    """acc (M, Ev) ← scores (M, count)·values (count, Ev) for M <= 4: four value rows at a
    time, each read once for all the query rows, acc_re += ((p₀·v₀ₑ + p₁·v₁ₑ) + p₂·v₂ₑ) + p₃·v₃ₑ
    (a row past M reads row M − 1 again and is not written)."""
    _wide_vectors()
    rows, width, count = acc.shape[0], acc.shape[1], values.shape[0]
    last = rows - 1
    a0, a1, a2, a3 = acc[0], acc[min(1, last)], acc[min(2, last)], acc[min(3, last)]
    s0, s1, s2, s3 = scores[0], scores[min(1, last)], scores[min(2, last)], scores[min(3, last)]
    sums = np.zeros((4, width), acc.dtype)
    t0, t1, t2, t3 = sums[0], sums[1], sums[2], sums[3]
    quads = count - count % 4
    for j in range(0, quads, 4):
        v0, v1, v2, v3 = values[j], values[j + 1], values[j + 2], values[j + 3]
        p = (s0[j], s0[j + 1], s0[j + 2], s0[j + 3])
        q = (s1[j], s1[j + 1], s1[j + 2], s1[j + 3])
        r = (s2[j], s2[j + 1], s2[j + 2], s2[j + 3])
        w = (s3[j], s3[j + 1], s3[j + 2], s3[j + 3])
        for e in range(width):
            a, b, c, d = v0[e], v1[e], v2[e], v3[e]
            t0[e] += p[0] * a + p[1] * b + p[2] * c + p[3] * d
            t1[e] += q[0] * a + q[1] * b + q[2] * c + q[3] * d
            t2[e] += r[0] * a + r[1] * b + r[2] * c + r[3] * d
            t3[e] += w[0] * a + w[1] * b + w[2] * c + w[3] * d
    for j in range(quads, count):
        v = values[j]
        for e in range(width):
            t0[e] += s0[j] * v[e]
            t1[e] += s1[j] * v[e]
            t2[e] += s2[j] * v[e]
            t3[e] += s3[j] * v[e]
    a0[:] = t0
    if rows > 1:
        a1[:] = t1
    if rows > 2:
        a2[:] = t2
    if rows > 3:
        a3[:] = t3


# How a unit's products run, by its number of query rows M. Measured on one core of an Intel
# Xeon, 8 heads of 32,768 keys, E = 128, from memory, the whole decode (a GEMV over as many
# bytes: 15.2–16.7 ms): one row by SciPy's GEMVs, 15.4–16.6 ms; the scores of more by one of
# SciPy's GEMMs (a GEMV per row reads the unit again from L2 for each; MKL's GEMM is slower on
# these thin shapes: 35.4 against 25.9 ms for M = 4), their weighted values by
# ``_weighted_values``, four rows at a time: M = 2 and 4 in 20.3–20.5 and 25.8–26.5 ms, where
# a GEMV per row took 24.5–25.4 and 29.1–30.4 ms. For M = 8 (two passes, the second from L2)
# 36.2–37.0 ms, where a kernel of two rows at a time over all M in one pass took 32.0–34.1.
WEIGHTED_ROWS = 4


@compile_
def _scores(queries, keys, head, scores, transposed):  # type: ignore[no-untyped-def]
    """scores (M, count) ← K_u·q_r for each row r of the head's queries: a GEMV of
    queries[0][head] (1, E) for M = 1, else one product with queries[1][head] (E, M) into
    ``transposed`` (count, M), copied."""
    _wide_vectors()
    rows = scores.shape[0]
    if rows == 1:
        np.dot(keys, queries[0][head, 0], scores[0])  # GEMV
        return
    np.dot(keys, queries[1][head], transposed)
    for r in range(rows):
        for j in range(scores.shape[1]):
            scores[r, j] = transposed[j, r]


@compile_
def _unit(queries, cache, u, units, shifts, variant, groups, length, modified, work, partials):  # type: ignore[no-untyped-def]
    """Unit u's partial softmax (m, l, acc of each of its rows) into ``partials``: the
    scores K_u·q (``_scores``), then, per row in cache, the variants, the row maximum m,
    exp(Z − m) and l, then Σ P·V (a GEMV for one row, else ``_weighted_values`` on
    WEIGHTED_ROWS rows at a time)."""
    _wide_vectors()
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
    if rows == 1:
        np.dot(scores[0], values, part_acc[u, 0])  # GEMV
    else:
        for r in range(0, rows, WEIGHTED_ROWS):
            _weighted_values(values, scores[r : r + WEIGHTED_ROWS], part_acc[u, r : r + WEIGHTED_ROWS])


@compile_
def decode_units(queries, cache, units, first, stop, shifts, variant, groups, length, modified, chunk, partials):  # type: ignore[no-untyped-def]
    """The partials of units first … stop − 1 (see the module's docstring); ``length``: L,
    ``modified``: whether any row's scores are modified (softcap, ALiBi, a band that cuts
    a unit)."""
    _wide_vectors()
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
    _wide_vectors()
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
