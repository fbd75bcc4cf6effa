"""attnlab as transformers' attention backend, backward: in float64, every parameter's
gradient equals the oracle's (the attention written out by hand in torch float64, in
hf_zoo) to 1e-8 relative, T5's relative_attention_bias and gpt-oss's sinks included; and
eager's, where eager is float64 throughout: GPT-2, BERT, gpt-oss, T5, BART and Whisper
(llama's, qwen2's, mistral's, gemma2's, gemma3's, phi3's, deepseek_v3's and ViT's eager
softmax in float32 even in a float64 model: eager is 3e-7 to 1e-6 off the oracle there,
and with a row of masked keys their float64 minimum becomes −∞ in float32, the row 0/0,
and NaN reaches every gradient)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_zoo import ARCHS, ORACLE, batch, cast, gradient_difference, main_output, register_oracle  # noqa: E402

import attnlab.hf  # noqa: E402

register_oracle()

CASES = [
    (n, pad) for n, a in ARCHS.items() for pad in (("left", "right") if a.kind not in ("vision", "speech") else (None,))
]
EAGER_FLOAT64 = ["gpt2", "bert", "gpt_oss", "t5", "bart", "whisper"]
OWN_PARAMETERS = {"t5": "relative_attention_bias", "gpt_oss": "sinks"}  # attention's own, through its backward


def gradients(model: Any, inputs: dict[str, Any], keep: torch.Tensor, implementation: str) -> dict[str, Any]:
    """d/dθ of Σ w·output over the non-pad positions, w fixed random: every parameter's gradient."""
    model.set_attn_implementation(implementation)
    model.zero_grad(set_to_none=True)
    output = main_output(model(**cast(inputs, torch.float64)))
    weights = torch.randn(output.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    (output * weights)[keep].sum().backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(("name", "padding"), CASES)
def test_every_gradient_equals_the_float64_oracle(name: str, padding: str | None):
    arch = ARCHS[name]
    model, data = arch.build(torch.float64), batch(arch, padding)  # eval(): no dropout anywhere
    expected = gradients(model, data.inputs, data.keep, ORACLE)
    got = gradients(model, data.inputs, data.keep, attnlab.hf.NAME)
    unreached = {n for n, p in model.named_parameters() if p.requires_grad} - got.keys()
    assert all(".pooler." in f".{n}" for n in unreached)  # every parameter but the unused pooler's
    assert gradient_difference(expected, got) <= 1e-8
    own = [g for n, g in got.items() if OWN_PARAMETERS.get(name, "-") in n]
    assert all(g.abs().max() > 0 for g in own)
    if name in OWN_PARAMETERS:
        assert own  # the relative bias and the sinks have their gradients, from attnlab's backward


@pytest.mark.parametrize("name", EAGER_FLOAT64)
def test_every_gradient_equals_eager_where_eager_is_float64(name: str):
    """Right padding: every query row has a key to attend to (over a row of masked keys,
    left padding's first rows, eager's weights are uniform where attnlab's are 0; no output
    the loss reads depends on them, but the comparison keeps to rows both define alike)."""
    arch = ARCHS[name]
    model, data = arch.build(torch.float64), batch(arch, "right" if arch.kind != "speech" else None)
    eager = gradients(model, data.inputs, data.keep, "eager")
    assert gradient_difference(eager, gradients(model, data.inputs, data.keep, ORACLE)) <= 1e-8  # the oracle's check
    assert gradient_difference(eager, gradients(model, data.inputs, data.keep, attnlab.hf.NAME)) <= 1e-8


# A loss on the attention weights too (output_attentions): the weights returned to
# transformers carry their gradient, dZ = P∘(dP − rowsum(P∘dP)) through softcap and the
# scale into dQ and dK. Llama's and Gemma 2's eager softmax in float32, so their reference
# is the float64 oracle (its weights differentiable), eager's within float32's rounding.
WEIGHTS_LOSS = ["llama", "bert", "gemma2", "gpt_oss"]


def gradients_with_weights(model: Any, data: Any, implementation: str, weights_in_loss: bool = True) -> dict[str, Any]:
    """d/dθ of Σ output² (+ Σ over the layers of Σ weights²), the model run with output_attentions."""
    model.set_attn_implementation(implementation)
    model.zero_grad(set_to_none=True)
    out = model(**cast(data.inputs, torch.float64), output_attentions=True)
    loss = main_output(out).square().sum()
    if weights_in_loss:
        loss = loss + sum(a.square().sum() for a in out.attentions)
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", WEIGHTS_LOSS)
def test_a_loss_on_the_weights_gives_eagers_gradients(name: str):
    arch = ARCHS[name]
    model, data = arch.build(torch.float64), batch(arch, "right")
    got = gradients_with_weights(model, data, attnlab.hf.NAME)
    assert gradient_difference(gradients_with_weights(model, data, ORACLE), got) <= 1e-10
    if name in EAGER_FLOAT64:
        assert gradient_difference(gradients_with_weights(model, data, "eager"), got) <= 1e-10
    else:  # eager's float32 softmax; no padding: no row of masked keys, which its float32 makes NaN
        data = batch(arch, None)
        eager = gradients_with_weights(model, data, "eager")
        assert gradient_difference(eager, gradients_with_weights(model, data, attnlab.hf.NAME)) <= 1e-5


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_weights_returned_but_not_in_the_loss_change_no_gradient(name: str):
    arch = ARCHS[name]
    model, data = arch.build(torch.float64), batch(arch, "right")
    without = gradients(model, data.inputs, data.keep, attnlab.hf.NAME)  # no output_attentions
    got = gradients_with_weights(model, data, attnlab.hf.NAME, weights_in_loss=False)
    expected = gradients_with_weights(model, data, ORACLE, weights_in_loss=False)
    assert gradient_difference(expected, got) <= 1e-10
    model.set_attn_implementation(attnlab.hf.NAME)
    model.zero_grad(set_to_none=True)
    out = model(**cast(data.inputs, torch.float64), output_attentions=True)
    weights = torch.randn(main_output(out).shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    (main_output(out) * weights)[data.keep].sum().backward()
    assert all(torch.equal(p.grad, without[n]) for n, p in model.named_parameters() if p.grad is not None)


def test_the_weights_gradient_with_dropout_softcap_sinks_mask_and_gqa_passes_gradcheck():
    """The autograd Function alone, in float64: a fixed dropout seed (the same mask at each
    of gradcheck's calls), softcap, sinks, a float mask and GQA; the loss reads the output
    and the weights (after dropout, as eager's)."""
    from attnlab.engine.variants import Rules
    from attnlab.hf._backend import _EngineFunction

    g = torch.Generator().manual_seed(3)
    q, k, v = (
        torch.randn(shape, generator=g, dtype=torch.float64) for shape in ((1, 4, 5, 3), (1, 2, 6, 3), (1, 2, 6, 2))
    )
    mask = torch.randn(1, 1, 5, 6, generator=g, dtype=torch.float64)
    mask[..., 0, 1] = -torch.inf
    sinks = torch.randn(4, generator=g, dtype=torch.float64)
    options = dict(scale=0.7, enable_gqa=True, dropout_p=0.3, rng=11, need_weights=True)
    mix = torch.randn(1, 4, 5, 6, generator=g, dtype=torch.float64)

    def loss(*inputs: Any) -> Any:
        output, weights = _EngineFunction.apply(*inputs, None, Rules(softcap=1.5), options)  # no length scale
        return output.square().sum() + (weights * mix).sum() + weights.square().sum()

    inputs = tuple(x.requires_grad_() for x in (q, k, v, mask, sinks))
    assert torch.autograd.gradcheck(loss, inputs, atol=1e-7)
