"""attnlab.nn: every layer's output and gradients against torch (float64, 1e-10) and
central finite differences."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnlab import nn  # noqa: E402
from oracles import numerical_gradient, torch_bert_self_attention  # noqa: E402
from oracles import torch_leaf as t  # noqa: E402

TOL = 1e-10


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def check(ours: np.ndarray, theirs: torch.Tensor, tol: float = TOL) -> None:
    np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=tol, atol=tol)


def test_linear_embedding_layernorm_and_gelu_equal_torch():
    x, dy = rng(1).standard_normal((2, 5, 4)), rng(2).standard_normal((2, 5, 3))
    linear = nn.Linear(4, 3, rng=rng(), std=0.5)
    y, back = linear(x)
    dx = back(dy)
    tx, tw, tb = t(x), t(linear.weight.value), t(linear.bias.value)
    ty = torch.nn.functional.linear(tx, tw, tb)  # x·Wᵀ + b, W (out, in)
    (ty * torch.tensor(dy)).sum().backward()
    check(y, ty), check(dx, tx.grad), check(linear.weight.grad, tw.grad), check(linear.bias.grad, tb.grad)

    ids = np.array([[1, 3, 1], [0, 3, 3]])
    embedding = nn.Embedding(5, 4, rng=rng(), std=1.0)
    e, e_back = embedding(ids)
    de = rng(3).standard_normal(e.shape)
    e_back(de)
    te = t(embedding.weight.value)
    (torch.nn.functional.embedding(torch.tensor(ids), te) * torch.tensor(de)).sum().backward()
    check(embedding.weight.grad, te.grad)  # rows used twice get both gradients

    norm = nn.LayerNorm(4, eps=1e-5)
    norm.weight.value[:] = rng(4).standard_normal(4)
    norm.bias.value[:] = rng(5).standard_normal(4)
    n, n_back = norm(x)
    dn = rng(6).standard_normal(n.shape)
    dx = n_back(dn)
    tx, tg, tb = t(x), t(norm.weight.value), t(norm.bias.value)
    tn = torch.nn.functional.layer_norm(tx, (4,), tg, tb, eps=1e-5)
    (tn * torch.tensor(dn)).sum().backward()
    check(n, tn), check(dx, tx.grad), check(norm.weight.grad, tg.grad), check(norm.bias.grad, tb.grad)

    g, g_back = nn.gelu(x * 3)
    dg = g_back(dn)
    tx = t(x * 3)
    tg = torch.nn.functional.gelu(tx, approximate="tanh")
    (tg * torch.tensor(dn)).sum().backward()
    check(g, tg), check(dg, tx.grad)


def test_self_attention_and_the_transformer_block_equal_torch():
    x = rng(7).standard_normal((2, 6, 8))
    mask = np.ones((2, 6), dtype=bool)
    mask[1, 4:] = False  # padding keys
    layer = nn.MultiheadSelfAttention(8, 2, rng=rng(8))
    for p in layer.parameters():
        p.value[...] = rng(9).standard_normal(p.value.shape) * 0.3
    y, back, _ = layer(x, key_padding_mask=~mask)
    dy = rng(10).standard_normal(y.shape)
    dx = back(dy)
    tx = t(x)
    ty, params = torch_bert_self_attention(tx, layer, mask)
    (ty * torch.tensor(dy)).sum().backward()
    check(y, ty), check(dx, tx.grad)
    for p, tp in zip(layer.parameters(), params, strict=True):
        check(p.grad, tp.grad)

    block = nn.TransformerBlock(8, 2, 12, rng=rng(11), eps=1e-5)
    for p in block.parameters():
        p.value[...] += rng(12).standard_normal(p.value.shape) * 0.2
    y, back, _ = block(x, key_padding_mask=~mask)
    dx = back(dy)
    tx = t(x)
    a, attn_params = torch_bert_self_attention(tx, block.attention, mask)
    n1w, n1b, uw, ub, dw, db, n2w, n2b = (t(p.value) for p in block.parameters()[8:])
    h = torch.nn.functional.layer_norm(tx + a, (8,), n1w, n1b, eps=1e-5)
    m = torch.nn.functional.linear(
        torch.nn.functional.gelu(torch.nn.functional.linear(h, uw, ub), approximate="tanh"), dw, db
    )
    ty = torch.nn.functional.layer_norm(h + m, (8,), n2w, n2b, eps=1e-5)
    (ty * torch.tensor(dy)).sum().backward()
    check(y, ty), check(dx, tx.grad)
    for p, tp in zip(block.parameters(), [*attn_params, n1w, n1b, uw, ub, dw, db, n2w, n2b], strict=True):
        check(p.grad, tp.grad)


def test_the_models_inference_path_of_the_layer_is_its_training_forward_bit_for_bit():
    """A pretrained model's block runs the same layer as nn trains: its projections (project,
    merge) around the engine give the forward's output to the bit, over views of the same weights."""
    from attnlab import attention
    from attnlab.layers._multihead_self import MultiheadSelfAttention

    x = rng(13).standard_normal((2, 5, 8))
    layer = nn.MultiheadSelfAttention(8, 2, rng=rng(14))
    for p in layer.parameters():
        p.value[...] += rng(15).standard_normal(p.value.shape) * 0.1
    loaded = MultiheadSelfAttention.of(
        (layer.query, layer.key, layer.value, layer.out), heads=2, kv_heads=2, scale=layer.scale
    )
    q, k, v = loaded.project(x)  # (B, H, L, E), (B, Hk, L, E) twice
    got = loaded.merge(attention(q, k, v, scale=loaded.scale).output)
    np.testing.assert_array_equal(got, layer(x).output)


