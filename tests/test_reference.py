"""attnlab.reference against the seed program, a hand computation and properties."""

from __future__ import annotations

import math
import random

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

import attnlab as al
from attnlab.reference import SelfAttention, matmul, softmax, transpose

finite = st.floats(-1e4, 1e4, allow_nan=False)


def test_weights_and_results_are_the_seed_programs_bit_for_bit(seed_run):
    _, seed = seed_run
    layer = SelfAttention(seed["d_model"], seed["d_k"])
    assert (layer.Wq, layer.Wk, layer.Wv) == (seed["attn"].Wq, seed["attn"].Wk, seed["attn"].Wv)
    output, weights = layer.forward(seed["X"])
    assert output == seed["output"]
    assert weights == seed["attention_weights"]


def test_matmul_is_the_seed_matrix_multiply_bit_for_bit(seed_run):
    _, seed = seed_run
    rng = random.Random(1)
    a = [[rng.uniform(-1, 1) for _ in range(7)] for _ in range(5)]
    b = [[rng.uniform(-1, 1) for _ in range(3)] for _ in range(7)]
    assert matmul(a, b) == seed["matrix_multiply"](a, b)
    assert transpose(a) == seed["transpose"](a)


def test_the_global_random_generator_is_untouched():
    random.seed(7)
    expected = random.random()
    random.seed(7)
    SelfAttention(8, 6)
    assert random.random() == expected


def test_two_tokens_by_hand():
    # X = I, d_k = 4: Q = [[1,1,1,1],[2,2,2,2]], K = [[1,0,0,0],[0,0,0,0]], V = [[3,0,0,0],[5,0,0,0]]
    wq = [[1.0] * 4, [2.0] * 4]
    wk = [[1.0, 0, 0, 0], [0.0] * 4]
    wv = [[3.0, 0, 0, 0], [5.0, 0, 0, 0]]
    steps = SelfAttention(2, 4, weights=(wq, wk, wv)).trace([[1.0, 0.0], [0.0, 1.0]])
    assert steps.scores == [[1.0, 0.0], [2.0, 0.0]]  # q_i·k_j
    assert steps.scale_factor == 2.0  # √4
    assert steps.scaled_scores == [[0.5, 0.0], [1.0, 0.0]]
    e_half, e_one = math.exp(0.5), math.exp(1.0)
    expected_weights = [[e_half / (e_half + 1), 1 / (e_half + 1)], [e_one / (e_one + 1), 1 / (e_one + 1)]]
    expected_output = [(3 * e_half + 5) / (e_half + 1), (3 * e_one + 5) / (e_one + 1)]
    for row, expected in zip(steps.weights, expected_weights, strict=True):
        assert row == pytest.approx(expected, abs=1e-15)
    assert [row[0] for row in steps.output] == pytest.approx(expected_output, abs=1e-15)
    assert all(row[1:] == [0.0, 0.0, 0.0] for row in steps.output)


@given(st.lists(finite, min_size=1, max_size=20))
def test_softmax_rows_sum_to_one_and_never_overflow(x):
    p = softmax(x)
    assert all(0.0 <= v <= 1.0 and math.isfinite(v) for v in p)
    assert math.fsum(p) == pytest.approx(1.0, abs=1e-12)


@given(st.lists(st.floats(-100, 100), min_size=1, max_size=20), st.floats(-1e3, 1e3))
def test_softmax_is_shift_invariant(x, shift):
    assert softmax([v + shift for v in x]) == pytest.approx(softmax(x), abs=1e-12)


def test_softmax_at_the_extremes():
    assert softmax([1e4, -1e4, 1e4]) == [0.5, 0.0, 0.5]


@settings(max_examples=30)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(1, 5), st.randoms(use_true_random=False))
def test_permuting_the_tokens_permutes_the_output(L, d_model, d_k, rnd):
    layer = SelfAttention(d_model, d_k, seed=rnd.randrange(1000))
    X = [[rnd.uniform(-2, 2) for _ in range(d_model)] for _ in range(L)]
    order = list(range(L))
    rnd.shuffle(order)
    output, weights = layer.forward(X)
    permuted_output, permuted_weights = layer.forward([X[i] for i in order])
    for new, old in enumerate(order):
        assert permuted_output[new] == pytest.approx(output[old], abs=1e-12)
        assert permuted_weights[new] == pytest.approx([weights[old][j] for j in order], abs=1e-12)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="d_k"):
        SelfAttention(4, 0)
    with pytest.raises(ValueError, match="Wk"):
        SelfAttention(2, 2, weights=([[1.0, 0], [0, 1]], [[1.0]], [[1.0, 0], [0, 1]]))


def test_two_weight_matrices_are_refused_by_name():
    w = [[1.0, 0.0], [0.0, 1.0]]
    with pytest.raises(ValueError, match=r"weights: expected three matrices \(Wq, Wk, Wv\), got 2"):
        SelfAttention(2, 2, weights=(w, w))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="weights: expected a \\(Wq, Wk, Wv\\) triple, got 2 items"):
        al.SelfAttention(2, 2, weights=(w, w))
