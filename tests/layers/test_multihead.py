"""MultiheadAttention against torch.nn.MultiheadAttention, and by finite differences."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import attnlab as al
from helpers import covered_product
from oracles import assert_close, numerical_gradient, optional_module, requires

torch = optional_module("torch")

E, H, N, L, S = 8, 2, 3, 4, 5

DIMENSIONS = [
    [np.float64, np.float32],  # dtype
    [False, True],  # batch_first
    [True, False],  # bias
    [False, True],  # add_bias_kv
    [False, True],  # add_zero_attn
    [None, (6, 3)],  # kdim, vdim
    [True, False],  # batched
]
CONFIGS = list(itertools.product(*DIMENSIONS))
MASKS = [
    "none",
    "attn-bool-2d",
    "attn-float-2d",
    "attn-bool-3d",
    "attn-float-3d",
    "kpm-bool",
    "kpm-float",
    "both",
    "causal",
]
# Every configuration with every mask, 1,152 cases: every run takes their pairwise cover
# (each two values of any two dimensions, a mask and a flag included, meet in some case),
# pytest -m exhaustive the rest.
CASES = covered_product(
    [*DIMENSIONS, MASKS],
    ids=[["float64", "float32"], *[[f"{name}={v}" for v in values] for name, values in [
        ("batch_first", DIMENSIONS[1]), ("bias", DIMENSIONS[2]), ("add_bias_kv", DIMENSIONS[3]),
        ("add_zero_attn", DIMENSIONS[4]), ("kv_dims", DIMENSIONS[5]), ("batched", DIMENSIONS[6]),
    ]], MASKS],
)  # fmt: skip


def layout(shape_len: int, width: int, batch_first: bool, batched: bool) -> tuple[int, ...]:
    if not batched:
        return (shape_len, width)
    return (N, shape_len, width) if batch_first else (shape_len, N, width)


def masks(kind: str, rng: np.random.Generator, batched: bool, dtype) -> dict:
    """Masks that leave every query at least key 0, so torch gives no NaN."""
    n = N if batched else 1
    attn_shape = (L, S) if kind.endswith("2d") or kind == "both" else (n * H, L, S)
    result = {}
    if kind.startswith("attn") or kind == "both":
        attn = rng.random(attn_shape) < 0.4 if "bool" in kind or kind == "both" else rng.standard_normal(attn_shape)
        attn[..., 0] = False if attn.dtype == bool else attn[..., 0]
        result["attn_mask"] = attn if attn.dtype == bool else attn.astype(dtype)
    if kind.startswith("kpm") or kind == "both":
        kpm = rng.random((n, S)) < 0.4 if "bool" in kind or kind == "both" else rng.standard_normal((n, S))
        kpm[:, 0] = False if kpm.dtype == bool else kpm[:, 0]
        kpm = kpm if batched else kpm[0]
        result["key_padding_mask"] = kpm if kpm.dtype == bool else kpm.astype(dtype)
    if kind == "causal":
        result = {"attn_mask": np.triu(np.ones((L, S), dtype=bool), 1), "is_causal": True}
    return result


def to_torch_masks(kwargs: dict) -> dict:
    return {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}


@pytest.mark.parametrize("dtype, batch_first, bias, add_bias_kv, add_zero_attn, kv_dims, batched, mask_kind", CASES)
@requires("torch")
def test_outputs_weights_and_all_gradients_match_torch(
    dtype, batch_first, bias, add_bias_kv, add_zero_attn, kv_dims, batched, mask_kind
):
    index = CONFIGS.index((dtype, batch_first, bias, add_bias_kv, add_zero_attn, kv_dims, batched))
    rng = np.random.default_rng(index * len(MASKS) + MASKS.index(mask_kind))
    torch.manual_seed(index)
    kdim, vdim = kv_dims or (E, E)
    module = torch.nn.MultiheadAttention(
        E,
        H,
        bias=bias,
        add_bias_kv=add_bias_kv,
        add_zero_attn=add_zero_attn,
        kdim=kdim,
        vdim=vdim,
        batch_first=batch_first,
        dtype=getattr(torch, np.dtype(dtype).name),
    )
    layer = al.interop.from_torch(module)
    query = rng.standard_normal(layout(L, E, batch_first, batched)).astype(dtype)
    key = rng.standard_normal(layout(S, kdim, batch_first, batched)).astype(dtype)
    value = rng.standard_normal(layout(S, vdim, batch_first, batched)).astype(dtype)
    mask_kwargs = masks(mask_kind, rng, batched, dtype)

    variants = [(True, True), (True, False), (False, True)]
    if mask_kind == "causal" and (add_bias_kv or add_zero_attn):
        # torch's need_weights=False path then drops attn_mask for SDPA's own is_causal, which also masks the
        # appended bias/zero keys; its need_weights=True path keeps them, as we always do
        variants = variants[:2]
    for need_weights, average in variants:
        module.zero_grad()
        inputs = [torch.tensor(x, requires_grad=True) for x in (query, key, value)]
        t_out, t_weights = module(
            *inputs, need_weights=need_weights, average_attn_weights=average, **to_torch_masks(mask_kwargs)
        )
        out, weights = layer(query, key, value, need_weights=need_weights, average_attn_weights=average, **mask_kwargs)
        assert out.dtype == dtype and out.shape == t_out.shape
        assert_close(out, t_out.detach().numpy(), dtype)
        if need_weights:
            assert weights.shape == t_weights.shape
            assert_close(weights, t_weights.detach().numpy(), dtype)
        else:
            assert weights is None and t_weights is None

        grad = rng.standard_normal(out.shape).astype(dtype)
        t_out.backward(torch.tensor(grad))
        for ours, theirs in zip(layer.backward(grad), inputs, strict=True):
            assert_close(ours, theirs.grad.numpy(), dtype)
        torch_grads = {name: p.grad.numpy() for name, p in module.named_parameters()}
        assert set(layer.grads) == set(layer.state_dict()) == set(torch_grads)
        for name, g in torch_grads.items():
            assert layer.grads[name].shape == g.shape
            assert_close(layer.grads[name], g, dtype)


@requires("torch")
def test_fully_masked_queries_give_zero_attention_where_torch_gives_nan():
    torch.manual_seed(0)
    module = torch.nn.MultiheadAttention(E, H, dtype=torch.float64)
    with torch.no_grad():
        module.in_proj_bias.normal_()
        module.out_proj.bias.normal_()
    layer = al.interop.from_torch(module)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((L, N, E))
    padding = np.zeros((N, L), dtype=bool)
    padding[1] = True  # every key of batch 1 is ignored
    t_out, t_weights = module(*(torch.tensor(x),) * 3, key_padding_mask=torch.tensor(padding))
    out, weights = layer(x, x, x, key_padding_mask=padding)
    assert torch.isnan(t_out[:, 1]).all()  # torch's behaviour, which we differ from on purpose
    assert_close(out[:, [0, 2]], t_out[:, [0, 2]].detach().numpy())
    assert_close(weights[[0, 2]], t_weights[[0, 2]].detach().numpy())
    np.testing.assert_array_equal(weights[1], 0.0)
    np.testing.assert_allclose(out[:, 1], np.broadcast_to(layer.state_dict()["out_proj.bias"], (L, E)))
    grads = layer.backward(np.ones_like(out))
    assert all(np.all(np.isfinite(g)) for g in (*grads, *layer.grads.values()))


@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(add_bias_kv=True, add_zero_attn=True, kdim=3, vdim=5),
        dict(bias=False, batch_first=True),
        dict(dropout=0.5),
    ],
)
def test_input_and_parameter_gradients_match_finite_differences(options):
    rng = np.random.default_rng(1)
    layer = al.MultiheadAttention(E, H, seed=3, dtype=np.float64, **options)
    state = layer.state_dict()
    for name in state:
        state[name] = rng.standard_normal(state[name].shape)
    layer.load_state_dict(state)
    query = rng.standard_normal((N, L, E) if layer.batch_first else (L, N, E))
    key = rng.standard_normal((S, N, layer.kdim))
    value = rng.standard_normal((S, N, layer.vdim))
    if layer.batch_first:
        key, value = key.swapaxes(0, 1).copy(), value.swapaxes(0, 1).copy()
    padding = rng.random((N, S)) < 0.3
    padding[:, 0] = False
    grad_out = rng.standard_normal(query.shape)
    seed_state = layer.generator.bit_generator.state

    def loss() -> float:
        layer.generator.bit_generator.state = seed_state  # the same dropout draw every time
        return float((layer(query, key, value, key_padding_mask=padding)[0] * grad_out).sum())

    loss()
    grads = layer.backward(grad_out)
    for analytic, x in zip(grads, (query, key, value), strict=True):
        np.testing.assert_allclose(analytic, numerical_gradient(loss, x), atol=1e-7, rtol=1e-6)
    params = {name: p.value for name, p in layer.named_parameters()}  # the live arrays, perturbed in place
    for name in layer.grads:
        np.testing.assert_allclose(
            layer.grads[name], numerical_gradient(loss, params[name]), atol=1e-7, rtol=1e-6, err_msg=name
        )


def test_dropout_only_in_training_and_seeded():
    x = np.random.default_rng(2).standard_normal((L, N, E)).astype(np.float32)
    a = al.MultiheadAttention(E, H, dropout=0.5, seed=1)
    b = al.MultiheadAttention(E, H, dropout=0.5, seed=1)
    assert a.training
    out_a, out_b = a(x, x, x)[0], b(x, x, x)[0]
    assert np.array_equal(out_a, out_b)
    assert not np.array_equal(a(x, x, x)[0], out_a)  # a new draw each call
    a.eval()
    assert np.array_equal(a(x, x, x)[0], a(x, x, x)[0])
    no_dropout = al.MultiheadAttention(E, H, seed=1)
    np.testing.assert_allclose(a(x, x, x)[0], no_dropout(x, x, x)[0], atol=1e-6)


def test_initialisation_is_xavier_from_the_seed():
    layer = al.MultiheadAttention(64, 4, seed=0)
    w = layer.state_dict()["in_proj_weight"]
    bound = np.sqrt(6 / (64 + 3 * 64))
    assert w.shape == (192, 64) and np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert np.std(w) == pytest.approx(bound / np.sqrt(3), rel=0.05)  # the std of U(-a, a)
    assert np.array_equal(w, al.MultiheadAttention(64, 4, seed=0).state_dict()["in_proj_weight"])
    assert not np.array_equal(w, al.MultiheadAttention(64, 4, seed=1).state_dict()["in_proj_weight"])
    np.testing.assert_array_equal(layer.state_dict()["in_proj_bias"], 0.0)


@requires("torch")
def test_state_dict_names_and_shapes_are_torchs():
    for options in (dict(), dict(kdim=3, vdim=5, add_bias_kv=True), dict(bias=False)):
        ours = al.MultiheadAttention(E, H, **options).state_dict()
        theirs = torch.nn.MultiheadAttention(E, H, **options).state_dict()
        assert list(ours) == list(theirs)
        assert all(ours[k].shape == tuple(theirs[k].shape) for k in ours)


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_heads: expected a divisor of embed_dim=8, got 3"):
        al.MultiheadAttention(8, 3)
    with pytest.raises(ValueError, match="dropout: expected a number in"):
        al.MultiheadAttention(8, 2, dropout=1.5)
    layer = al.MultiheadAttention(8, 2)
    x = np.ones((4, 2, 8), np.float32)
    with pytest.raises(TypeError, match="query: expected dtype float32 as the layer, got dtype float64"):
        layer(x.astype(np.float64), x, x)
    with pytest.raises(ValueError, match=r"key: expected shape \(L, N, 8\)"):
        layer(x, np.ones((4, 2, 5), np.float32), x)
    with pytest.raises(ValueError, match=r"attn_mask: expected shape \(4, 4\) or \(4, 4, 4\), got shape \(3, 4\)"):
        layer(x, x, x, attn_mask=np.ones((3, 4), bool))
    with pytest.raises(TypeError, match="key_padding_mask: expected a bool array"):
        layer(x, x, x, key_padding_mask=np.ones((2, 4), int))
    with pytest.raises(ValueError, match="state: expected the keys"):
        layer.load_state_dict({"in_proj_weight": np.ones((24, 8))})
    with pytest.raises(RuntimeError, match="backward: call the layer"):
        al.MultiheadAttention(8, 2).backward(x)


@requires("torch")
def test_eval_mode_matches_torchs_fast_path():
    torch.manual_seed(1)
    module = torch.nn.MultiheadAttention(E, H, batch_first=True).eval()  # eligible for torch's fused fast path
    layer = al.interop.from_torch(module)
    x = np.random.default_rng(1).standard_normal((N, L, E)).astype(np.float32)
    padding = np.zeros((N, L), dtype=bool)
    padding[:, -1] = True
    with torch.inference_mode():
        expected = module(*(torch.tensor(x),) * 3, key_padding_mask=torch.tensor(padding), need_weights=False)[0]
    out, _ = layer(x, x, x, key_padding_mask=padding, need_weights=False)
    assert_close(out, expected.numpy(), np.float32)
