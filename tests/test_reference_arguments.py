"""attnlab.reference.SelfAttention checks its arguments and trace's X (issue 24, item 6)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from attnlab import ArgumentError, ArgumentTypeError
from attnlab.reference import SelfAttention


@pytest.mark.parametrize(
    ("X", "message"),
    [
        ([[1.0, 2.0]], r"^X: expected one sequence of shape \(L, 3\), got row 0 of 2 numbers"),
        ([[1.0, 2.0, 3.0], [1.0, 2.0]], r"^X: expected one sequence of shape \(L, 3\), got row 1 of 2 numbers"),
        ([], r"^X: expected one sequence of shape \(L, 3\), got 0 rows"),
        ([[float("nan"), 1.0, 2.0]], r"^X\[0\]\[0\]: expected a finite number, got nan"),
        ([[1.0, float("inf"), 2.0]], r"^X\[0\]\[1\]: expected a finite number, got inf"),
    ],
    ids=["row-too-short", "ragged", "no-rows", "nan", "inf"],
)
def test_trace_refuses_x_of_the_wrong_width_empty_or_not_finite(X: Any, message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        SelfAttention(3, 2).trace(X)


@pytest.mark.parametrize(
    ("X", "message"),
    [
        ("abc", r"^X: expected one sequence .*, got str"),
        ([[True, 1.0, 2.0]], r"^X\[0\]\[0\]: expected a real number, got True"),
        ([[1j, 1.0, 2.0]], r"^X\[0\]\[0\]: expected a real number, got 1j"),
        ([["1", 1.0, 2.0]], r"^X\[0\]\[0\]: expected a real number, got '1'"),
        ([1.0, 2.0, 3.0], r"^X: expected one sequence .*, got row 0: float"),
    ],
    ids=["text", "bool", "complex", "text-entry", "one-row-unnested"],
)
def test_trace_refuses_x_of_the_wrong_type(X: Any, message: str) -> None:
    with pytest.raises(ArgumentTypeError, match=message):
        SelfAttention(3, 2).trace(X)


def test_forward_checks_x_as_trace_does() -> None:
    with pytest.raises(ArgumentError, match=r"^X: expected"):
        SelfAttention(3, 2).forward([[1.0, 2.0]])


def test_a_numpy_array_is_taken_as_its_rows() -> None:
    X = [[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]]
    layer = SelfAttention(3, 2)
    assert layer.trace(np.array(X)) == layer.trace(X)
    assert layer.trace(list(np.array(X))) == layer.trace(X)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"d_model": 0, "d_k": 2}, ArgumentError, r"^d_model: expected an integer >= 1, got 0"),
        ({"d_model": 2, "d_k": -1}, ArgumentError, r"^d_k: expected an integer >= 1, got -1"),
        ({"d_model": 2.5, "d_k": 2}, ArgumentTypeError, r"^d_model: expected an integer >= 1, got 2.5"),
        ({"d_model": 2, "d_k": 2, "seed": "x"}, ArgumentTypeError, r"^seed: expected an integer"),
        ({"d_model": 2, "d_k": 2, "std": -0.1}, ArgumentError, r"^std: expected a number >= 0"),
        ({"d_model": 2, "d_k": 2, "weights": "abc"}, ArgumentTypeError, r"^weights: expected three matrices"),
    ],
    ids=["d_model-zero", "d_k-negative", "d_model-float", "seed-text", "std-negative", "weights-text"],
)
def test_the_constructor_names_each_bad_argument(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        SelfAttention(**kwargs)


def test_weights_with_a_nan_are_refused() -> None:
    eye = [[1.0, 0.0], [0.0, 1.0]]
    with pytest.raises(ArgumentError, match=r"^weights\[0\]\[1\]: expected a finite number, got nan"):
        SelfAttention(2, 2, weights=(eye, [[1.0, float("nan")], [0.0, 1.0]], eye))
