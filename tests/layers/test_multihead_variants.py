"""The attention variants in the layers: MultiheadAttention's forward and backward against
float64 torch autograd written out here (and torch's own module for the float mask's
gradient), and the traces' scores against a computation by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import attnlab as al
from attnlab.engine.variants import Rules
from attnlab.trace import build_trace
from oracles import assert_close, optional_module, requires

torch = optional_module("torch")

D, H, N, L, S = 8, 2, 3, 4, 5


def band(lengths: tuple[int, int], is_causal: bool, window, offset: int) -> np.ndarray:
    """Bool (L, S): may query i attend key j, the rules written out one cell at a time."""
    rows, cols = lengths
    keep = np.ones(lengths, dtype=bool)
    for i in range(rows):
        for j in range(cols):
            d = j - (i + offset)
            if is_causal and d > 0:
                keep[i, j] = False
            if window is not None and window[0] is not None and d < -window[0]:
                keep[i, j] = False
            if window is not None and window[1] is not None and d > window[1]:
                keep[i, j] = False
    return keep


def torch_layer(state, query, key, value, rules):
    """The layer's forward in float64 torch: projections, scores → softcap → float mask
    and ALiBi → masks → softmax with the sinks → out projection. Returns the output and
    the leaves whose gradients the test compares."""
    leaves = {name: torch.tensor(x, requires_grad=True) for name, x in state.items()}
    for name, x in (("query", query), ("key", key), ("value", value)):
        leaves[name] = torch.tensor(x, requires_grad=True)
    for name in ("attn_mask", "sinks", "alibi_slopes"):
        if rules.get(name) is not None:
            leaves[name] = torch.tensor(np.asarray(rules[name], dtype=np.float64), requires_grad=name != "alibi_slopes")
    W, b = leaves["in_proj_weight"], leaves["in_proj_bias"]
    q, k, v = (
        leaves[n] @ W[i * D : (i + 1) * D].T + b[i * D : (i + 1) * D] for i, n in enumerate(("query", "key", "value"))
    )

    def split(x):
        return x.reshape(N, -1, H, D // H).transpose(1, 2)  # (N, H, T, E)

    z = split(q) @ split(k).transpose(-1, -2) / math.sqrt(D // H)  # (N, H, L, S)
    if rules.get("softcap") is not None:
        z = rules["softcap"] * torch.tanh(z / rules["softcap"])
    if "attn_mask" in leaves:
        z = z + (leaves["attn_mask"] if leaves["attn_mask"].ndim == 2 else leaves["attn_mask"].reshape(N, H, L, S))
    offset = S - L if rules.get("causal_alignment") == "bottom_right" else 0
    distance = (torch.arange(S)[None, :] - torch.arange(L)[:, None] - offset).double()  # j − (i + offset)
    if "alibi_slopes" in leaves:
        z = z - leaves["alibi_slopes"][..., None, None] * distance.abs()
    keep = torch.tensor(band((L, S), rules.get("is_causal", False), rules.get("window"), offset))
    if rules.get("mask_mod") is not None:
        n, h, i, j = np.ix_(range(N), range(H), range(L), range(S))
        keep = keep & torch.tensor(rules["mask_mod"](n, h, i, j))
    z = z.masked_fill(~keep, -math.inf)
    if "sinks" in leaves:
        sink = leaves["sinks"][None, :, None, None].expand(N, H, L, 1)
        weights = torch.softmax(torch.cat([z, sink], dim=-1), dim=-1)[..., :-1]
    else:
        weights = torch.softmax(z, dim=-1)
    merged = (weights @ split(v)).transpose(1, 2).reshape(N, L, D)
    return merged @ leaves["out_proj.weight"].T + leaves["out_proj.bias"], leaves


def lower_triangle(batch, head, q_idx, kv_idx):
    """FlexAttention's causal mask_mod (True: may attend), head 1 also without key 0."""
    return (kv_idx <= q_idx + 1) & ~((head == 1) & (kv_idx == 0))


