"""The decode path's numba kernels: a few queries against a long key/value cache, read
once (``_decode`` schedules them; letters as in ``_problem``).

The cache is cut into units of at most DECODE_CHUNK keys of one key/value head. A unit
reads its keys and values once, for the M = G·L query rows of its head's group (the G
query heads that share it, L queries each), and leaves a partial softmax: per row its
maximum m, its sum l = Σ_j e^(Z_j − m) and acc = Σ_j e^(Z_j − m)·V_j. The units of a head
are then merged by their lse in a fixed order (``merge``), so the bits never depend on
how the units were shared among threads. Nothing here holds the GIL.

Arrays: ``queries`` = each head's rows scaled, scale·Q (Nk, M, E); the keys and values as
flat arrays of their memory, ``cache`` = (key, key_heads, value, value_heads): head h's key
row j (E elements) starts at key_heads[h] + j·E, its value row (Ev elements) at
value_heads[h] + j·Ev, so that a cache's view is read where it lies, uncopied; ``units``
(U, 3): (head, first key, stop); the partials m, l (U, M) and acc (U, M, Ev); ``shifts``
(Nk,): how far each head's diagonal lies from the problem's (key_length − S with
bottom-right alignment and ragged lengths, else 0); ``variant`` as ``_tasks._variant``'s.
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
    compile_sum,
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
# Xeon, 8 heads of 32,768 keys, E = 128, from memory (a stream over the keys: 8.6–9.5 ms):
# the scores of four rows by ``_four_rows_scores`` in 10.8–11.1 ms, where SciPy's GEMM took
# 15.7–16.3 (it copies the keys into its own layout) and a kernel of one or two key rows at a
# time 16.3 and 14.3 (each sum of E products then ends in a horizontal sum of its own). One
# row by SciPy's GEMV. The weighted values of four rows by ``_weighted_values`` in 11.3–12.0
# ms, where SciPy's GEMM took 32–33 and eight value rows at a time 12.3–12.6; an earlier
# measure of the whole decode: M = 2 and 4 in 20.3–20.5 and 25.8–26.5 ms, where a GEMV per
# row took 24.5–25.4 and 29.1–30.4 ms (MKL's GEMM is slower on these thin shapes).
WEIGHTED_ROWS = 4


@compile_sum
def _four_rows_scores(keys, rows, scores):  # type: ignore[no-untyped-def]
    """scores (M, count) ← K·q_r for the M <= 4 query rows ``rows`` (M, E): four key rows
    at a time, each read once for all the query rows, each of the 16 sums of E products in
    the order that LLVM's vectors give it (reassociated, as ``_row_sum``'s: the same bits
    for any thread count, other bits on another instruction set). A row past M reads row
    M − 1 again and is not written."""
    _wide_vectors()
    count, width, last = keys.shape[0], keys.shape[1], scores.shape[0] - 1
    q0, q1, q2, q3 = rows[0], rows[min(1, last)], rows[min(2, last)], rows[min(3, last)]
    zero = _constants(scores)[6]
    quads = count - count % 4
    for j in range(0, quads, 4):
        k0, k1, k2, k3 = keys[j], keys[j + 1], keys[j + 2], keys[j + 3]
        s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = zero  # s_rk: query row r, key row j + k
        s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = zero
        for e in range(width):
            a, b, c, d = k0[e], k1[e], k2[e], k3[e]
            s00, s01, s02, s03 = s00 + q0[e] * a, s01 + q0[e] * b, s02 + q0[e] * c, s03 + q0[e] * d
            s10, s11, s12, s13 = s10 + q1[e] * a, s11 + q1[e] * b, s12 + q1[e] * c, s13 + q1[e] * d
            s20, s21, s22, s23 = s20 + q2[e] * a, s21 + q2[e] * b, s22 + q2[e] * c, s23 + q2[e] * d
            s30, s31, s32, s33 = s30 + q3[e] * a, s31 + q3[e] * b, s32 + q3[e] * c, s33 + q3[e] * d
        scores[0, j], scores[0, j + 1], scores[0, j + 2], scores[0, j + 3] = s00, s01, s02, s03
        if last >= 1:
            scores[1, j], scores[1, j + 1], scores[1, j + 2], scores[1, j + 3] = s10, s11, s12, s13
        if last >= 2:
            scores[2, j], scores[2, j + 1], scores[2, j + 2], scores[2, j + 3] = s20, s21, s22, s23
        if last >= 3:
            scores[3, j], scores[3, j + 1], scores[3, j + 2], scores[3, j + 3] = s30, s31, s32, s33
    for j in range(quads, count):  # the last count % 4 keys, one at a time
        k0 = keys[j]
        s00 = s10 = s20 = s30 = zero
        for e in range(width):
            s00, s10, s20, s30 = s00 + q0[e] * k0[e], s10 + q1[e] * k0[e], s20 + q2[e] * k0[e], s30 + q3[e] * k0[e]
        scores[0, j] = s00
        if last >= 1:
            scores[1, j] = s10
        if last >= 2:
            scores[2, j] = s20
        if last >= 3:
            scores[3, j] = s30


@compile_
def _scores(queries, keys, head, scores):  # type: ignore[no-untyped-def]
    """scores (M, count) ← K_u·q_r for each row r of the head's queries, queries[head]
    (M, E): a GEMV for M = 1, else ``_four_rows_scores`` on four rows at a time."""
    _wide_vectors()
    rows = scores.shape[0]
    if rows == 1:
        np.dot(keys, queries[head, 0], scores[0])  # GEMV
        return
    for r in range(0, rows, 4):
        _four_rows_scores(keys, queries[head, r : r + 4], scores[r : r + 4])


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
    count, width, rows = stop - start, queries.shape[2], queries.shape[1]
    keys = key[key_heads[head] + start * width : key_heads[head] + stop * width].reshape((count, width))
    values_width = part_acc.shape[2]
    at = value_heads[head]
    values = value[at + start * values_width : at + stop * values_width].reshape((count, values_width))
    scores = work[: rows * count].reshape((rows, count))  # Z, then P, (M, count)
    _scores(queries, keys, head, scores)
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
    work = np.empty(queries.shape[1] * chunk, queries.dtype)
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