def test_a_layer_of_fewer_key_value_heads_is_run_not_trained():
    from attnlab import ArgumentError
    from attnlab.layers import Linear
    from attnlab.layers._multihead_self import MultiheadSelfAttention

    w = rng(16).standard_normal
    grouped = MultiheadSelfAttention.of(
        (Linear.of(w((8, 8))), Linear.of(w((4, 8))), Linear.of(w((4, 8))), Linear.of(w((8, 8)))),
        heads=2, kv_heads=1, scale=0.5,
    )  # fmt: skip
    q, k, v = grouped.project(rng(17).standard_normal((1, 3, 8)))
    assert q.shape == (1, 2, 3, 4) and k.shape == v.shape == (1, 1, 3, 4)
    with pytest.raises(ArgumentError, match="kv_heads: expected the 2 query heads"):
        grouped(np.zeros((1, 3, 8)))


def test_the_rnn_backpropagates_through_time_as_torch():
    x = rng(13).standard_normal((3, 7, 4))
    rnn = nn.RNN(4, 5, rng=rng(14))
    y, back = rnn(x)
    dy = rng(15).standard_normal(y.shape)
    dx = back(dy)
    torch_rnn = torch.nn.RNN(4, 5, batch_first=True, nonlinearity="tanh").double()
    with torch.no_grad():
        torch_rnn.weight_ih_l0.copy_(torch.tensor(rnn.input.weight.value))  # both (out, in)
        torch_rnn.bias_ih_l0.copy_(torch.tensor(rnn.input.bias.value))
        torch_rnn.weight_hh_l0.copy_(torch.tensor(rnn.recurrent.value.T))
        torch_rnn.bias_hh_l0.zero_()
    tx = t(x)
    ty, _ = torch_rnn(tx)
    (ty * torch.tensor(dy)).sum().backward()
    check(y, ty), check(dx, tx.grad)
    check(rnn.input.weight.grad, torch_rnn.weight_ih_l0.grad)
    check(rnn.recurrent.grad, torch_rnn.weight_hh_l0.grad.T)
    check(rnn.input.bias.grad, torch_rnn.bias_ih_l0.grad)