RULES = {
    "window and causal": dict(window=(1, 0), is_causal=True),
    "window, bottom-right": dict(window=(2, 1), causal_alignment="bottom_right"),
    "causal bottom-right, softcap": dict(is_causal=True, causal_alignment="bottom_right", softcap=0.7),
    "alibi (H,)": dict(alibi_slopes=[0.5, 0.25], is_causal=True, causal_alignment="bottom_right"),
    "alibi (N, H)": dict(alibi_slopes=np.arange(1, 7).reshape(N, H) / 8),
    "sinks and a one-sided window": dict(sinks=[0.3, -1.0], window=(None, 1)),
    "mask_mod, softcap, float mask": dict(mask_mod=lower_triangle, softcap=2.0, attn_mask="2d"),
    "float mask (N·H, L, S), sinks, window": dict(attn_mask="3d", sinks=[1.0, 0.0], window=(2, 2)),
}


@pytest.mark.parametrize("case", RULES, ids=list(RULES))
@requires("torch")
def test_the_forward_and_every_gradient_match_torch_written_out(case):
    rng = np.random.default_rng(list(RULES).index(case))
    rules = dict(RULES[case])
    if isinstance(rules.get("attn_mask"), str):
        rules["attn_mask"] = rng.standard_normal((L, S) if rules["attn_mask"] == "2d" else (N * H, L, S))
    layer = al.MultiheadAttention(D, H, batch_first=True, seed=1, dtype=np.float64)
    layer.load_state_dict({name: rng.standard_normal(x.shape) for name, x in layer.state_dict().items()})
    query, key, value = rng.standard_normal((N, L, D)), rng.standard_normal((N, S, D)), rng.standard_normal((N, S, D))
    out, _ = layer(query, key, value, need_weights=False, **rules)
    expected, leaves = torch_layer(layer.state_dict(), query, key, value, rules)
    assert_close(out, expected.detach().numpy())
    grad = rng.standard_normal(out.shape)
    grads = layer.backward(grad)
    expected.backward(torch.tensor(grad))
    for ours, name in zip(grads, ("query", "key", "value"), strict=True):
        assert_close(ours, leaves[name].grad.numpy())
    for name, g in layer.grads.items():
        assert_close(g, leaves[name].grad.numpy())
    for name in ("attn_mask", "sinks"):
        ours = getattr(grads, name)
        if name in leaves:
            assert ours.shape == leaves[name].shape
            assert_close(ours, leaves[name].grad.numpy())
        else:
            assert ours is None


@pytest.mark.parametrize("add_bias_kv", [False, True])
@pytest.mark.parametrize("shape", [(L, S), (N * H, L, S)])
@requires("torch")
def test_a_float_masks_gradient_matches_torchs_module(shape, add_bias_kv):
    torch.manual_seed(0)
    module = torch.nn.MultiheadAttention(D, H, add_bias_kv=add_bias_kv, dtype=torch.float64)
    layer = al.interop.from_torch(module)
    rng = np.random.default_rng(2)
    query, key = rng.standard_normal((L, N, D)), rng.standard_normal((S, N, D))
    mask = rng.standard_normal(shape)
    padding = np.zeros((N, S), dtype=bool)
    padding[1, 3] = True  # a bool key_padding_mask as well: it gets no gradient, the float mask keeps its own
    t_mask = torch.tensor(mask, requires_grad=True)
    t_out, _ = module(torch.tensor(query), torch.tensor(key), torch.tensor(key), attn_mask=t_mask,
                      key_padding_mask=torch.tensor(padding))  # fmt: skip
    out, _ = layer(query, key, key, attn_mask=mask, key_padding_mask=padding)
    grad = rng.standard_normal(out.shape)
    t_out.backward(torch.tensor(grad))
    grads = layer.backward(grad)
    assert grads.attn_mask.shape == shape
    assert_close(grads.attn_mask, t_mask.grad.numpy())
    layer(query, key, key, attn_mask=mask < 0)  # a bool mask: no gradient
    assert layer.backward(grad).attn_mask is None and layer.backward(grad).sinks is None


