"""The seed article's self-attention layer in pure Python: the oracle.

Standard library only, lists in and lists out, one line of code per step of the
article's formula::

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
        if d_model < 1 or d_k < 1:
            raise ValueError(f"d_model and d_k: expected >= 1, got d_model={d_model}, d_k={d_k}")
        self.d_model = d_model
        self.d_k = d_k
        if weights is None:
            rng = random.Random(seed)
            self.Wq, self.Wk, self.Wv = (
                [[rng.normalvariate(0, std) for _ in range(d_k)] for _ in range(d_model)] for _ in range(3)
            )
        elif len(weights) != 3:
            raise ValueError(f"weights: expected three matrices (Wq, Wk, Wv), got {len(weights)}")
        else:
            for name, w in zip(("Wq", "Wk", "Wv"), weights, strict=True):
                shape = (len(w), len(w[0]) if w else 0)
                if shape != (d_model, d_k) or any(len(row) != d_k for row in w):
                    raise ValueError(f"weights: expected {name} of shape ({d_model}, {d_k}), got {shape}")
            self.Wq, self.Wk, self.Wv = ([list(map(float, row)) for row in w] for w in weights)

    def trace(self, X: Sequence[Sequence[float]]) -> AttentionSteps:
        """Run the layer on X (L, d_model) and keep every intermediate."""
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
        """Return ``(output, attention_weights)``: (L, d_k) and (L, L)."""
        steps = self.trace(X)
        return steps.output, steps.weights