def test_cross_entropy_clipping_and_adamw_equal_torch():
    logits, targets = rng(16).standard_normal((4, 3, 6)), np.array([[0, 5, -1], [2, 2, 1], [-1, -1, 3], [4, 0, 0]])
    loss, back = nn.cross_entropy(logits, targets)
    grad = back()
    tl = t(logits)
    tloss = torch.nn.functional.cross_entropy(tl.reshape(-1, 6), torch.tensor(targets.reshape(-1)), ignore_index=-1)
    tloss.backward()
    assert loss == pytest.approx(float(tloss.detach()), abs=TOL)
    check(grad, tl.grad)

    values = [rng(17).standard_normal((3, 2)), rng(18).standard_normal(4)]
    params = [nn.Parameter(v.copy()) for v in values]
    tparams = [torch.tensor(v.copy(), requires_grad=True) for v in values]
    optimizer = nn.AdamW(params, lr=0.1, weight_decay=0.05)
    toptimizer = torch.optim.AdamW(tparams, lr=0.1, weight_decay=0.05)
    for step in range(5):
        for p, tp in zip(params, tparams, strict=True):
            g = rng(100 + step).standard_normal(p.value.shape) * 10
            p.grad[...] = g
            tp.grad = torch.tensor(g.copy())
        norm = nn.clip_grad_norm(params, 1.0)
        tnorm = torch.nn.utils.clip_grad_norm_(tparams, 1.0)
        assert norm == pytest.approx(float(tnorm), rel=1e-12)
        optimizer.step()
        toptimizer.step()
    for p, tp in zip(params, tparams, strict=True):
        check(p.value, tp)


def test_a_small_model_matches_finite_differences():
    """Embedding → TransformerBlock → RNN → Linear → cross-entropy, every parameter's
    gradient against central differences."""
    generator = rng(20)
    embed = nn.Embedding(7, 6, rng=generator, std=0.5)
    block = nn.TransformerBlock(6, 2, 8, rng=generator, eps=1e-5)
    rnn = nn.RNN(6, 5, rng=generator)
    head = nn.Linear(5, 7, rng=generator, std=0.5)
    ids, targets = np.array([[1, 4, 2, 6], [3, 3, 0, 5]]), np.array([[4, 2, 6, -1], [3, 0, 5, 1]])
    modules = [embed, block, rnn, head]

    def loss_and_grads() -> float:
        e, e_back = embed(ids)
        h, h_back, _ = block(e)
        r, r_back = rnn(h)
        logits, head_back = head(r)
        loss, loss_back = nn.cross_entropy(logits, targets)
        for m in modules:
            m.zero_grad()
        e_back(h_back(r_back(head_back(loss_back()))))
        return loss

    loss_and_grads()
    analytic = {id(p): p.grad.copy() for m in modules for p in m.parameters()}
    for m in modules:
        for p in m.parameters():
            corners = [(0,) * p.value.ndim, tuple(s - 1 for s in p.value.shape)]
            numeric = numerical_gradient(loss_and_grads, p.value, indices=corners)
            for index in corners:
                assert analytic[id(p)][index] == pytest.approx(numeric[index], rel=1e-5, abs=1e-8)


def test_a_loss_on_the_attention_weights_backpropagates_as_torch():
    x = rng(21).standard_normal((2, 5, 8))
    layer = nn.MultiheadSelfAttention(8, 2, rng=rng(22))
    for p in layer.parameters():
        p.value[...] = rng(23).standard_normal(p.value.shape) * 0.4
    y, back, weights = layer(x, need_weights=True)
    dy, dw = rng(24).standard_normal(y.shape), rng(25).standard_normal(weights.shape)
    dx = back(dy, dw)
    tx = t(x)
    params = [t(p.value) for p in layer.parameters()]
    wq, bq, wk, bk, wv, bv, wo, bo = params

    def heads(z: torch.Tensor) -> torch.Tensor:
        return z.reshape(2, 5, 2, 4).transpose(1, 2)

    linear = torch.nn.functional.linear
    q, k, v = heads(linear(tx, wq, bq)), heads(linear(tx, wk, bk)), heads(linear(tx, wv, bv))
    tp = torch.softmax(q @ k.transpose(-1, -2) / 2.0, dim=-1)
    ty = linear((tp @ v).transpose(1, 2).reshape(2, 5, 8), wo, bo)
    ((ty * torch.tensor(dy)).sum() + (tp * torch.tensor(dw)).sum()).backward()
    check(weights, tp), check(dx, tx.grad)
    for p, tparam in zip(layer.parameters(), params, strict=True):
        check(p.grad, tparam.grad)