@pytest.mark.parametrize("options", [dict(add_bias_kv=True), dict(add_zero_attn=True)])
@pytest.mark.parametrize("rules", [dict(window=(1, 0)), dict(is_causal=True, causal_alignment="bottom_right")])
@requires("torch")
def test_appended_keys_are_never_masked_by_the_window_or_the_causal_rule(options, rules):
    torch.manual_seed(3)
    module = torch.nn.MultiheadAttention(D, H, **options, dtype=torch.float64)
    layer = al.interop.from_torch(module)
    rng = np.random.default_rng(3)
    query, key = rng.standard_normal((L, N, D)), rng.standard_normal((S, N, D))
    offset = S - L if rules.get("causal_alignment") == "bottom_right" else 0
    ignored = ~band((L, S), rules.get("is_causal", False), rules.get("window"), offset)  # torch pads it: never masked
    t_query = torch.tensor(query, requires_grad=True)
    t_out, t_weights = module(t_query, torch.tensor(key), torch.tensor(key), attn_mask=torch.tensor(ignored))
    out, weights = layer(query, key, key, **rules)
    assert_close(out, t_out.detach().numpy())
    assert_close(weights, t_weights.detach().numpy())
    grad = rng.standard_normal(out.shape)
    t_out.backward(torch.tensor(grad))
    assert_close(layer.backward(grad).query, t_query.grad.numpy())


def test_alibi_and_mask_mod_are_refused_with_appended_keys_and_bad_variants_name_themselves():
    x = np.ones((L, N, D))
    for options in (dict(add_bias_kv=True), dict(add_zero_attn=True)):
        layer = al.MultiheadAttention(D, H, dtype=np.float64, **options)
        for name, value in (("alibi_slopes", [0.5, 0.25]), ("mask_mod", lower_triangle)):
            with pytest.raises(ValueError, match=f"^{name}: expected None with add_bias_kv or add_zero_attn"):
                layer(x, x, x, **{name: value})
        with pytest.raises(ValueError, match=r"^window: expected"):
            layer(x, x, x, window=(-1, 0))
    layer = al.MultiheadAttention(D, H, dtype=np.float64)
    for kwargs, message in (
        (dict(window=(-1, 0)), "^window: expected"),
        (dict(softcap=0.0), "^softcap: expected a positive finite number"),
        (dict(causal_alignment="middle"), "^causal_alignment: expected one of"),
        (dict(sinks=[1.0, 2.0, 3.0]), "^sinks: expected shape"),
        (dict(alibi_slopes=np.ones(3)), "^alibi_slopes: expected shape"),
    ):
        with pytest.raises(ValueError, match=message):
            layer(x, x, x, **kwargs)


def test_mask_mod_has_flexattentions_polarity_the_opposite_of_the_layers_bool_masks():
    layer = al.MultiheadAttention(D, H, dtype=np.float64, seed=4)
    x = np.random.default_rng(4).standard_normal((L, N, D))
    causal, _ = layer(x, x, x, is_causal=True)
    allowed, _ = layer(x, x, x, mask_mod=lambda b, h, i, j: j <= i)  # True: may attend
    ignored, _ = layer(x, x, x, attn_mask=np.triu(np.ones((L, L), dtype=bool), 1))  # True: ignored
    np.testing.assert_array_equal(allowed, causal)
    np.testing.assert_allclose(ignored, causal, atol=1e-15)


# ---- traces: the scores stage is what the engine's softmax read ----


