"""How a page carries its numbers and masks as text: base64 of little-endian floats
(exact, or float24), of fixed-point vectors (``fixedN``: N bits a number, a step per
vector), and a mask as runs per row. assets/js/decoding.js decodes each (``decode``, ``maskFromRuns``).
"""

from __future__ import annotations

import base64

import numpy as np

from .._validation import Array

__all__ = ["FIXED_BITS", "binary", "fixed_bits", "mask_runs"]

FIXED_BITS = tuple(range(16, 9, -1))  # the fixed-point widths a page may use, most precise first
_CHUNK = 1 << 20  # numbers packed at a time (the bits of 2²⁰ numbers: at most 16 MiB at once)


def fixed_bits(dtype: str) -> int:
    """N of "fixedN", else 0."""
    return int(dtype[5:]) if dtype.startswith("fixed") else 0


def binary(x: Array, dtype: str) -> str:
    """A float array as base64: "float64" and "float32" exact (NaN and ±∞ included), row
    major, little-endian; "float24" float32 rounded to nearest with 16 mantissa bits
    (2⁻¹⁷ relative), its top three bytes; "fixedN" (:data:`FIXED_BITS`) each vector (the
    last axis, w numbers) as N-bit whole numbers u ∈ [0, 2·m], m = 2^(N−1) − 1, its value
    (u − m)·step with step = max|x| / m (float32), every vector's step first (float32, in
    order) then the u, N bits each, big-endian, packed without gaps. A fixed number is off
    by at most step/2 (its vector's largest |x| / (2^N − 2)), plus float32's rounding of
    the step; it carries finite numbers only (a page of others uses float24)."""
    if dtype.startswith("fixed"):
        return _fixed(x, fixed_bits(dtype))
    if dtype != "float24":
        return base64.b64encode(
            np.ascontiguousarray(x, dtype="<f8" if dtype == "float64" else "<f4").tobytes()
        ).decode()
    bits = np.ascontiguousarray(np.where(np.isnan(x), np.nan, x), dtype="<f4").view("<u4")  # one NaN pattern
    near_top = (bits & 0x7FFFFFFF) >= 0x7F7FFF80  # rounding up would reach ∞ (or already is ∞, NaN)
    rounded = np.where(near_top, bits, bits + 0x80)
    return base64.b64encode(rounded.view(np.uint8).reshape(-1, 4)[:, 1:].tobytes()).decode()


def _fixed(x: Array, bits: int) -> str:
    """See :func:`binary`: "fixed{bits}"."""
    vectors = np.asarray(x, dtype=np.float64).reshape(-1, x.shape[-1])  # (vectors, w): one vector a row
    most = (1 << (bits - 1)) - 1
    step = (np.abs(vectors).max(axis=1, initial=0.0) / most).astype("<f4")  # (vectors,)
    divisor = np.where(step > 0, step, 1).astype(np.float64)
    units = np.clip(np.rint(vectors / divisor[:, None]), -most, most).astype(np.uint32).reshape(-1)  # (n,)
    units = units + np.uint32(most)  # 0 … 2·most (the wrap of a negative's uint32 undone)
    shifts = np.arange(bits - 1, -1, -1, dtype=np.uint32)
    packed = [
        np.packbits(((units[start : start + _CHUNK, None] >> shifts) & 1).astype(np.uint8).reshape(-1))
        for start in range(0, len(units), _CHUNK)  # each chunk a whole number of bytes: _CHUNK·bits % 8 == 0
    ]
    return base64.b64encode(step.tobytes() + b"".join(p.tobytes() for p in packed)).decode()


def mask_runs(masked: Array) -> list[list[list[int]]]:
    """Masks (M, L, S) as runs: per mask, per row, the lengths of its runs of keys, unmasked
    first (0 when the row starts masked), alternating; they sum to S. A causal row is two
    numbers, a windowed one three."""
    out = []
    for mask in masked:
        rows = []
        for row in mask:
            changes = np.flatnonzero(row[1:] != row[:-1]) + 1  # where a run starts, past the first
            runs = np.diff(np.concatenate([[0], changes, [len(row)]])).tolist()
            rows.append([0, *runs] if len(row) and row[0] else runs)
        out.append(rows)
    return out
