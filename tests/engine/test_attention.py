"""attnlab.attention: a forward that carries its backward, against torch and finite
differences; and the package's public surface."""

from __future__ import annotations

import importlib
import pkgutil

import numpy as np
import pytest

import attnlab as al
from attnlab.engine.fused import _engine as _fused
from oracles import assert_close, numerical_gradient, optional_module, requires

torch = optional_module("torch")


@pytest.mark.parametrize("engine", ["naive", "tiled"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@requires("torch")
def test_the_result_gives_torchs_gradients(engine, dtype):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 9, 8)).astype(dtype)
    k, v = (rng.standard_normal((2, 2, 11, 8)).astype(dtype) for _ in range(2))
    grad = rng.standard_normal((2, 4, 9, 8)).astype(dtype)
    result = al.attention(q, k, v, is_causal=True, enable_gqa=True, engine=engine)
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    expected = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True, enable_gqa=True)
    expected.backward(torch.tensor(grad))
    assert result.engine == engine
    assert_close(result.output, expected.detach().numpy(), dtype)
    grads = result.backward(grad)
    assert isinstance(grads, al.Gradients)
    for ours, theirs in zip(grads, (tq, tk, tv), strict=True):
        assert ours.dtype == dtype
        assert_close(ours, theirs.grad.numpy(), dtype)
    assert_close(grads.key, tk.grad.numpy(), dtype)  # the fields have names


@pytest.mark.parametrize("engine", ["naive", "tiled"])
def test_dropout_from_a_generator_is_replayed_by_the_backward(engine):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 6, 5)) for _ in range(3))
    grad = rng.standard_normal((2, 6, 5))
    result = al.attention(q, k, v, dropout_p=0.4, rng=np.random.default_rng(7), engine=engine)
    seed = result.problem.dropout_seed  # the draw the Generator made, kept by the result

    def loss() -> float:
        out = al.attention(q, k, v, dropout_p=0.4, rng=seed, engine=engine).output
        return float((out * grad).sum())

    assert loss() == pytest.approx(float((result.output * grad).sum()), abs=1e-12)
    for analytic, x in zip(result.backward(grad), (q, k, v), strict=True):
        np.testing.assert_allclose(analytic, numerical_gradient(loss, x), atol=1e-7, rtol=1e-6)


def test_the_wrappers_are_the_result():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((3, 7, 4)) for _ in range(3))
    grad = rng.standard_normal((3, 7, 4))
    result = al.attention(q, k, v, need_weights=True)
    out, weights, lse = al.scaled_dot_product_attention(q, k, v, need_weights=True, return_lse=True)
    assert np.array_equal(out, result.output) and np.array_equal(weights, result.weights)
    assert np.array_equal(lse, result.lse)
    wrapped = al.scaled_dot_product_attention_backward(grad, q, k, v)
    for ours, direct in zip(wrapped, result.backward(grad), strict=True):
        assert np.array_equal(ours, direct)


@requires("torch")
def test_float16_keeps_a_float32_lse_and_backward():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 64, 16)).astype(np.float16) for _ in range(3))
    grad = rng.standard_normal((2, 64, 16)).astype(np.float16)
    result = al.attention(q, k, v, engine="tiled")
    assert result.output.dtype == np.float16 and result.lse.dtype == np.float32
    tq, tk, tv = (torch.tensor(x.astype(np.float64), requires_grad=True) for x in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(tq, tk, tv).backward(torch.tensor(grad.astype(np.float64)))
    for ours, theirs in zip(result.backward(grad), (tq, tk, tv), strict=True):
        assert ours.dtype == np.float16
        expected = theirs.grad.numpy()
        assert np.max(np.abs(ours - expected)) <= 2e-3 * np.max(np.abs(expected)) + 1e-3


def test_backward_checks_the_gradient():
    x = np.ones((3, 2))
    result = al.attention(x, x, x)
    with pytest.raises(ValueError, match=r"grad_output: expected the output's shape \(3, 2\), got shape \(2, 2\)"):
        result.backward(np.ones((2, 2)))
    with pytest.raises(TypeError, match="grad_output: expected dtype float64 as the inputs, got dtype float32"):
        result.backward(np.ones((3, 2), np.float32))


@pytest.mark.parametrize("name", ["is_causal", "enable_gqa", "need_weights"])
@pytest.mark.parametrize("value", ["False", 0, None])
def test_flags_must_be_bools(name, value):
    x = np.ones((1, 3, 2))
    with pytest.raises(TypeError, match=f"{name}: expected True or False, got {value!r}"):
        al.attention(x, x, x, **{name: value})
    assert al.attention(x, x, x, **{name: np.bool_(False)}).output.shape == (1, 3, 2)


def test_public_names_are_attnlabs():
    layer = al.MultiheadAttention(8, 2)
    trace = al.SelfAttention(3, 2).trace(np.eye(3))
    result = al.attention(np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)))
    for obj in (layer, trace, result):
        assert type(obj).__module__ == "attnlab"
    for function in (al.attention, al.scaled_dot_product_attention, al.softmax, al.plot, al.view, al.show):
        assert function.__module__ == "attnlab", function.__name__
    assert repr(layer) == "MultiheadAttention(embed_dim=8, num_heads=2, dtype=float32)"
    assert repr(trace) == "Trace(L=3, d_model=3, heads=1, scale=0.7071)"
    assert repr(result) == "Attention(output 2×2 float64, engine='naive')"


