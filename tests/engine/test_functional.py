"""scaled_dot_product_attention and its backward against torch, finite differences
and properties."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import attnlab as al
from helpers import make, mask_for
from oracles import assert_close, numerical_gradient, optional_module, requires, torch_reference

torch = optional_module("torch")

DTYPES = [np.float64, np.float32]


MASKS = ["none", "bool-2d", "bool-4d", "float-2d", "float-3d"]


# torch refuses attn_mask with is_causal; test_mask_and_causal_combine covers that pair
CASES = [
    case
    for case in itertools.product(DTYPES, MASKS, [False, True], [(5, 5), (4, 7), (7, 3)], [False, True])
    if not (case[1] != "none" and case[2])
]


@pytest.mark.parametrize("dtype, mask_kind, is_causal, lengths, gqa", CASES)
@requires("torch")
def test_forward_and_gradients_match_torch(dtype, mask_kind, is_causal, lengths, gqa):
    rng = np.random.default_rng(CASES.index((dtype, mask_kind, is_causal, lengths, gqa)))
    L, S = lengths
    kv_heads = 2 if gqa else 4
    q = make(rng, (2, 4, L, 8), dtype)
    k = make(rng, (2, kv_heads, S, 8), dtype)
    v = make(rng, (2, kv_heads, S, 3), dtype)
    mask = mask_for(mask_kind, rng, L, S, dtype, drop=0.3, empty_row=1)
    scale = 0.3 if mask_kind == "float-3d" else None
    out, weights, lse = al.scaled_dot_product_attention(
        q, k, v, mask, is_causal=is_causal, scale=scale, enable_gqa=gqa, need_weights=True, return_lse=True
    )
    tq, tk, tv, t_out, t_weights, t_lse = torch_reference(q, k, v, mask, is_causal, scale, gqa)
    assert out.dtype == weights.dtype == lse.dtype == dtype and out.shape == (2, 4, L, 3)
    assert_close(out, t_out.detach().numpy(), dtype)
    assert_close(weights, t_weights, dtype)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(t_lse))
    assert_close(np.where(np.isneginf(lse), 0, lse), np.where(np.isneginf(t_lse), 0, t_lse), dtype)

    grad = make(rng, out.shape, dtype)
    t_out.backward(torch.tensor(grad))
    grads = al.scaled_dot_product_attention_backward(
        grad, q, k, v, mask, is_causal=is_causal, scale=scale, enable_gqa=gqa
    )
    for ours, theirs in zip(grads, (tq, tk, tv), strict=True):
        assert ours.shape == theirs.shape and ours.dtype == dtype
        assert_close(ours, theirs.grad.numpy(), dtype)


def test_mask_and_causal_combine():
    rng = np.random.default_rng(1)
    q, k, v = make(rng, (3, 4), np.float64), make(rng, (6, 4), np.float64), make(rng, (6, 2), np.float64)
    mask = rng.random((3, 6)) > 0.4
    both = np.tril(np.ones((3, 6), dtype=bool)) & mask
    out, weights = al.scaled_dot_product_attention(q, k, v, mask, is_causal=True, need_weights=True)
    expected_out, expected_weights = al.scaled_dot_product_attention(q, k, v, both, need_weights=True)
    assert np.array_equal(out, expected_out) and np.array_equal(weights, expected_weights)


@requires("torch")
def test_broadcast_batch_dimensions_and_their_gradients():
    rng = np.random.default_rng(2)
    q, k, v = make(rng, (3, 1, 5, 4), np.float64), make(rng, (1, 2, 6, 4), np.float64), make(rng, (2, 6, 3), np.float64)
    tq, tk, tv, t_out, _, _ = torch_reference(q, k, v, None, False, None, False)
    out = al.scaled_dot_product_attention(q, k, v)
    assert_close(out, t_out.detach().numpy())
    grad = make(rng, out.shape, np.float64)
    t_out.backward(torch.tensor(grad))
    for ours, theirs in zip(al.scaled_dot_product_attention_backward(grad, q, k, v), (tq, tk, tv), strict=True):
        assert ours.shape == theirs.shape
        assert_close(ours, theirs.grad.numpy())


def test_unbatched_and_float16():
    rng = np.random.default_rng(3)
    q, k, v = make(rng, (4, 8), np.float16), make(rng, (6, 8), np.float16), make(rng, (6, 8), np.float16)
    out = al.scaled_dot_product_attention(q, k, v)
    assert out.dtype == np.float16
    expected = al.scaled_dot_product_attention(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32))
    assert np.array_equal(out, expected.astype(np.float16))


@pytest.mark.parametrize("case", ["plain", "bool mask", "float mask", "causal", "gqa", "dropout", "scale"])
def test_gradients_match_finite_differences(case):
    rng = np.random.default_rng(4)
    q, k, v = (
        make(rng, (2, 4, 3, 5), np.float64),
        make(rng, (2, 2, 4, 5), np.float64),
        make(rng, (2, 2, 4, 3), np.float64),
    )
    if case != "gqa":
        k, v = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    kwargs = {
        "bool mask": dict(attn_mask=np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 1]], dtype=bool)),
        "float mask": dict(attn_mask=make(rng, (4, 3, 4), np.float64)),
        "causal": dict(is_causal=True),
        "gqa": dict(enable_gqa=True),
        "dropout": dict(dropout_p=0.4, rng=123),
        "scale": dict(scale=1.7),
    }.get(case, {})
    grad_out = make(rng, (2, 4, 3, 3), np.float64)

    def loss():
        return float((al.scaled_dot_product_attention(q, k, v, **kwargs) * grad_out).sum())

    grads = al.scaled_dot_product_attention_backward(grad_out, q, k, v, **kwargs)
    for analytic, x in zip(grads, (q, k, v), strict=True):
        np.testing.assert_allclose(analytic, numerical_gradient(loss, x), atol=1e-8, rtol=1e-6)
        assert np.all(np.isfinite(analytic))


def test_fully_masked_rows_give_zero_output_weights_and_gradients():
    rng = np.random.default_rng(5)
    q, k, v = make(rng, (3, 4), np.float64), make(rng, (5, 4), np.float64), make(rng, (5, 2), np.float64)
    for mask in (np.zeros((3, 5), dtype=bool), np.full((3, 5), -np.inf)):
        out, weights, lse = al.scaled_dot_product_attention(q, k, v, mask, need_weights=True, return_lse=True)
        assert np.array_equal(out, np.zeros_like(out)) and np.array_equal(weights, np.zeros_like(weights))
        assert np.all(np.isneginf(lse))
        grads = al.scaled_dot_product_attention_backward(np.ones_like(out), q, k, v, mask)
        assert all(np.array_equal(g, np.zeros_like(g)) for g in grads)


@pytest.mark.parametrize("engine", ["naive", "tiled"])
def test_non_finite_inputs_do_not_crash(engine):
    q = np.array([[np.nan, 1.0], [np.inf, 0.0], [1.0, 1.0]])
    k = np.array([[1.0, 2.0], [-np.inf, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even a RuntimeWarning
        out = al.scaled_dot_product_attention(q, k, k, engine=engine)
        al.scaled_dot_product_attention_backward(np.ones((3, 2)), q, k, k, engine=engine)
    assert out.shape == (3, 2) and np.isnan(out[0]).all()


class TestDropout:
    q, k, v = (np.random.default_rng(6).standard_normal((2, 3, 6, 4)) for _ in range(3))

    def test_p_zero_is_the_identity(self):
        plain = al.scaled_dot_product_attention(self.q, self.k, self.v)
        assert np.array_equal(al.scaled_dot_product_attention(self.q, self.k, self.v, dropout_p=0.0, rng=1), plain)

    def test_the_same_seed_gives_the_same_output_and_weights_are_zero_or_scaled(self):
        a, wa = al.scaled_dot_product_attention(self.q, self.k, self.v, dropout_p=0.5, rng=7, need_weights=True)
        b = al.scaled_dot_product_attention(self.q, self.k, self.v, dropout_p=0.5, rng=7)
        c = al.scaled_dot_product_attention(self.q, self.k, self.v, dropout_p=0.5, rng=8)
        assert np.array_equal(a, b) and not np.array_equal(a, c)
        _, plain = al.scaled_dot_product_attention(self.q, self.k, self.v, need_weights=True)
        kept = wa != 0
        np.testing.assert_allclose(wa[kept], plain[kept] * 2, rtol=1e-15)
        assert 0.4 < kept.mean() < 0.6
        gen = np.random.default_rng(0)
        assert not np.array_equal(
            al.scaled_dot_product_attention(self.q, self.k, self.v, dropout_p=0.5, rng=gen),
            al.scaled_dot_product_attention(self.q, self.k, self.v, dropout_p=0.5, rng=gen),
        )

    @pytest.mark.slow
    def test_the_mean_of_many_draws_approaches_the_output_without_dropout(self):
        plain = al.scaled_dot_product_attention(self.q, self.k, self.v)
        draws = [al.scaled_dot_product_attention(self.q, self.k, self.v, dropout_p=0.3, rng=s) for s in range(2000)]
        std_error = np.std(draws, axis=0) / np.sqrt(len(draws))
        assert np.all(np.abs(np.mean(draws, axis=0) - plain) < 5 * std_error + 1e-12)

    def test_backward_uses_the_forwards_mask(self):
        grad = np.ones((2, 3, 6, 4))
        _, weights = al.scaled_dot_product_attention(self.q, self.k, self.v, dropout_p=0.5, rng=9, need_weights=True)
        _, _, grad_v = al.scaled_dot_product_attention_backward(grad, self.q, self.k, self.v, dropout_p=0.5, rng=9)
        np.testing.assert_allclose(grad_v, np.swapaxes(weights, -1, -2) @ grad, atol=1e-14)


BAD_CALLS = [
    (dict(query=np.ones(3)), ValueError, r"query: expected an array with at least 2 dimensions, got shape \(3,\)"),
    (
        dict(key=np.ones((5, 3))),
        ValueError,
        r"key: expected last dimension E=4 as in query \(2, 4\), got shape \(5, 3\)",
    ),
    (dict(value=np.ones((4, 2))), ValueError, r"value: expected S=5 rows as in key \(5, 4\), got shape \(4, 2\)"),
    (dict(key=np.ones((5, 4), np.float32)), TypeError, "query, key, value: expected one dtype"),
    (
        dict(query=np.ones((2, 4), int)),
        TypeError,
        "query: expected a float16, float32 or float64 array, got dtype int64",
    ),
    (dict(attn_mask=np.ones((2, 5), int)), TypeError, "attn_mask: expected a bool array"),
    (
        dict(attn_mask=np.ones((3, 5), bool)),
        ValueError,
        r"attn_mask: expected a shape that broadcasts to the attention "
        r"shape \(2, 5\), got shape \(3, 5\)",
    ),
    (dict(dropout_p=1.0), ValueError, r"dropout_p: expected a number in \[0, 1\), got 1.0"),
    (dict(dropout_p=-0.1), ValueError, "dropout_p"),
    (dict(scale=float("nan")), ValueError, "scale: expected a finite number"),
    (dict(engine="fast"), ValueError, "engine: expected one of"),
    (dict(rng="seed", dropout_p=0.1), TypeError, "rng: expected a numpy.random.Generator"),
]


@pytest.mark.parametrize("change, error, message", BAD_CALLS)
def test_bad_arguments_name_the_argument_expected_and_given(change, error, message):
    args = dict(query=np.ones((2, 4)), key=np.ones((5, 4)), value=np.ones((5, 2))) | change
    with pytest.raises(error, match=message):
        al.scaled_dot_product_attention(**args)


def test_bad_gqa_and_batch_shapes():
    q = np.ones((1, 6, 2, 4))
    with pytest.raises(ValueError, match="key: expected a number of heads that divides the query's 6, got 4 heads"):
        al.scaled_dot_product_attention(q, np.ones((1, 4, 3, 4)), np.ones((1, 4, 3, 4)), enable_gqa=True)
    with pytest.raises(ValueError, match="batch dimensions that broadcast together"):
        al.scaled_dot_product_attention(q, np.ones((2, 5, 3, 4)), np.ones((2, 5, 3, 4)))
    with pytest.raises(ValueError, match=r"grad_output: expected the output's shape \(1, 6, 2, 4\)"):
        al.scaled_dot_product_attention_backward(np.ones((6, 2, 4)), q, q, q)


def test_return_weights_is_need_weights_deprecated_name():
    q = np.random.default_rng(0).standard_normal((2, 3, 4))
    expected = al.scaled_dot_product_attention(q, q, q, need_weights=True)
    with pytest.warns(DeprecationWarning, match="return_weights is deprecated.*use need_weights") as caught:
        deprecated = al.scaled_dot_product_attention(q, q, q, return_weights=True)
    assert caught[0].filename == __file__  # the warning points at the caller
    for new, old in zip(expected, deprecated, strict=True):
        np.testing.assert_array_equal(new, old)
    with pytest.warns(DeprecationWarning):
        assert isinstance(al.scaled_dot_product_attention(q, q, q, return_weights=False), np.ndarray)
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="return_weights: expected True or False"):
        al.scaled_dot_product_attention(q, q, q, return_weights=1)
    for need_weights in (True, False):
        with pytest.raises(TypeError, match="need_weights, return_weights: expected one of them"):
            al.scaled_dot_product_attention(q, q, q, need_weights=need_weights, return_weights=True)
    with pytest.raises(TypeError, match="need_weights: expected True or False, got None"):
        al.scaled_dot_product_attention(q, q, q, need_weights=None)  # flags are bools, as before
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # need_weights itself warns nothing
        al.scaled_dot_product_attention(q, q, q, need_weights=False)


def test_softmax_public():
    x = np.array([[1e4, -1e4, 1e4], [-np.inf, -np.inf, -np.inf]])
    np.testing.assert_array_equal(al.softmax(x), [[0.5, 0, 0.5], [0, 0, 0]])
    np.testing.assert_allclose(al.softmax(np.arange(6.0).reshape(2, 3), axis=0).sum(axis=0), 1.0)


@pytest.mark.parametrize("engine", ["naive", "tiled"])
def test_empty_sequences(engine):
    q, k, v = np.ones((2, 3, 4)), np.ones((2, 0, 4)), np.ones((2, 0, 5))
    out, lse = al.scaled_dot_product_attention(q, k, v, engine=engine, return_lse=True)
    assert np.array_equal(out, np.zeros((2, 3, 5))) and np.all(np.isneginf(lse))
    grads = al.scaled_dot_product_attention_backward(np.ones((2, 3, 5)), q, k, v, engine=engine)
    assert [g.shape for g in grads] == [(2, 3, 4), (2, 0, 4), (2, 0, 5)] and not grads[0].any()
    empty = al.scaled_dot_product_attention(np.ones((2, 0, 4)), np.ones((2, 3, 4)), np.ones((2, 3, 5)), engine=engine)
    assert empty.shape == (2, 0, 5)