def test_linear_stores_its_weight_as_torch_does():
    linear = nn.Linear(4, 3, rng=rng(30), bias=False)
    assert linear.weight.value.shape == (3, 4)  # (out_features, in_features)
    x = rng(31).standard_normal((2, 4))
    y, _ = linear(x)
    by_hand = [[sum(x[n, i] * linear.weight.value[o, i] for i in range(4)) for o in range(3)] for n in range(2)]
    np.testing.assert_allclose(y, by_hand, rtol=1e-14)
    torch_linear = torch.nn.Linear(4, 3, bias=False).double()
    with torch.no_grad():
        torch_linear.weight.copy_(torch.tensor(linear.weight.value))  # no transpose
    check(y, torch_linear(torch.tensor(x)))


def test_the_old_names_still_work_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="MultiheadSelfAttention"):
        assert nn.SelfAttention is nn.MultiheadSelfAttention
    with pytest.raises(AttributeError):
        nn.NoSuchLayer  # noqa: B018
    x = rng(32).standard_normal((2, 5, 8))
    keep = np.ones((2, 5), dtype=bool)
    keep[0, 3:] = False
    for layer in (nn.MultiheadSelfAttention(8, 2, rng=rng(33)), nn.TransformerBlock(8, 2, 12, rng=rng(34))):
        expected, _, _ = layer(x, key_padding_mask=~keep)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert not np.allclose(expected, layer(x)[0])  # the padding matters
        with pytest.warns(DeprecationWarning, match="key_padding_mask"):
            by_keyword, _, _ = layer(x, key_mask=keep)
        with pytest.warns(DeprecationWarning, match="key_padding_mask"):
            by_position, _, _ = layer(x, keep)
        np.testing.assert_array_equal(by_keyword, expected)
        np.testing.assert_array_equal(by_position, expected)
        with pytest.raises(ValueError, match="key_mask: expected nothing when key_padding_mask is given"):
            layer(x, key_mask=keep, key_padding_mask=~keep)


def test_nn_exports_each_modules_names_once():
    from attnlab.nn import _attention, _layers, _training

    assert nn.__all__ == [*_layers.__all__, *_attention.__all__, *_training.__all__]
    assert len(set(nn.__all__)) == len(nn.__all__)
    assert all(getattr(nn, name) is not None for name in nn.__all__)


def test_train_is_the_loop_written_out():
    """nn.train against the same steps by hand: loss, zero, backward, clip, step."""

    def model_and_optimizer() -> tuple[nn.Linear, nn.AdamW]:
        model = nn.Linear(3, 4, rng=rng(40), std=1.0)
        return model, nn.AdamW(model.parameters(), lr=0.05)

    data = [(rng(41 + i).standard_normal((6, 3)), rng(51 + i).integers(0, 4, 6)) for i in range(5)]

    def loss_fn(model: nn.Linear, batch: tuple) -> tuple:
        logits, back = model(batch[0])
        loss, loss_back = nn.cross_entropy(logits, batch[1])
        return loss, lambda: back(loss_back())

    model, optimizer = model_and_optimizer()
    seen = []
    losses = nn.train(model, data, optimizer, 5, loss_fn, max_grad_norm=0.5,
                      learning_rate=lambda step: 0.01 * (step + 1),
                      progress=lambda step, loss: seen.append((step, loss)))  # fmt: skip
    by_hand, by_hand_optimizer = model_and_optimizer()
    expected = []
    for step, batch in enumerate(data):
        loss, backward = loss_fn(by_hand, batch)
        by_hand_optimizer.lr = 0.01 * (step + 1)
        by_hand.zero_grad()
        backward()
        nn.clip_grad_norm(by_hand.parameters(), 0.5)
        by_hand_optimizer.step()
        expected.append(loss)
    assert losses == expected and seen == list(enumerate(expected))
    np.testing.assert_array_equal(model.weight.value, by_hand.weight.value)
    assert losses[-1] < losses[0]
    with pytest.raises(ValueError, match="batches: expected 6 batches, got 5"):
        nn.train(model, data, optimizer, 6, loss_fn)