def test_dir_shows_only_the_public_api():
    import attnlab.cli  # noqa: F401  (an imported layer package is an attribute, yet not in dir)

    assert dir(al) == sorted(al.__all__)
    assert al.functional.attention is al.attention


def test_every_module_declares_its_public_names():
    for module in pkgutil.walk_packages(al.__path__, "attnlab."):
        if module.name == "attnlab.engine.fused._kernels" and not _fused.available():
            continue  # it imports numba, the fast extra
        imported = importlib.import_module(module.name)
        assert isinstance(getattr(imported, "__all__", None), list), module.name
        for name in imported.__all__:
            assert hasattr(imported, name), f"{module.name}.{name}"


def test_errors_are_attnlabs_and_the_builtin_kind():
    with pytest.raises(al.ArgumentError) as caught:
        al.attention(np.ones((2, 3)), np.ones((2, 4)), np.ones((2, 3)))
    assert isinstance(caught.value, ValueError) and caught.value.argument == "key"
    with pytest.raises(al.ArgumentTypeError):
        al.attention(np.ones((2, 3), int), np.ones((2, 3)), np.ones((2, 3)))


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda x: al.scaled_dot_product_attention(x, x, x, is_causal="False"), TypeError, "is_causal: expected True"),
        (lambda x: al.scaled_dot_product_attention(x, x, x, need_weights=1), TypeError, "need_weights: expected"),
        (
            lambda x: al.scaled_dot_product_attention(x, x, x, dropout_p=0.5, rng=2**200),
            ValueError,
            r"rng: expected an integer in \[0, 2\*\*63\)",
        ),
        (
            lambda x: al.scaled_dot_product_attention(x, x, x, dropout_p=0.5, rng=-1),
            ValueError,
            "rng: expected an integer in",
        ),
        (
            lambda x: al.scaled_dot_product_attention(x, x, x, dropout_p=0.5, rng="7"),
            TypeError,
            "rng: expected a numpy.random.Generator",
        ),
        (
            lambda x: al.scaled_dot_product_attention(x, x, x, scale=10**400),
            ValueError,
            "scale: expected a number within float range",
        ),
        (lambda x: al.scaled_dot_product_attention(x, x, x, scale=True), TypeError, "scale: expected a real number"),
        (
            lambda x: al.MultiheadAttention(4, 2, dtype="banana"),
            TypeError,
            "dtype: expected float32 or float64, got 'banana'",
        ),
        (lambda x: al.MultiheadAttention(4, 2, seed=-1), ValueError, r"seed: expected an integer in \[0, 2\*\*63\)"),
        (lambda x: al.MultiheadAttention(4, 2, batch_first="yes"), TypeError, "batch_first: expected True or False"),
        (lambda x: al.MultiheadAttention(4, 2).train("no"), TypeError, "mode: expected True or False"),
        (
            lambda x: al.MultiheadAttention(4, 2).load_state_dict("weights"),
            TypeError,
            "state: expected a dict of arrays",
        ),
        (
            lambda x: al.MultiheadAttention(4, 2).load_state_dict(
                {**al.MultiheadAttention(4, 2).state_dict(), "out_proj.bias": ["a", "b", "c", "d"]}
            ),
            TypeError,
            r"state\['out_proj.bias'\]: expected an array of numbers",
        ),
    ],
)
def test_bad_arguments_name_themselves(make, error, message):
    with pytest.raises(error, match=message):
        make(np.ones((2, 3)))


def test_a_state_dict_of_lists_loads():
    layer = al.MultiheadAttention(4, 2, seed=0)
    state = {name: value.tolist() for name, value in layer.state_dict().items()}
    other = al.MultiheadAttention(4, 2, seed=1)
    other.load_state_dict(state)
    for name, value in other.state_dict().items():
        assert value.dtype == np.float32 and np.array_equal(value, layer.state_dict()[name])


