"""The seed article's self-attention layer in pure Python: the oracle.

Standard library only in its arithmetic, lists in and lists out, one line of code per step
of the article's formula (its arguments are checked as the rest of attnlab checks them)::

    Q = X·Wq    K = X·Wk    V = X·Wv                  (L, d_model) @ (d_model, d_k)
    scores = Q·Kᵀ                                      (L, L)
    scaled = scores / √d_k
    weights = softmax(scaled)   row by row, each row sums to 1
    output = weights·V                                 (L, d_k)

With the default ``seed=42`` the projection matrices are bit-identical to the seed
program's, which calls ``random.seed(42)`` and draws ``normalvariate(0, 0.1)`` for Wq,
then Wk, then Wv, each ``d_model`` rows of ``d_k`` values. The draws come from a
private :class:`random.Random`, so the global generator is never touched.

Every sum is accumulated left to right from 0.0, exactly as the seed's triple loop
does, so the numbers are the seed's to the last bit; the speed-up comes from
transposing the right-hand matrix once and walking rows with ``zip`` instead of
indexing ``B[k][j]`` in the innermost loop.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._validation import fail, int_seed, positive_int, real_number

__all__ = ["AttentionSteps", "SelfAttention", "matmul", "softmax", "transpose"]

Matrix = list[list[float]]


def softmax(x: Sequence[float]) -> list[float]:
    """softmax(x)_i = exp(x_i − max x) / Σ_j exp(x_j − max x).

    Subtracting the maximum leaves the result unchanged and keeps ``exp`` from
    overflowing: the largest exponent is exactly 0.
    """
    max_val = max(x)
    exp_x = [math.exp(v - max_val) for v in x]
    sum_exp = sum(exp_x)
    return [v / sum_exp for v in exp_x]


def _matrix(name: str, matrix: Any, rows: int | None, columns: int, what: str = "") -> Matrix:
    """``matrix`` as a list of lists of floats, once it is a sequence of rows (``rows`` of
    them, or at least one when None) of ``columns`` finite real numbers each; the error
    names ``name`` and, in its expectation, ``what`` the matrix is."""
    shape = f"({rows if rows is not None else 'L'}, {columns})"
    expected = f"{what or 'a matrix'} of shape {shape}"
    if isinstance(matrix, (str, bytes)) or (not isinstance(matrix, Sequence) and not hasattr(matrix, "tolist")):
        raise fail(name, f"{expected}, rows of numbers", type(matrix).__name__, TypeError)
    if hasattr(matrix, "tolist") and not isinstance(matrix, Sequence):
        matrix = matrix.tolist()  # a NumPy array: its rows as lists
    if not len(matrix) or (rows is not None and len(matrix) != rows):
        raise fail(name, expected, f"{len(matrix)} rows")
    checked = []
    for i, row in enumerate(matrix):
        row = row.tolist() if hasattr(row, "tolist") and not isinstance(row, Sequence) else row  # a NumPy row
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
            raise fail(name, f"{expected}, rows of numbers", f"row {i}: {type(row).__name__}", TypeError)
        if len(row) != columns:
            raise fail(name, expected, f"row {i} of {len(row)} numbers")
        checked.append([real_number(f"{name}[{i}][{j}]", v) for j, v in enumerate(row)])
    return checked


def transpose(matrix: Sequence[Sequence[float]]) -> Matrix:
    """Rows become columns: (m, n) -> (n, m)."""
    return [list(column) for column in zip(*matrix, strict=True)]


def _dot(u: Sequence[float], v: Sequence[float]) -> float:
    """Σ_k u_k·v_k, accumulated left to right from 0.0 as the seed's loop does."""
    total = 0.0
    for a, b in zip(u, v, strict=True):
        total += a * b
    return total


