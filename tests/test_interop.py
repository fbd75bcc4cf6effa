"""attnlab.interop: torch modules to layers and back."""

from __future__ import annotations

import numpy as np
import pytest

import attnlab as al
from oracles import optional_module, requires

torch = optional_module("torch")


@requires("torch")
@pytest.mark.parametrize(
    "options", [dict(), dict(kdim=3, vdim=5, add_bias_kv=True, batch_first=True), dict(bias=False, add_zero_attn=True)]
)
def test_round_trip_gives_identical_outputs(options):
    layer = al.MultiheadAttention(8, 2, seed=0, **options).eval()
    module = al.interop.to_torch(layer)
    back = al.interop.from_torch(module)
    assert not module.training and not back.training
    for name, value in layer.state_dict().items():
        assert np.array_equal(back.state_dict()[name], value)
    rng = np.random.default_rng(0)
    shape = (2, 4) if layer.batch_first else (4, 2)
    q = rng.standard_normal((*shape, 8)).astype(np.float32)
    k = rng.standard_normal((*shape, layer.kdim)).astype(np.float32)
    v = rng.standard_normal((*shape, layer.vdim)).astype(np.float32)
    assert np.array_equal(layer(q, k, v)[0], back(q, k, v)[0])
    with torch.no_grad():
        expected = module(torch.tensor(q), torch.tensor(k), torch.tensor(v))[0].numpy()
    np.testing.assert_allclose(layer(q, k, v)[0], expected, atol=1e-5, rtol=5e-6)


@requires("torch")
def test_float64_and_wrong_types():
    module = torch.nn.MultiheadAttention(4, 1, dtype=torch.float64)
    assert al.interop.from_torch(module).dtype == np.float64
    with pytest.raises(TypeError, match=r"module: expected a torch\.nn\.MultiheadAttention, got Linear"):
        al.interop.from_torch(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"layer: expected an attnlab\.MultiheadAttention"):
        al.interop.to_torch(module)


def test_missing_torch_says_which_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch":
            raise ImportError("No module named 'torch'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(ImportError, match=r"pip install 'attnlab\[torch\]'"):
        al.interop.to_torch(al.MultiheadAttention(4, 1))


@requires("torch")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_from_torch_refuses_a_float16_module_instead_of_widening_it(dtype):
    module = torch.nn.MultiheadAttention(8, 2, dtype=getattr(torch, dtype))
    with pytest.raises(al.ArgumentTypeError, match=rf"^module: expected a module with float32 or float64 .*, got "
                       rf"parameters of dtype {dtype}$"):  # fmt: skip
        al.interop.from_torch(module)


@requires("torch")
def test_from_torch_refuses_a_module_of_mixed_dtypes():
    module = torch.nn.MultiheadAttention(8, 2)
    module.out_proj.double()
    with pytest.raises(al.ArgumentTypeError, match=r"got parameters of dtype float32, float64$"):
        al.interop.from_torch(module)


@requires("torch")
def test_from_torch_keeps_float32():
    assert al.interop.from_torch(torch.nn.MultiheadAttention(8, 2)).dtype == np.float32
