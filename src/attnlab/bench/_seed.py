"""attnlab.reference against the seed program's algorithm, for ``attnlab bench``: the
same numbers bit for bit, and the time of each."""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable

from .. import reference
from .._timer import best_times

__all__ = ["reference_vs_seed"]


def _seed_matrix_multiply(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    """The seed program's matrix multiply, as it wrote it: the triple loop."""
    m, n, p = len(a), len(b), len(b[0])
    result = [[0.0 for _ in range(p)] for _ in range(m)]
    for i in range(m):
        for j in range(p):
            for k in range(n):
                result[i][j] += a[i][k] * b[k][j]
    return result


def _seed_forward(layer: reference.SelfAttention, X: list[list[float]]) -> list[list[float]]:
    """The seed program's forward (without its prints), on the layer's weights."""
    Q, K, V = (_seed_matrix_multiply(X, w) for w in (layer.Wq, layer.Wk, layer.Wv))
    scores = _seed_matrix_multiply(Q, reference.transpose(K))
    scale_factor = math.sqrt(layer.d_k)
    weights = [reference.softmax([s / scale_factor for s in row]) for row in scores]
    return _seed_matrix_multiply(weights, V)


def reference_vs_seed(sizes: tuple[int, ...] = (16, 32, 64), repeat: int = 3) -> list[dict[str, float]]:
    """attnlab.reference against the seed's algorithm, L = d_model = d_k = n for each n of
    ``sizes``: {n, seed_ms, reference_ms, speedup}, ms the best of ``repeat`` in turns.

    Raises RuntimeError when the two no longer give the same numbers; ArgumentError or
    ArgumentTypeError: ``repeat`` not an integer >= 1."""
    results = []
    for n in sizes:
        rnd = random.Random(n)
        X = [[rnd.uniform(-1, 1) for _ in range(n)] for _ in range(n)]
        layer = reference.SelfAttention(n, n)
        if layer.forward(X)[0] != _seed_forward(layer, X):  # pragma: no cover - the tests check this too
            raise RuntimeError("attnlab.reference no longer reproduces the seed's numbers bit for bit")
        runs: dict[str, Callable[[], object]] = {
            "seed": functools.partial(_seed_forward, layer, X),
            "reference": functools.partial(layer.forward, X),
        }
        ms = best_times(runs, repeat, settle=True, milliseconds=True)
        results.append(
            {"n": n, "seed_ms": ms["seed"], "reference_ms": ms["reference"], "speedup": ms["seed"] / ms["reference"]}
        )
    return results