def test_a_softcapped_windowed_trace_holds_the_scores_by_hand_and_torchs_weights():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((6, 5))
    layer = al.SelfAttention(5, 4, seed=3)
    trace = layer.trace(X, rules=Rules(window=(2, 0), softcap=0.3), scale=2.0)
    Q, K = X @ layer.Wq, X @ layer.Wk
    by_hand = 0.3 * np.tanh(2.0 * (Q @ K.T) / 0.3)  # softcap(scale·Q·Kᵀ)
    by_hand[~band((6, 6), False, (2, 0), 0)] = -np.inf  # keys i − 2 … i only
    np.testing.assert_allclose(trace.scaled_scores, by_hand, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(trace.masked, ~band((6, 6), False, (2, 0), 0))
    np.testing.assert_allclose(trace.scores, Q @ K.T, atol=1e-12)  # the raw scores stay raw
    if torch is not None:
        weights = torch.softmax(torch.tensor(by_hand), dim=-1).numpy()
        assert_close(trace.weights, weights)
        assert_close(trace.output, weights @ (X @ layer.Wv))
    assert trace.bias is None
    assert trace.variants == al.trace.Variants(window=(2, 0), softcap=0.3)
    assert "sliding window (2, 0): query i sees keys i − 2 … i" in trace.render(lang="en")
    assert "-inf: a masked key" in trace.render(lang="en") and "滑动窗口 (2, 0)" in trace.render()


@requires("torch")
def test_an_alibi_trace_holds_the_bias_and_the_engines_weights():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((5, 8))
    layer = al.MultiheadAttention(8, 2, seed=6, dtype=np.float64)
    slopes = np.array([0.5, 0.125])
    trace = layer.trace(x, rules=Rules(alibi_slopes=slopes, is_causal=True))
    distance = np.abs(np.arange(5)[None, :] - np.arange(5)[:, None])  # |j − i|
    bias = -slopes[:, None, None] * distance  # (H, L, L)
    by_hand = trace.Q @ np.swapaxes(trace.K, -1, -2) / 2.0 + bias  # scale 1/√4
    by_hand[:, ~band((5, 5), True, None, 0)] = -np.inf
    np.testing.assert_allclose(trace.bias, bias, atol=1e-15)
    np.testing.assert_allclose(trace.scaled_scores, by_hand, rtol=0, atol=1e-12)
    assert_close(trace.weights, torch.softmax(torch.tensor(by_hand), dim=-1).numpy())
    one = trace.head(1)
    assert one.variants.alibi_slopes == (0.125,) and one.bias.shape == (5, 5)
    assert "ALiBi" in trace.variants.describe() and "0.125" in trace.variants.describe()


def test_a_float_mask_sinks_and_mask_mod_in_a_trace():
    rng = np.random.default_rng(7)
    Q, K, V = (rng.standard_normal((2, 4, 3)) for _ in range(3))
    mask = rng.standard_normal((4, 4))

    def no_first_key_for_head_1(batch, head, q_idx, kv_idx):
        return ~((head == 1) & (kv_idx == 0)) & (q_idx >= 0)

    rules = Rules(sinks=[0.5, -0.5], mask_mod=no_first_key_for_head_1)
    trace = build_trace(Q[0], Q, K, V, scale=1.0, is_causal=False, tokens=None, attn_mask=mask, rules=rules)
    z = Q @ np.swapaxes(K, -1, -2) + mask  # (H, L, L)
    z[1, :, 0] = -np.inf
    np.testing.assert_allclose(trace.scaled_scores, z, rtol=0, atol=1e-12)
    np.testing.assert_allclose(trace.bias, np.broadcast_to(mask, (2, 4, 4)), atol=0)
    sinks = np.array([0.5, -0.5])[:, None, None]
    weights = np.exp(z) / (np.exp(z).sum(axis=-1, keepdims=True) + np.exp(sinks))  # the sink joins the sum
    np.testing.assert_allclose(trace.weights, weights, rtol=0, atol=1e-12)
    assert (trace.weights.sum(axis=-1) < 1).all()
    assert trace.variants.attn_mask == "float" and trace.variants.mask_mod == "no_first_key_for_head_1"
    again = al.Trace.from_dict(json.loads(trace.to_json()))
    assert again.variants == trace.variants
    np.testing.assert_array_equal(again.bias, trace.bias)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"variants": {"window": [-1, 0]}}, r"variants: window: expected \(left, right\)"),
        ({"variants": {"softcap": 0}}, "variants: softcap: expected a positive finite number or None"),
        ({"variants": {"shape": 1}}, "variants: expected null or an object of"),
        ({"variants": {"causal_alignment": "left"}}, "variants: causal_alignment: expected one of .* got 'left'"),
        ({"variants": {"alibi_slopes": [1.0, 2.0, 3.0]}}, r"variants: alibi_slopes: expected shape \(H,\) .*H=1"),
        ({"bias": [[0.0]]}, r"bias: expected shape \(3, 3\) as weights"),
    ],
)
def test_a_saved_traces_variants_and_bias_are_checked(change, message):
    saved = al.SelfAttention(3, 2).trace(np.eye(3), rules=Rules(window=(1, None))).to_dict()
    assert saved["variants"]["window"] == [1, None] and saved["bias"] is None
    with pytest.raises(al.ArgumentError, match=message):
        al.Trace.from_dict({**saved, **change}, "t.json")
    old = {k: v for k, v in saved.items() if k not in ("variants", "bias")}  # saved before the fields
    assert al.Trace.from_dict(old).variants is None