@pytest.mark.parametrize("engine", ["naive", "tiled"])
def test_changing_the_output_does_not_change_the_gradients(engine):
    rng = np.random.default_rng(4)
    q, k, v, grad = (rng.standard_normal((2, 5, 3)) for _ in range(4))
    result = al.attention(q, k, v, engine=engine)
    expected = result.backward(grad)
    result.output[...] = 0.0  # the caller's copy
    for ours, before in zip(result.backward(grad), expected, strict=True):
        assert np.array_equal(ours, before)
    with pytest.raises(ValueError, match="read-only"):
        result.lse[...] = 0.0


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda x: al.attention(x, x, x, attn_mask=[[True], [True, False]]), TypeError, "attn_mask: expected an array"),
        (
            lambda x: al.attention(
                np.ones((1, 2, 2, 3)), np.ones((1, 0, 2, 3)), np.ones((1, 0, 2, 3)), enable_gqa=True
            ),
            ValueError,
            "key: expected a number of heads that divides the query's 2, got 0 heads",
        ),
        (lambda x: al.attention(x, x, x, rng="abc"), TypeError, "rng: expected a numpy.random.Generator"),
        (lambda x: al.softmax(x, axis=5), ValueError, r"axis: expected an integer in \[-2, 2\), got 5"),
        (lambda x: al.softmax(x, axis=1.0), TypeError, "axis: expected an integer, got 1.0"),
        (
            lambda x: al.scaled_dot_product_attention_backward(x, x, x, x, output=x),
            ValueError,
            "output, lse: expected both of the forward's results or neither",
        ),
        (
            lambda x: al.scaled_dot_product_attention_backward(x, x, x, x, dropout_p="x", rng=1),
            TypeError,
            "dropout_p: expected a number in",
        ),
        (
            lambda x: al.attention(x, x, x, engine="tiled", need_weights=True),
            ValueError,
            "need_weights: expected False",
        ),
        (lambda x: al.SelfAttention(2, 2, std=-1.0), ValueError, r"std: expected a number >= 0.0, got -1.0"),
        (lambda x: al.SelfAttention(3, 2).trace(np.eye(3), tokens="abc"), TypeError, "tokens: expected 3 labels"),
    ],
)
def test_more_bad_arguments_name_themselves(make, error, message):
    with pytest.raises(error, match=message) as caught:
        make(np.ones((2, 3)))
    assert isinstance(caught.value, al.AttnlabError)


@requires("torch")
@pytest.mark.parametrize(
    "engine", ["naive", "tiled", pytest.param("fused", marks=pytest.mark.skipif(not _fused.available(), reason="jit"))]
)
def test_a_torch_tensor_with_requires_grad_is_refused_naming_the_argument(engine):
    """torch's own Tensor.numpy() refuses a tensor that requires grad (attnlab computes
    outside autograd): attnlab refuses it too, as a TypeError naming the argument and
    saying to detach, not torch's raw RuntimeError; the detached tensor is taken."""
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    tracked = torch.tensor(x, requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):  # torch's own refusal, the convention followed
        tracked.numpy()
    for position, name in enumerate(("query", "key", "value")):
        arguments = [x, x, x]
        arguments[position] = tracked
        with pytest.raises(al.ArgumentTypeError) as caught:
            al.attention(*arguments, engine=engine)
        assert str(caught.value) == (
            f"{name}: expected an array, or a tensor without requires_grad (pass tensor.detach(), as torch's "
            "Tensor.numpy() asks), got a Tensor with requires_grad=True"
        )
    with pytest.raises(al.ArgumentTypeError, match=r"^query: expected an array, or a tensor without requires_grad"):
        al.scaled_dot_product_attention(tracked, x, x)
    expected = torch.nn.functional.scaled_dot_product_attention(tracked, tracked, tracked).detach().numpy()
    assert_close(al.attention(tracked.detach(), x, x, engine=engine).output, expected)


def test_the_fused_engine_without_its_extra_names_the_extra(monkeypatch):
    monkeypatch.setattr(_fused, "available", lambda: False)
    x = np.ones((4, 2))
    with pytest.raises(al.MissingDependencyError, match=r"needs numba and SciPy: pip install 'attnlab\[fast\]'"):
        al.attention(x, x, x, engine="fused")
    assert al.attention(np.ones((8, 1024, 2)), np.ones((8, 1024, 2)), np.ones((8, 1024, 2))).engine == "tiled"


def test_the_engines_are_looked_up_in_one_registry():
    from attnlab.engine import ENGINES

    assert list(ENGINES) == ["naive", "tiled", "fused"]
    assert all(name == engine.name for name, engine in ENGINES.items())
    assert [engine.blocked for engine in ENGINES.values()] == [False, True, True]
    x = np.ones((4, 2))
    with pytest.raises(ValueError, match=r"engine: expected one of \('naive', 'tiled', 'fused'\) or None, got 'fast'"):
        al.attention(x, x, x, engine="fast")
    with pytest.raises(ValueError, match=r"engine: expected one of .* got \['tiled'\]"):
        al.attention(x, x, x, engine=["tiled"])  # unhashable: refused as before, not a TypeError of the dict
    for name, engine in ENGINES.items():
        if engine.available():
            result = al.attention(x, x, x, engine=name)
            assert result.engine == name
            assert (engine.forward(result.problem, None)[2] is None) == engine.blocked  # the naive one holds P