def matmul(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> Matrix:
    """(m, n) @ (n, p) -> (m, p): entry (i, j) is the dot product of row i of ``a``
    with column j of ``b``."""
    columns = transpose(b)
    return [[_dot(row, column) for column in columns] for row in a]


@dataclass(frozen=True)
class AttentionSteps:
    """Every intermediate of one forward pass, as nested lists.

    Shapes: Q, K, V (L, d_k); scores, scaled_scores, weights (L, L); output (L, d_k).
    ``scale_factor`` is √d_k, the number the scores are divided by.
    """

    Q: Matrix
    K: Matrix
    V: Matrix
    scores: Matrix
    scale_factor: float
    scaled_scores: Matrix
    weights: Matrix
    output: Matrix


class SelfAttention:
    """The seed's single-head self-attention layer (no masks, no bias).

    Args:
        d_model: width of each input row.
        d_k: width of Q, K and V.
        seed: seed of the private generator the weights are drawn from (default 42,
            the seed program's).
        std: standard deviation of the Gaussian draws (default 0.1).
        weights: explicit ``(Wq, Wk, Wv)``, each (d_model, d_k), instead of drawing.

    Raises:
        ArgumentError: ``d_model`` or ``d_k`` below 1, a negative ``std``, a seed outside
            [0, 2**63), or weights that are not three (d_model, d_k) matrices of finite numbers.
        ArgumentTypeError: any of them of the wrong type.
    """

    def __init__(
        self,
        d_model: int,
        d_k: int,
        *,
        seed: int = 42,
        std: float = 0.1,
        weights: tuple[Matrix, Matrix, Matrix] | None = None,
    ) -> None:
        self.d_model = d_model = positive_int("d_model", d_model)
        self.d_k = d_k = positive_int("d_k", d_k)
        if weights is None:
            std = real_number("std", std, minimum=0.0)
            rng = random.Random(int_seed("seed", seed))
            self.Wq, self.Wk, self.Wv = (
                [[rng.normalvariate(0, std) for _ in range(d_k)] for _ in range(d_model)] for _ in range(3)
            )
        elif not isinstance(weights, (tuple, list)):
            raise fail("weights", "three matrices (Wq, Wk, Wv)", type(weights).__name__, TypeError)
        elif len(weights) != 3:
            raise fail("weights", "three matrices (Wq, Wk, Wv)", len(weights))
        else:
            self.Wq, self.Wk, self.Wv = (
                _matrix("weights", w, d_model, d_k, name) for name, w in zip(("Wq", "Wk", "Wv"), weights, strict=True)
            )

    def trace(self, X: Sequence[Sequence[float]]) -> AttentionSteps:
        """Run the layer on X (L, d_model) and keep every intermediate.

        Args:
            X: L >= 1 rows of d_model finite real numbers (lists, tuples or a NumPy array).

        Raises:
            ArgumentError: X has no rows, a row not of d_model numbers, or a NaN or infinity.
            ArgumentTypeError: X or a row is not a sequence, or an entry not a real number
                (a bool, a string or a complex number).
        """
        X = _matrix("X", X, None, self.d_model, "one sequence")
        Q = matmul(X, self.Wq)  # step 1: Q = X·Wq
        K = matmul(X, self.Wk)  #         K = X·Wk
        V = matmul(X, self.Wv)  #         V = X·Wv
        scores = matmul(Q, transpose(K))  # step 2: Q·Kᵀ
        scale_factor = math.sqrt(self.d_k)  # step 3: divide by √d_k
        scaled_scores = [[v / scale_factor for v in row] for row in scores]
        weights = [softmax(row) for row in scaled_scores]  # step 4: row softmax
        output = matmul(weights, V)  # step 5: weighted sum of the rows of V
        return AttentionSteps(Q, K, V, scores, scale_factor, scaled_scores, weights, output)

    def forward(self, X: Sequence[Sequence[float]]) -> tuple[Matrix, Matrix]:
        """Return ``(output, attention_weights)``: (L, d_k) and (L, L).

        Args:
            X: L >= 1 rows of d_model finite real numbers, checked as :meth:`trace` checks them.
        """
        steps = self.trace(X)
        return steps.output, steps.weights
